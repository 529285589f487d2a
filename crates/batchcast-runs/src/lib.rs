//! Runs of collocated training jobs, and the store that remembers them.
//!
//! This part of batchcast runs experiment plans (several training jobs at
//! once, with or without a shared pipeline), samples what they use while
//! they run, and keeps everything in one SQLite file: the *run store*. The
//! dashboard (`batchcast-ui`) and `batchcast runs` read the same file.
//!
//! Invariants:
//! - The store is the only state. A runner keeps nothing in memory that a
//!   reader or a later runner needs; every status change is committed when
//!   it happens, metric points at least every [`FLUSH_EVERY`].
//! - Several runners and readers may share one store file (SQLite WAL);
//!   each thread uses its own [`Store`] connection.
//! - A run is RUNNING only while a live runner holds it; a later runner
//!   repairs runs whose runner died ([`Store::repair_orphans`]).
//! - Metric names written by batchcast itself are the constants of
//!   [`keys`]; nothing else invents them.

#![forbid(unsafe_code)]

pub mod access;
mod bounded;
pub mod compare;
mod error;
pub mod export;
pub mod gpu;
pub mod keys;
pub mod listen;
pub mod mlflow;
pub mod plan;
pub mod plot;
pub mod runner;
pub mod stalls;
mod store;

pub use error::{Result, StoreError};
pub use store::{
    now_ms, Event, Experiment, ExperimentId, LogStream, MetricPoint, MetricSummary, NewRun, Orphan,
    Param, ParamSource, Recorder, RecorderHandle, Run, RunFilter, RunId, RunRow, RunStatus, Store,
    Workload, WorkloadId, BUSY_TIMEOUT, DEFAULT_LOG_CAP, FLUSH_EVERY, MIN_LOG_CAP, QUEUE_BYTES,
};
