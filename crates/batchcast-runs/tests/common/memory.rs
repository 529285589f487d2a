//! What a test that streams a long log costs: this process's peak memory,
//! and a store holding one long log to stream. batchcast-ui's download test
//! includes this file too (by path), so both crates measure the same way.

#![allow(dead_code)]

use std::path::Path;

use batchcast_store::{LogStream, NewRun, RunId, RunStatus, Store};

/// This process's peak resident memory, in bytes.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Resets this process's peak resident memory to what it holds now.
pub fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// Writes a store at `path` with one finished run, "long", of workload
/// "w" of experiment "e", whose stdout is `bytes` bytes of
/// `0123456789abcdef` (a whole number of 1 MiB pieces) then `end`, if any.
pub fn long_log_store(path: &Path, bytes: usize, end: &[u8]) -> RunId {
    let mut store = Store::open(path).unwrap();
    let e = store.experiment("e").unwrap();
    let w = store.workload(e, "w", None, 0).unwrap();
    let new = NewRun {
        name: "long".into(),
        command: vec!["job.sh".into()],
        collocation: "-".into(),
        host: "h".into(),
        ..Default::default()
    };
    let (id, _) = store.add_run(w, &new).unwrap();
    let piece: Vec<u8> = b"0123456789abcdef".repeat(1 << 16);
    for _ in 0..bytes / piece.len() {
        store.append_log(id, LogStream::Stdout, 1, &piece).unwrap();
    }
    if !end.is_empty() {
        store.append_log(id, LogStream::Stdout, 2, end).unwrap();
    }
    store
        .finish_run(id, RunStatus::Finished, Some(0), None)
        .unwrap();
    id
}
