//! What the toolkit's tests that stream a long log measure with (the
//! `test-support` feature, for dev-dependencies only): this process's peak
//! memory, and a store holding one long log to stream. The runner's and
//! the dashboard's tests use it, so both measure the same way.

use std::io;
use std::path::Path;

use crate::{LogStream, NewRun, Result, RunId, RunStatus, Store};

/// This process's peak resident memory, in bytes (`VmHWM` of
/// `/proc/self/status`).
pub fn peak_rss() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| io::Error::other("/proc/self/status has no VmHWM line in kB"))?;
    Ok(kb * 1024)
}

/// Resets this process's peak resident memory to what it holds now.
pub fn reset_peak() -> io::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
}

/// Writes a store at `path` with one finished run, "long", of workload
/// "w" of experiment "e", whose stdout is `bytes` bytes of
/// `0123456789abcdef` (a whole number of 1 MiB pieces) then `end`, if any.
pub fn long_log_store(path: &Path, bytes: usize, end: &[u8]) -> Result<RunId> {
    let mut store = Store::open(path)?;
    let e = store.experiment("e")?;
    let w = store.workload(e, "w", None, 0)?;
    let new = NewRun {
        name: "long".into(),
        command: vec!["job.sh".into()],
        collocation: "-".into(),
        host: "h".into(),
        ..Default::default()
    };
    let (id, _) = store.add_run(w, &new)?;
    let piece: Vec<u8> = b"0123456789abcdef".repeat(1 << 16);
    for _ in 0..bytes / piece.len() {
        store.append_log(id, LogStream::Stdout, 1, &piece)?;
    }
    if !end.is_empty() {
        store.append_log(id, LogStream::Stdout, 2, end)?;
    }
    store.finish_run(id, RunStatus::Finished, Some(0), None)?;
    Ok(id)
}
