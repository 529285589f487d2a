//! Trace readers: the delay-scheduling simulator's JSON job lists, Helios
//! `cluster_log.csv` and Philly `cluster_job_log` JSON. The only module of
//! the crate that touches files; input is bounded in size before it is
//! read, and each malformed record is refused naming file, record and field.

mod dally;
mod helios;
mod philly;
mod time;

pub use dally::parse_dally;
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
    /// The delay-scheduling simulator's JSON job list.
    Dally,
    /// Helios `cluster_log.csv`.
    Helios,
    /// Philly `cluster_job_log` (JSON).
    Philly,
}

impl Format {
    /// By name: `dally`, `helios`, `philly`.
    pub fn by_name(s: &str) -> Result<Format, SimError> {
        match s {
            "dally" => Ok(Format::Dally),
            "helios" => Ok(Format::Helios),
            "philly" => Ok(Format::Philly),
            o => Err(SimError::Config(format!(
                "unknown trace format {o:?}; pick dally, helios or philly"
            ))),
        }
    }
}

/// Jobs read from a trace, arrivals shifted so the first is at 0.
#[derive(Clone, Debug, Default)]
pub struct Parsed {
    /// The jobs.
    pub jobs: Vec<JobSpec>,
    /// Records skipped as not simulable (CPU-only jobs, never ran), with why.
    pub skipped: usize,
}

/// Reads and parses `path` as `format`.
pub fn read_file(path: &Path, format: Format) -> Result<Parsed, SimError> {
    let name = path.display().to_string();
    let io = |e: std::io::Error| SimError::File {
        file: name.clone(),
        problem: format!("cannot read: {e}"),
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    if len > MAX_TRACE_BYTES {
        return Err(SimError::File {
            file: name,
            problem: format!(
                "{len} bytes exceed the {MAX_TRACE_BYTES}-byte limit; split the trace"
            ),
        });
    }
    let mut text = String::with_capacity(len as usize);
    f.take(MAX_TRACE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    parse(&name, &text, format)
}

/// Parses trace text (`file` names it in errors).
pub fn parse(file: &str, text: &str, format: Format) -> Result<Parsed, SimError> {
    let mut p = match format {
        Format::Dally => parse_dally(file, text)?,
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
