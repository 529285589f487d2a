//! Listeners: threads of the runner that sample what a workload's jobs use
//! and record it in the store.
//!
//! The runner calls [`watch`] once per workload, after its jobs started,
//! and [`Sampler::stop`] after they ended. Listener names a plan may give:
//! [`LISTENERS`]; an empty list means all that apply.

mod gpu;
mod process;
mod shared;
mod system;

use std::collections::{HashMap, HashSet};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::gpu::GpuLayer;
use crate::{now_ms, MetricPoint, RecorderHandle, RunId};
use batchcast_proc::ProcessTree;
use gpu::Gpus;
use shared::Consumers;
use system::Machine;

/// Names of the listeners, as a plan's `Listeners` column gives them.
pub const LISTENERS: &[&str] = &["process", "system", "gpu", "batchcast"];

/// Default sampling period (`--interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// One job to watch.
#[derive(Clone, Debug)]
pub struct JobWatch {
    /// The run the job's samples are recorded under.
    pub run: RunId,
    /// The job's process; it leads its own process group, so its process
    /// tree is every process of that group and their descendants.
    pub pid: i32,
    /// GPU indices or UUIDs the job was given (empty: CPU).
    pub devices: Vec<String>,
    /// Listener names from the plan (empty: all that apply).
    pub listeners: Vec<String>,
}

/// What the listeners of one workload share.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Sampling period.
    pub interval: Duration,
    /// The GPU layer (NVML, or a stand-in in tests) the GPU listener reads.
    pub gpus: Arc<dyn GpuLayer>,
}

/// A listener name a plan gave that is none of [`LISTENERS`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown listener {0:?}; the listeners are {known}", known = LISTENERS.join(", "))]
pub struct UnknownListener(pub String);

/// Checks a plan's listener names; the error names the unknown one and the
/// known ones.
pub fn check_listener_name(name: &str) -> Result<(), UnknownListener> {
    if LISTENERS.contains(&name) {
        Ok(())
    } else {
        Err(UnknownListener(name.to_string()))
    }
}

/// The running listeners of a workload: one sampling thread.
#[derive(Debug)]
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Stops every listener, after a last sample, and waits for them.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// One job's listeners.
struct Job {
    run: RunId,
    enabled: HashSet<String>,
    tree: ProcessTree,
    gpus: Gpus,
    consumers: Consumers,
}

/// Starts the listeners of a workload's jobs. They record through `rec`
/// every `options.interval` (and once more when stopped) until
/// [`Sampler::stop`].
pub fn watch(jobs: &[JobWatch], options: &WatchOptions, rec: &RecorderHandle) -> Sampler {
    let mut state: Vec<Job> = jobs
        .iter()
        .map(|j| Job {
            run: j.run,
            enabled: if j.listeners.is_empty() {
                LISTENERS.iter().map(|s| s.to_string()).collect()
            } else {
                j.listeners.iter().cloned().collect()
            },
            tree: ProcessTree::new(j.pid),
            gpus: Gpus::new(&j.devices),
            consumers: Consumers::default(),
        })
        .collect();
    let (tx, rx) = mpsc::channel::<()>();
    let (thread_rec, options) = (rec.clone(), options.clone());
    let interval = options.interval.max(Duration::from_millis(50));
    let thread = std::thread::Builder::new()
        .name("batchcast-listeners".into())
        .spawn(move || {
            let mut machine = Machine::default();
            loop {
                round(&mut state, &mut machine, &options, &thread_rec);
                match rx.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                        round(&mut state, &mut machine, &options, &thread_rec);
                        return;
                    }
                }
            }
        });
    match thread {
        Ok(t) => Sampler {
            stop: Some(tx),
            thread: Some(t),
        },
        Err(e) => {
            for j in jobs {
                rec.event(
                    j.run,
                    "listeners",
                    &format!("cannot start the listener thread ({e}); no metrics recorded"),
                );
            }
            Sampler {
                stop: None,
                thread: None,
            }
        }
    }
}

/// One sample of every listener of every job.
fn round(jobs: &mut [Job], machine: &mut Machine, options: &WatchOptions, rec: &RecorderHandle) {
    let ts = now_ms();
    let wants = |name: &str| jobs.iter().any(|j| j.enabled.contains(name));
    let procs = if wants("process") || wants("batchcast") {
        batchcast_proc::snapshot()
    } else {
        Vec::new()
    };
    let reports = if wants("batchcast") {
        shared::snapshot()
    } else {
        Vec::new()
    };
    let mut system = Vec::new();
    if wants("system") {
        machine.sample(&mut system);
    }
    let mut out = Vec::new();
    // Each GPU is read once a round, however many jobs share it: a second
    // GPM sample microseconds after the first would measure nothing.
    let mut gpu_samples = HashMap::new();
    for job in jobs.iter_mut() {
        out.clear();
        if job.enabled.contains("process") || job.enabled.contains("batchcast") {
            let mut tree = Vec::new();
            process::sample(&mut job.tree, &procs, &mut tree);
            if job.enabled.contains("process") {
                out.extend(tree);
            }
        }
        if job.enabled.contains("system") {
            out.extend(system.iter().cloned());
        }
        if job.enabled.contains("gpu") {
            if let Some(e) = job
                .gpus
                .sample(options.gpus.as_ref(), &mut gpu_samples, &mut out)
            {
                rec.event(
                    job.run,
                    "gpu",
                    &format!("GPU listener unavailable: {e}; the run goes on without GPU metrics"),
                );
            }
        }
        if job.enabled.contains("batchcast") {
            job.consumers.sample(&reports, job.tree.members(), &mut out);
        }
        for (key, value) in out.drain(..) {
            rec.metric(MetricPoint {
                run_id: job.run,
                key,
                step: 0,
                ts_ms: ts,
                value,
            });
        }
    }
}
