//! A job's output, bounded: a job that writes far more than the log cap
//! leaves its run the first and the last half of the cap with a note of
//! what was dropped between them, and the runner's memory stays bounded
//! (the recorder's queue is bounded in bytes) however much it writes; an
//! MLflow export streams a long log to its file. A test binary of its own,
//! its tests one at a time, so that the process's peak memory (reset before
//! each) is one test's.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use batchcast_runs::gpu::FakeGpus;
use batchcast_runs::plan::Plan;
use batchcast_runs::runner::{run_plan, RunOptions};
use batchcast_runs::{LogStream, RunFilter, RunStatus, Store};
use batchcast_store::test_support;

/// One test at a time measures the process's memory.
static ALONE: Mutex<()> = Mutex::new(());

#[test]
fn a_job_writing_far_past_the_log_cap_keeps_head_and_tail_in_bounded_memory() {
    const WRITTEN: u64 = 512 << 20;
    const CAP: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.sh");
    std::fs::write(
        &job,
        format!("#!/bin/sh\nyes 0123456789abcdef | head -c {WRITTEN}\necho the end\n"),
    )
    .unwrap();
    std::fs::set_permissions(&job, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plan_file = dir.path().join("plan.csv");
    std::fs::write(&plan_file, "Experiment,Workload,Name,File\ne,w,a,job.sh\n").unwrap();
    let plan = Plan::load(&plan_file).unwrap();
    let store_file = dir.path().join("runs.sqlite");
    let progress = Arc::new(Mutex::new(Vec::<String>::new()));
    let p = progress.clone();
    let mut opts = RunOptions {
        store: store_file.clone(),
        interval: Duration::from_millis(200),
        rerun_failed: false,
        gpus: Arc::new(FakeGpus::plain(0)),
        stop: Arc::new(AtomicBool::new(false)),
        exe: PathBuf::from("batchcast"),
        python: "python3".into(),
        grace: Duration::from_secs(2),
        log_cap: CAP,
        report_every: batchcast_runs::runner::REPORT_EVERY,
        progress: Box::new(move |line: &str| p.lock().unwrap().push(line.to_string())),
    };
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    test_support::reset_peak().unwrap();
    let before = test_support::peak_rss().unwrap();
    let out = run_plan(&plan, &mut opts).unwrap();
    let peak = test_support::peak_rss().unwrap();
    println!(
        "{} MiB written: peak RSS {} MiB before the run, {} MiB after",
        WRITTEN >> 20,
        before >> 20,
        peak >> 20
    );
    assert_eq!(out.finished, 1, "{out:?}");
    assert!(
        peak < before + (96 << 20),
        "the runner grew by {} MiB for {} MiB of output",
        (peak - before) >> 20,
        WRITTEN >> 20
    );

    let store = Store::open_read_only(&store_file).unwrap();
    let run = store.runs(&RunFilter::default()).unwrap().remove(0);
    assert_eq!(run.run.status, RunStatus::Finished);
    let (log, _) = store.log(run.run.id, LogStream::Stdout, None).unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(
        (log.len() as u64) < CAP + 1024,
        "{} bytes stored",
        log.len()
    );
    assert!(text.starts_with("0123456789abcdef\n"), "the head is kept");
    // `head -c` cut the last line short: 512 MiB is not a multiple of 17.
    let last = format!(
        "{}the end\n",
        &"0123456789abcdef\n"[..(WRITTEN % 17) as usize]
    );
    assert!(
        text.ends_with(&format!("0123456789abcdef\n{last}")),
        "the tail is kept: {:?}",
        &text[text.len() - 100..]
    );
    let note = text
        .lines()
        .find(|l| l.contains("dropped here"))
        .expect("a note of what was dropped");
    let dropped: u64 = note
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    let kept = log.len() as u64 - note.len() as u64 - 2;
    assert_eq!(kept + dropped, WRITTEN + "the end\n".len() as u64, "{note}");
    let events = store.events(run.run.id).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.contains("stdout passed the log cap")),
        "{events:?}"
    );
}

/// `runs export --mlflow` of a run with a long stdout writes it to its
/// artifact file a stored chunk at a time, not as a copy in memory.
#[cfg(feature = "export")]
#[test]
fn an_mlflow_export_of_a_long_log_streams_it() {
    const LOG: usize = 128 << 20;
    let dir = tempfile::tempdir().unwrap();
    let store_file = dir.path().join("runs.sqlite");
    let id = test_support::long_log_store(&store_file, LOG, b"").unwrap();
    let store = Store::open_read_only(&store_file).unwrap();
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    test_support::reset_peak().unwrap();
    let before = test_support::peak_rss().unwrap();
    let out = batchcast_runs::export::to_mlflow(&store, &[id], &dir.path().join("mlruns")).unwrap();
    let peak = test_support::peak_rss().unwrap();
    println!(
        "export of a {} MiB stdout: peak RSS {} MiB before, {} MiB during",
        LOG >> 20,
        before >> 20,
        peak >> 20
    );
    assert_eq!(out.runs.len(), 1);
    let artifact = walk(&dir.path().join("mlruns"))
        .into_iter()
        .find(|p| p.ends_with("artifacts/stdout.txt"))
        .expect("stdout.txt exported");
    assert_eq!(std::fs::metadata(&artifact).unwrap().len(), LOG as u64);
    assert!(
        peak < before + (32 << 20),
        "the export grew by {} MiB for a {} MiB log",
        (peak - before) >> 20,
        LOG >> 20
    );
}

/// Every file under `dir`.
#[cfg(feature = "export")]
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
