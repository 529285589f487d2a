//! Runs of collocated training jobs: plans, the runner, what they use.
//!
//! This part of batchcast runs experiment plans (several training jobs at
//! once, with or without a shared pipeline), samples what they use while
//! they run, and records everything in the run store (`batchcast-store`),
//! which it re-exports at the paths it always had. The dashboard
//! (`batchcast-ui`) and `batchcast runs` read the same file.
//!
//! Invariants:
//! - The store is the only state: a runner keeps nothing in memory that a
//!   reader or a later runner needs (the store's own invariants are in
//!   `batchcast-store`).
//! - A runner that returns, on an error too, leaves nothing it started
//!   running and no run of its own RUNNING.
//!
//! Optional parts, behind Cargo features (all on by default, and in the
//! `batchcast` binary): `mlflow` (the MLflow REST endpoint a job logs to),
//! `export` (metrics as CSV, runs as an MLflow file store) and `plot`
//! (`batchcast runs plot`'s SVG and PNG charts). With none of them the
//! crate plans, runs and records, and depends on no HTTP or drawing code.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "export")]
pub mod export;
pub mod gpu;
pub mod listen;
#[cfg(feature = "mlflow")]
pub mod mlflow;
pub mod plan;
pub mod plot;
pub mod runner;

pub use batchcast_store::{access, compare, keys, stalls};
pub use batchcast_store::{
    now_ms, Event, Experiment, ExperimentId, LogStream, MetricPoint, MetricSummary, NewRun, Orphan,
    Param, ParamSource, Recorder, RecorderHandle, Run, RunFilter, RunId, RunRow, RunStatus, Store,
    Workload, WorkloadId, BUSY_TIMEOUT, DEFAULT_LOG_CAP, FLUSH_EVERY, MIN_LOG_CAP, QUEUE_BYTES,
};
pub use batchcast_store::{Result, StoreError};
