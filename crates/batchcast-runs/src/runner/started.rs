//! What a workload started (its jobs, its shared producer, the MPS daemon),
//! held so that stopping it and recording its runs never depend on the
//! runner reaching its happy path: [`Started::close`] (called on every way
//! out, and by `Drop` on the rest) stops what still runs, records each run
//! not yet recorded with what actually happened to it, and stops MPS.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::job::{stop_all, Job};
use crate::gpu::GpuLayer;
use crate::{RunStatus, Store};

/// How a job's run ends: status, exit code and message.
pub(crate) type End = (RunStatus, Option<i64>, Option<String>);

/// What a job's run records, from what happened to it: KILLED only when
/// the runner stopped it while it ran; else its own exit.
pub(crate) fn end_of(job: &Job) -> End {
    if let Some(why) = &job.stopped {
        return (RunStatus::Killed, None, Some(why.clone()));
    }
    match job.outcome() {
        Some((Some(0), _)) => (RunStatus::Finished, Some(0), None),
        Some((Some(c), _)) => (
            RunStatus::Failed,
            Some(i64::from(c)),
            Some(format!("exited with status {c}")),
        ),
        Some((None, Some(sig))) => (
            RunStatus::Failed,
            None,
            Some(format!("killed by signal {sig}")),
        ),
        _ => (
            RunStatus::Failed,
            None,
            Some("ended without an exit status".to_string()),
        ),
    }
}

/// The processes of one workload, and what must be undone for them.
pub(crate) struct Started {
    pub jobs: Vec<Job>,
    pub producer: Option<Job>,
    /// MPS was started for this workload (and is stopped after it).
    pub mps_started: bool,
    gpus: Arc<dyn GpuLayer>,
    grace: Duration,
    store: PathBuf,
}

impl Started {
    pub(crate) fn new(store: PathBuf, gpus: Arc<dyn GpuLayer>, grace: Duration) -> Started {
        Started {
            jobs: Vec::new(),
            producer: None,
            mps_started: false,
            gpus,
            grace,
            store,
        }
    }

    /// Stops every job and the producer still running (recording `why` in
    /// them), records the runs not recorded yet, and stops MPS if this
    /// workload started it. Returns what could not be done, for the user.
    /// Doing it twice does nothing the second time.
    pub(crate) fn close(&mut self, why: &str) -> Vec<String> {
        let mut problems = Vec::new();
        stop_all(
            self.jobs.iter_mut().chain(self.producer.as_mut()),
            self.grace,
            why,
        );
        let unrecorded = self
            .jobs
            .iter()
            .chain(self.producer.as_ref())
            .any(|j| !j.recorded);
        if unrecorded {
            match Store::open(&self.store) {
                Ok(store) => {
                    for j in self.jobs.iter_mut().chain(self.producer.as_mut()) {
                        if j.recorded {
                            continue;
                        }
                        j.join_output();
                        let (status, code, msg) = end_of(j);
                        match store.finish_run(j.run, status, code, msg.as_deref()) {
                            Ok(()) => j.recorded = true,
                            Err(e) => problems.push(format!(
                                "cannot record how {} ended ({status}): {e}; the next `batchcast run` marks it KILLED",
                                j.name
                            )),
                        }
                    }
                }
                Err(e) => problems.push(format!(
                    "cannot record how the workload's jobs ended: {e}; the next `batchcast run` marks them KILLED"
                )),
            }
        }
        if self.mps_started {
            self.mps_started = false;
            if let Err(e) = self.gpus.mps_stop() {
                problems.push(format!(
                    "cannot stop the MPS daemon: {e}; stop it with `echo quit | nvidia-cuda-mps-control`"
                ));
            }
        }
        problems
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.close("stopped by the runner, which ended before the job did");
    }
}
