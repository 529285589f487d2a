//! What the listeners cost: every listener watching N jobs (each a small
//! process tree), recording into a real store, for a while; the CPU time of
//! this process (the sampling thread and the recorder's commits; the jobs
//! are other processes) per second of watching.
//!
//!     cargo run --release -p batchcast-runs --example listener_overhead -- [JOBS] [SECONDS] [INTERVAL_MS]
//!
//! Defaults: 4 jobs of 3 processes, 20 s, at 1 Hz and at 10 Hz.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchcast_proc::{cpu_secs, Options, Process, Who};
use batchcast_runs::gpu::NoGpus;
use batchcast_runs::listen::{watch, JobWatch, WatchOptions};
use batchcast_runs::{NewRun, Recorder, Store};

fn job() -> Process {
    // A script and two workers, idle: the cost measured is the listeners'.
    let mut sh = Command::new("sh");
    sh.args(["-c", "sleep 600 & sleep 600 & wait"]);
    Process::start(sh, Options::default()).expect("spawn sh")
}

fn measure(jobs: usize, seconds: f64, interval: Duration) -> (f64, usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("runs.sqlite");
    let mut store = Store::open(&path).expect("store");
    let e = store.experiment("overhead").expect("experiment");
    let w = store.workload(e, "w", None, 0).expect("workload");
    let mut children = Vec::new();
    let mut watches = Vec::new();
    for i in 0..jobs {
        let (run, _) = store
            .add_run(
                w,
                &NewRun {
                    name: format!("job{i}"),
                    ..Default::default()
                },
            )
            .expect("run");
        let child = job();
        watches.push(JobWatch {
            run,
            pid: child.pid(),
            devices: vec![],
            listeners: vec![],
        });
        children.push(child);
    }
    let rec = Recorder::start(&path).expect("recorder");
    let options = WatchOptions {
        interval,
        gpus: Arc::new(NoGpus {
            reason: "benchmark".into(),
        }),
    };
    let cpu0 = cpu_secs(Who::SelfProcess);
    let t0 = Instant::now();
    let sampler = watch(&watches, &options, &rec.handle());
    std::thread::sleep(Duration::from_secs_f64(seconds));
    sampler.stop();
    rec.finish().expect("recorder");
    let cpu = cpu_secs(Who::SelfProcess) - cpu0;
    let wall = t0.elapsed().as_secs_f64();
    for mut c in children {
        c.kill();
    }
    let points = Store::open_read_only(&path)
        .and_then(|s| s.metric_keys(watches[0].run).map(|k| k.len()))
        .unwrap_or(0);
    (cpu / wall, points)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs = args.first().and_then(|a| a.parse().ok()).unwrap_or(4);
    let seconds = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20.0);
    let intervals: Vec<u64> = match args.get(2).and_then(|a| a.parse().ok()) {
        Some(ms) => vec![ms],
        None => vec![1000, 100],
    };
    println!("listeners watching {jobs} jobs of 3 processes each, {seconds} s per run");
    println!(
        "{:>10}  {:>18}  {:>22}  {:>14}",
        "interval", "CPU (% of a core)", "CPU per round (ms)", "metrics/job"
    );
    for ms in intervals {
        let (share, keys) = measure(jobs, seconds, Duration::from_millis(ms));
        let per_round = share * ms as f64;
        println!(
            "{:>8}ms  {:>17.3}%  {:>22.3}  {:>14}",
            ms,
            100.0 * share,
            per_round,
            keys
        );
    }
}
