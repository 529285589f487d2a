//! What a job is told so that its `mlflow` calls land in its own run: the
//! address of the workload's MLflow endpoint, its run's id there and a
//! secret for it. Without the `mlflow` feature a job is told nothing of
//! MLflow, and what it logs through `mlflow` goes wherever its own
//! configuration sends it.

use std::path::Path;
use std::process::Command;

use crate::{Result, RunId};

/// The tracking a workload's jobs are given, for as long as it lives.
#[derive(Debug)]
pub(crate) struct Tracking {
    #[cfg(feature = "mlflow")]
    endpoint: crate::mlflow::Endpoint,
}

impl Tracking {
    /// Starts what records into the store at `store` (the MLflow endpoint).
    pub(crate) fn start(store: &Path) -> Result<Tracking> {
        #[cfg(not(feature = "mlflow"))]
        let _ = store;
        Ok(Tracking {
            #[cfg(feature = "mlflow")]
            endpoint: crate::mlflow::Endpoint::start(store)?,
        })
    }

    /// Sets the environment of the job of `run` in `experiment`.
    pub(crate) fn env(&self, cmd: &mut Command, run: RunId, experiment: &str) -> Result<()> {
        #[cfg(feature = "mlflow")]
        cmd.env("MLFLOW_TRACKING_URI", self.endpoint.url())
            .env("MLFLOW_RUN_ID", crate::mlflow::mlflow_run_id(run))
            .env("MLFLOW_TRACKING_TOKEN", self.endpoint.token_for(run)?)
            .env("MLFLOW_EXPERIMENT_NAME", experiment);
        #[cfg(not(feature = "mlflow"))]
        let _ = (cmd, run, experiment);
        Ok(())
    }

    /// Stops recording (the endpoint commits what its jobs logged).
    pub(crate) fn close(self) {
        #[cfg(feature = "mlflow")]
        drop(self.endpoint);
    }
}
