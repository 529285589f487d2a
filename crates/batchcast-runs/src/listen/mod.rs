//! Listeners: threads of the runner that sample what a workload's jobs use
//! and record it in the store.
//!
//! The runner calls [`watch`] once per workload, after its jobs started,
//! and [`Sampler::stop`] after they ended. Listener names a plan may give:
//! [`LISTENERS`]; an empty list means all that apply.

use std::sync::Arc;
use std::time::Duration;

use crate::gpu::GpuLayer;
use crate::store::{RecorderHandle, RunId};

/// Names of the listeners, as a plan's `Listeners` column gives them.
pub const LISTENERS: &[&str] = &["process", "system", "gpu", "batchcast"];

/// Default sampling period (`--interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// One job to watch.
#[derive(Clone, Debug)]
pub struct JobWatch {
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
    pub interval: Duration,
    pub gpus: Arc<dyn GpuLayer>,
}

/// Checks a plan's listener names; the error names the unknown one and the
/// known ones.
pub fn check_listener_name(name: &str) -> Result<(), String> {
    if LISTENERS.contains(&name) {
        Ok(())
    } else {
        Err(format!(
            "unknown listener {name:?}; the listeners are {}",
            LISTENERS.join(", ")
        ))
    }
}

/// The running listeners of a workload.
#[derive(Debug)]
pub struct Sampler {
    _private: (),
}

impl Sampler {
    /// Stops every listener, after a last sample, and waits for them.
    pub fn stop(self) {}
}

/// Starts the listeners of a workload's jobs. They record through `rec`
/// every `options.interval` until [`Sampler::stop`].
pub fn watch(jobs: &[JobWatch], options: &WatchOptions, rec: &RecorderHandle) -> Sampler {
    // The listeners themselves are filled in by the listener work.
    let _ = (jobs, options, rec);
    Sampler { _private: () }
}
