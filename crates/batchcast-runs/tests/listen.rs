//! Listeners against real process trees, recording into a real store.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchcast_runs::gpu::{FakeGpus, NoGpus};
use batchcast_runs::listen::{watch, JobWatch, WatchOptions};
use batchcast_runs::{keys, NewRun, Recorder, RunId, Store};

fn store_with_runs(dir: &std::path::Path, n: usize) -> (std::path::PathBuf, Vec<RunId>) {
    let path = dir.join("runs.sqlite");
    let mut store = Store::open(&path).unwrap();
    let e = store.experiment("exp").unwrap();
    let w = store.workload(e, "w", None, 0).unwrap();
    let runs = (0..n)
        .map(|i| {
            store
                .add_run(
                    w,
                    &NewRun {
                        name: format!("r{i}"),
                        ..Default::default()
                    },
                )
                .unwrap()
                .0
        })
        .collect();
    (path, runs)
}

/// A job like a training script with a worker: a group leader (sh) whose
/// children burn CPU and hold 64 MiB.
fn spawn_job() -> Child {
    // The interpreter itself, not a wrapper script (pyenv's shims are bash
    // scripts that would add processes to the tree).
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8(out.stdout).unwrap().trim().to_string();
    Command::new("sh")
        .arg("-c")
        .arg("yes > /dev/null & \"$PYTHON\" -c 'import time; b = bytearray(64 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(60)' & wait")
        .env("PYTHON", python)
        .process_group(0)
        .spawn()
        .unwrap()
}

fn kill_group(child: &mut Child) {
    let pgid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    let _ = child.wait();
}

fn values(store: &Store, run: RunId, key: &str) -> Vec<f64> {
    store
        .metric(run, key, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|p| p.value)
        .collect()
}

#[test]
fn the_process_tree_of_a_job_is_sampled_at_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let (path, runs) = store_with_runs(dir.path(), 1);
    let mut job = spawn_job();
    let rec = Recorder::start(&path).unwrap();
    let fake = FakeGpus::plain(1).with_fields(vec![("power_w".into(), 123.0)]);
    let options = WatchOptions {
        interval: Duration::from_millis(100),
        gpus: Arc::new(fake),
    };
    let jobs = [JobWatch {
        run: runs[0],
        pid: job.id() as i32,
        devices: vec!["0".into()],
        listeners: vec![],
    }];
    let started = Instant::now();
    let sampler = watch(&jobs, &options, &rec.handle());

    // Wait until the tree has burnt half a CPU second and holds its memory.
    let ro = Store::open_read_only(&path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cpu = values(&ro, runs[0], keys::PROC_CPU_SECONDS);
        let rss = values(&ro, runs[0], keys::PROC_RSS_BYTES);
        if cpu.last().is_some_and(|c| *c >= 0.5)
            && rss.last().is_some_and(|r| *r >= (64 << 20) as f64)
        {
            break;
        }
        assert!(Instant::now() < deadline, "cpu {cpu:?} rss {rss:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    sampler.stop();
    let elapsed = started.elapsed().as_secs_f64();
    kill_group(&mut job);
    drop(ro);
    rec.finish().unwrap();

    let ro = Store::open_read_only(&path).unwrap();
    let cpu = values(&ro, runs[0], keys::PROC_CPU_SECONDS);
    assert!(
        cpu.windows(2).all(|w| w[1] >= w[0]),
        "CPU time never goes back: {cpu:?}"
    );
    let expected = elapsed / 0.1;
    assert!(
        (cpu.len() as f64) >= expected * 0.5 && (cpu.len() as f64) <= expected + 2.0,
        "{} samples in {elapsed:.2} s at 10 Hz",
        cpu.len()
    );
    let procs = values(&ro, runs[0], keys::PROC_PROCESSES);
    assert!(
        procs.iter().any(|&n| n >= 3.0),
        "sh, yes and python are in the tree: {procs:?}"
    );
    assert!(values(&ro, runs[0], keys::PROC_CPU_PERCENT)
        .iter()
        .any(|&p| p > 30.0));
    assert!(values(&ro, runs[0], keys::PROC_PSS_BYTES)
        .iter()
        .any(|&p| p >= (64 << 20) as f64));
    assert_eq!(
        values(&ro, runs[0], &keys::gpu(0, "power_w")).last(),
        Some(&123.0)
    );
    assert!(!values(&ro, runs[0], keys::SYS_CPU_PERCENT).is_empty());
    assert!(ro.events(runs[0]).unwrap().is_empty());
}

#[test]
fn a_machine_without_gpus_is_said_once_and_the_other_listeners_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (path, runs) = store_with_runs(dir.path(), 2);
    let mut a = spawn_job();
    let mut b = spawn_job();
    let rec = Recorder::start(&path).unwrap();
    let options = WatchOptions {
        interval: Duration::from_millis(50),
        gpus: Arc::new(NoGpus {
            reason: "NVML could not be loaded".into(),
        }),
    };
    let jobs = [
        JobWatch {
            run: runs[0],
            pid: a.id() as i32,
            devices: vec![],
            listeners: vec![],
        },
        // Only the process listener for the second job.
        JobWatch {
            run: runs[1],
            pid: b.id() as i32,
            devices: vec![],
            listeners: vec!["process".into()],
        },
    ];
    let sampler = watch(&jobs, &options, &rec.handle());
    let ro = Store::open_read_only(&path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while values(&ro, runs[1], keys::PROC_CPU_SECONDS).len() < 10 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    sampler.stop();
    kill_group(&mut a);
    kill_group(&mut b);
    drop(ro);
    rec.finish().unwrap();

    let ro = Store::open_read_only(&path).unwrap();
    let events = ro.events(runs[0]).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].message.contains("NVML could not be loaded"));
    assert!(
        ro.events(runs[1]).unwrap().is_empty(),
        "the second job has no GPU listener"
    );
    assert!(ro
        .metric_keys(runs[1])
        .unwrap()
        .iter()
        .all(|k| k.starts_with("proc/")));
    // The trees are told apart: each job sees its own processes only.
    let procs = values(&ro, runs[1], keys::PROC_PROCESSES);
    // sh, yes, python (and for a moment the fork of sh before python runs): never both trees.
    assert!(procs.iter().all(|&n| n <= 4.0), "{procs:?}");
}

/// The real layer: on a machine without NVML it says why and names the
/// library; with NVML it lists GPUs whose samples carry NVML's fields.
#[test]
fn the_system_layer_loads_nvml_or_says_why_not() {
    let layer = batchcast_runs::gpu::system();
    match layer.gpus() {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("libnvidia-ml.so.1"), "{msg}");
            assert!(layer.sample(0).is_err());
        }
        Ok(gpus) => {
            for g in &gpus {
                let fields = layer.sample(g.index).unwrap();
                assert!(
                    fields.iter().any(|(k, _)| k == "mem_total_bytes"),
                    "{fields:?}"
                );
            }
        }
    }
}

/// Two jobs on one GPU: both runs get its metrics, but the GPU is read
/// once a round, not once per job (a second GPM sample microseconds after
/// the first would give the second run activity over no time at all).
#[test]
fn a_gpu_shared_by_two_jobs_is_read_once_a_round() {
    let dir = tempfile::tempdir().unwrap();
    let (path, runs) = store_with_runs(dir.path(), 2);
    let mut a = spawn_job();
    let mut b = spawn_job();
    let rec = Recorder::start(&path).unwrap();
    let fake = Arc::new(FakeGpus::plain(1).with_fields(vec![("power_w".into(), 300.0)]));
    let options = WatchOptions {
        interval: Duration::from_millis(50),
        gpus: fake.clone(),
    };
    let jobs: Vec<JobWatch> = [(&a, "0"), (&b, "GPU-fake-0")]
        .iter()
        .zip(&runs)
        .map(|((child, device), run)| JobWatch {
            run: *run,
            pid: child.id() as i32,
            devices: vec![device.to_string()],
            listeners: vec!["gpu".into()],
        })
        .collect();
    let sampler = watch(&jobs, &options, &rec.handle());
    std::thread::sleep(Duration::from_millis(400));
    sampler.stop();
    kill_group(&mut a);
    kill_group(&mut b);
    rec.finish().unwrap();

    let ro = Store::open_read_only(&path).unwrap();
    let first = values(&ro, runs[0], &keys::gpu(0, "power_w"));
    let second = values(&ro, runs[1], &keys::gpu(0, "power_w"));
    assert!(first.len() >= 3, "{first:?}");
    assert_eq!(first, second, "both runs get every round's sample");
    assert_eq!(fake.samples() as usize, first.len(), "one read a round");
}
