//! Trace readers: the published delay-scheduling simulator's JSON job lists
//! and batchcast's own (see `dally`), cluster files (see `cluster_file`), Helios
//! `cluster_log.csv` and Philly `cluster_job_log` JSON. The only module of
//! the crate that touches files; input is bounded in size before it is
//! read, and each malformed record is refused naming file, record and field.

mod cluster_file;
mod dally;
mod groups;
mod helios;
mod java_sort;
mod philly;
mod time;

pub use cluster_file::{parse_cluster, ClusterFile, MAX_CLUSTER_BYTES};
pub use dally::{parse_batchcast, parse_dally};
pub use helios::parse_helios;
pub use philly::parse_philly;
pub use time::parse_datetime;

use std::io::Read;
use std::path::Path;

use crate::error::SimError;
use crate::job::JobSpec;

/// Largest trace file read, bytes.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
/// Most jobs taken from one trace.
pub const MAX_TRACE_JOBS: usize = 5_000_000;

/// A trace file's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The published delay-scheduling simulator's JSON job list
    /// (github aakash-sharma/cluster-sim): slowdowns are throughput
    /// fractions, `time_per_iteration` is one GPU's.
    Dally,
    /// batchcast's own JSON job list: the same fields, slowdowns are
    /// iteration-time multipliers >= 1, `time_per_iteration` is the job's.
    Batchcast,
    /// Helios `cluster_log.csv`.
    Helios,
    /// Philly `cluster_job_log` (JSON).
    Philly,
}

impl Format {
    /// By name: `dally` (or `cluster-sim`), `batchcast`, `helios`, `philly`.
    pub fn by_name(s: &str) -> Result<Format, SimError> {
        match s {
            "dally" | "cluster-sim" => Ok(Format::Dally),
            "batchcast" => Ok(Format::Batchcast),
            "helios" => Ok(Format::Helios),
            "philly" => Ok(Format::Philly),
            o => Err(SimError::Config(format!(
                "unknown trace format {o:?}; pick dally (alias cluster-sim), batchcast, helios or philly"
            ))),
        }
    }
}

/// Jobs read from a trace, arrivals shifted so the first is at 0.
#[derive(Clone, Debug, Default)]
pub struct Parsed {
    /// The jobs.
    pub jobs: Vec<JobSpec>,
    /// Records skipped as not simulable (CPU-only jobs, never ran, zero
    /// iterations).
    pub skipped: usize,
    /// Jobs whose iterations the published simulator's job-group halving
    /// cut (`--format dally` only).
    pub halved: usize,
    /// The first arrival as the trace wrote it, subtracted from every
    /// arrival (0 for an empty trace).
    pub origin: f64,
}

/// The text of `path`, refused unread when larger than `limit` bytes.
fn read_bounded(path: &Path, limit: u64, what: &str) -> Result<String, SimError> {
    let name = path.display().to_string();
    let io = |e: std::io::Error| SimError::File {
        file: name.clone(),
        problem: format!("cannot read: {e}"),
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    if len > limit {
        return Err(SimError::File {
            file: name,
            problem: format!("{len} bytes exceed the {limit}-byte limit of {what}"),
        });
    }
    let mut text = String::with_capacity(len as usize);
    f.take(limit + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > limit {
        return Err(SimError::File {
            file: name,
            problem: format!("grew past the {limit}-byte limit of {what} while read"),
        });
    }
    Ok(text)
}

/// Reads and parses `path` as `format`.
pub fn read_file(path: &Path, format: Format) -> Result<Parsed, SimError> {
    let text = read_bounded(path, MAX_TRACE_BYTES, "a trace; split it")?;
    parse(&path.display().to_string(), &text, format)
}

/// Reads a cluster file of either dialect (see [`parse_cluster`]);
/// `cpu_cores` is used where the file gives none.
pub fn read_cluster(path: &Path, cpu_cores: f64) -> Result<ClusterFile, SimError> {
    let text = read_bounded(path, MAX_CLUSTER_BYTES, "a cluster file")?;
    parse_cluster(&path.display().to_string(), &text, cpu_cores)
}

/// Parses trace text (`file` names it in errors).
pub fn parse(file: &str, text: &str, format: Format) -> Result<Parsed, SimError> {
    let mut p = match format {
        Format::Dally => parse_dally(file, text)?,
        Format::Batchcast => parse_batchcast(file, text)?,
        Format::Helios => parse_helios(file, text)?,
        Format::Philly => parse_philly(file, text)?,
    };
    let first = p
        .jobs
        .iter()
        .map(|j| j.arrival)
        .fold(f64::INFINITY, f64::min);
    if first.is_finite() {
        for j in &mut p.jobs {
            j.arrival -= first;
        }
        p.origin = first;
    }
    Ok(p)
}

/// A parse error for `record` (1-based) of `file`.
pub(crate) fn bad(file: &str, record: usize, field: &str, problem: impl Into<String>) -> SimError {
    SimError::Parse {
        file: file.into(),
        record,
        field: field.into(),
        problem: problem.into(),
    }
}

/// Refuses more than `MAX_TRACE_JOBS` records.
pub(crate) fn check_count(file: &str, n: usize) -> Result<(), SimError> {
    if n > MAX_TRACE_JOBS {
        return Err(SimError::File {
            file: file.into(),
            problem: format!("more than {MAX_TRACE_JOBS} records; split the trace"),
        });
    }
    Ok(())
}
