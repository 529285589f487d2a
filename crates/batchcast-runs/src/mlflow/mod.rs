//! MLflow compatibility: a local REST endpoint that records what a script
//! logs with the real `mlflow` client into the run store.
//!
//! The runner starts one [`Endpoint`] for a workload and gives each job
//! `MLFLOW_TRACKING_URI` = [`Endpoint::url`] and `MLFLOW_RUN_ID` =
//! [`mlflow_run_id`] of its run, so that `mlflow.log_metric` and friends
//! record into that run without any change to the script.

use std::path::Path;

use crate::error::Result;
use crate::store::RunId;

/// The MLflow run id that stands for a batchcast run.
pub fn mlflow_run_id(run: RunId) -> String {
    format!("{run:032x}")
}

/// The batchcast run an MLflow run id stands for.
pub fn run_from_mlflow_id(id: &str) -> Option<RunId> {
    if id.len() != 32 {
        return None;
    }
    i64::from_str_radix(id, 16).ok().filter(|r| *r > 0)
}

/// A running MLflow-compatible endpoint on 127.0.0.1.
#[derive(Debug)]
pub struct Endpoint {
    url: String,
}

impl Endpoint {
    /// Serves on an ephemeral port of 127.0.0.1, recording into the store
    /// at `store`, until dropped.
    pub fn start(store: &Path) -> Result<Endpoint> {
        // The server itself is filled in by the MLflow work.
        let _ = store;
        Ok(Endpoint {
            url: "http://127.0.0.1:0".into(),
        })
    }

    /// `http://127.0.0.1:PORT`, for `MLFLOW_TRACKING_URI`.
    pub fn url(&self) -> &str {
        &self.url
    }
}
