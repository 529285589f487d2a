//! The run store: one SQLite file that remembers collocated runs.
//!
//! This part of batchcast holds the store alone: its schema, its reads and
//! writes, the [`Recorder`] that batches a runner's points into commits, the
//! names of the metrics batchcast records ([`keys`]), and what readers
//! derive from them ([`compare`], [`unit_label`]). The runner
//! (`batchcast-runs`) writes it; the dashboard (`batchcast-ui`) and
//! `batchcast runs` read it, and depend on nothing else to do so. Who may
//! talk to the toolkit's local HTTP servers is decided by [`access`], and
//! both serve through `http`, their one HTTP stack (the `http` feature, off
//! by default: without it the crate is SQLite and serde alone). Metric
//! points as CSV, the one writer of every metrics CSV, are behind the `csv`
//! feature ([`MetricsCsv`]); what the toolkit's tests measure with, behind
//! `test-support`.
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
//! - A file that is not a batchcast store, or one of a newer layout, is
//!   refused and left untouched; a store made here is its owner's only
//!   (0700 directories, 0600 files).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod access;
mod axis;
pub mod bounded;
pub mod compare;
mod error;
#[cfg(feature = "http")]
pub mod http;
pub mod keys;
#[cfg(feature = "csv")]
mod metrics_csv;
mod model;
mod read;
mod recorder;
mod schema;
pub mod stalls;
mod store;
#[cfg(feature = "test-support")]
pub mod test_support;
mod write;

pub use axis::{unit_label, XAxis};
pub use error::{Result, StoreError};
#[cfg(feature = "csv")]
pub use metrics_csv::{metrics_csv, MetricsCsv, METRICS_CSV_COLUMNS};
pub use model::{
    Event, Experiment, ExperimentId, LogStream, MetricPoint, MetricSummary, NewRun, Orphan, Param,
    ParamSource, Run, RunFilter, RunId, RunRow, RunStatus, Workload, WorkloadId,
};
pub use recorder::{
    Recorder, RecorderHandle, DEFAULT_LOG_CAP, FLUSH_EVERY, MIN_LOG_CAP, QUEUE_BYTES,
};
pub use store::{file_uri, now_ms, Store, BUSY_TIMEOUT};
