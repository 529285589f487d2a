//! JSON job lists in two dialects that share their field names: an array
//! (or an object with a `jobs` array) of objects with job_id, arrival_time
//! or start_time (or submit_time), total_iterations and time_per_iteration
//! (or duration), max_parallelism (GPUs), cross_slot/machine/rack_slowdown,
//! and optionally job_group_id, dataset, model, gpu_util, cpu_num. Numbers
//! may be JSON numbers or strings (the published files write strings).
//!
//! - [`Format::Dally`](super::Format::Dally), the published delay-scheduling
//!   simulator's files (github aakash-sharma/cluster-sim, read as its
//!   `IntraJobScheduler.java` at commit 2953d56 does): `time_per_iteration`
//!   is the time of one iteration on ONE GPU, a job on n GPUs runs n
//!   iterations per `time_per_iteration / s`, where `s` is the slowdown of
//!   the widest level its GPUs span, a throughput fraction `0 < s <= 1`; so
//!   its run time is `total_iterations * time_per_iteration / (n * s)`.
//!   Arrival is `arrival_time`, else `start_time`. Records with zero
//!   iterations are skipped and counted. The jobs of one `job_group_id`
//!   that arrive with its first job have their iterations cut in halving
//!   steps, as the published simulator does (see `groups`).
//! - [`Format::Batchcast`](super::Format::Batchcast), batchcast's own:
//!   `time_per_iteration` is the iteration time of the whole job inside one
//!   slot and slowdowns are iteration-time multipliers `>= 1`.
//!
//! A value on the wrong side of 1 names the other format in its error.

use serde_json::Value;

use super::groups::{halved, Member};
use super::{bad, check_count, parse_datetime, Parsed};
use crate::error::SimError;
use crate::job::{JobSpec, Slowdown};

/// Field `k` of record `r` as a number (numbers or numeric strings).
pub(crate) fn num(file: &str, r: usize, o: &Value, k: &str) -> Result<Option<f64>, SimError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() || s == "None" => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad(file, r, k, "not a finite number")),
        Some(Value::String(s)) => parse_datetime(s).map(Some).ok_or_else(|| {
            bad(
                file,
                r,
                k,
                format!("{s:?} is not a number or YYYY-MM-DD HH:MM:SS"),
            )
        }),
        Some(v) => Err(bad(file, r, k, format!("expected a number, found {v}"))),
    }
}

fn text(o: &Value, k: &str) -> Option<String> {
    match o.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The records of a JSON list (top-level array or `jobs` array).
/// `text` as JSON, or an error naming the file and where the JSON breaks.
pub(crate) fn parse_json(file: &str, text: &str) -> Result<Value, SimError> {
    serde_json::from_str(text).map_err(|e| {
        bad(
            file,
            0,
            "(json)",
            format!(
                "not valid JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ),
        )
    })
}

pub(crate) fn records<'a>(file: &str, v: &'a Value) -> Result<&'a Vec<Value>, SimError> {
    let list = match v {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("jobs") {
            Some(Value::Array(a)) => a,
            _ => {
                return Err(bad(
                    file,
                    0,
                    "jobs",
                    "expected a JSON array of jobs or {\"jobs\": [...]}",
                ))
            }
        },
        _ => return Err(bad(file, 0, "(top level)", "expected a JSON array of jobs")),
    };
    check_count(file, list.len())?;
    Ok(list)
}

/// Parses a job list of the published delay-scheduling simulator.
pub fn parse_dally(file: &str, text_in: &str) -> Result<Parsed, SimError> {
    parse_json_jobs(file, text_in, true)
}

/// Parses a job list in batchcast's own JSON format.
pub fn parse_batchcast(file: &str, text_in: &str) -> Result<Parsed, SimError> {
    parse_json_jobs(file, text_in, false)
}

/// The slowdown field `k` of record `r` as an iteration-time multiplier:
/// published fractions `s` become `1 / s`; batchcast's multipliers are kept.
fn slowdown(
    file: &str,
    r: usize,
    o: &Value,
    k: &str,
    default: f64,
    published: bool,
) -> Result<f64, SimError> {
    let Some(v) = num(file, r, o, k)? else {
        return Ok(default);
    };
    if !(v > 0.0 && v.is_finite()) {
        return Err(bad(file, r, k, format!("{v} is not a positive number")));
    }
    match (published, v <= 1.0) {
        (true, true) => Ok(1.0 / v),
        (false, false) => Ok(v),
        (true, false) => Err(bad(
            file,
            r,
            k,
            format!(
                "{v} is above 1: the published simulator's slowdowns are throughput \
                 fractions 0 < s <= 1; for a file of iteration-time multipliers >= 1 \
                 (batchcast's own format) pass --format batchcast"
            ),
        )),
        (false, true) if v == 1.0 => Ok(v),
        (false, true) => Err(bad(
            file,
            r,
            k,
            format!(
                "{v} is below 1: batchcast's own format takes iteration-time multipliers \
                 >= 1; for the published cluster-sim files, whose slowdowns are throughput \
                 fractions, pass --format dally"
            ),
        )),
    }
}

fn parse_json_jobs(file: &str, text_in: &str, published: bool) -> Result<Parsed, SimError> {
    let v = parse_json(file, text_in)?;
    let mut out = Parsed::default();
    let (mut members, mut job_of) = (Vec::new(), Vec::new());
    for (k, o) in records(file, &v)?.iter().enumerate() {
        let r = k + 1;
        if !o.is_object() {
            return Err(bad(file, r, "(record)", "expected a JSON object"));
        }
        let id = text(o, "job_id")
            .ok_or_else(|| bad(file, r, "job_id", "missing (a number or string)"))?;
        let arrival = arrival_of(file, r, o)?;
        let gpus = gpus_of(file, r, o)?;
        let (iterations, iter_time) = work_of(file, r, o)?;
        members.push(Member {
            group: text(o, "job_group_id"),
            id: id.clone(),
            arrival,
            iterations,
        });
        if iterations == 0.0 {
            out.skipped += 1;
            continue;
        }
        job_of.push(members.len() - 1);
        let record = Record {
            file,
            r,
            o,
            published,
        };
        out.jobs
            .push(record.job(id, arrival, gpus, iterations, iter_time)?);
    }
    if published {
        let (iterations, cut) = halved(&members);
        for (job, &m) in out.jobs.iter_mut().zip(&job_of) {
            job.iterations = iterations[m];
        }
        out.halved = cut;
    }
    Ok(out)
}

/// A record's arrival: `arrival_time`, else `start_time`, else
/// `submit_time`.
fn arrival_of(file: &str, r: usize, o: &Value) -> Result<f64, SimError> {
    match num(file, r, o, "arrival_time")? {
        Some(a) => Ok(a),
        None => match num(file, r, o, "start_time")? {
            Some(a) => Ok(a),
            None => num(file, r, o, "submit_time")?.ok_or_else(|| {
                bad(
                    file,
                    r,
                    "arrival_time",
                    "missing (also no start_time or submit_time)",
                )
            }),
        },
    }
}

/// A record's GPUs (`max_parallelism`, else `gpu_num`): a whole number >= 1.
fn gpus_of(file: &str, r: usize, o: &Value) -> Result<f64, SimError> {
    let gpus = num(file, r, o, "max_parallelism")?
        .or(num(file, r, o, "gpu_num")?)
        .ok_or_else(|| bad(file, r, "max_parallelism", "missing (the job's GPUs)"))?;
    if !(gpus >= 1.0 && gpus <= u32::MAX as f64 && gpus.fract() == 0.0) {
        return Err(bad(
            file,
            r,
            "max_parallelism",
            format!("{gpus} is not a whole number of GPUs >= 1"),
        ));
    }
    Ok(gpus)
}

/// A record's work as (iterations, seconds per iteration): both given, or
/// a `duration` of one-second iterations.
fn work_of(file: &str, r: usize, o: &Value) -> Result<(f64, f64), SimError> {
    match (
        num(file, r, o, "total_iterations")?,
        num(file, r, o, "time_per_iteration")?,
    ) {
        (Some(i), Some(t)) => Ok((i, t)),
        _ => Ok((
            num(file, r, o, "duration")?.ok_or_else(|| {
                bad(
                    file,
                    r,
                    "total_iterations",
                    "missing (or give time_per_iteration, or duration)",
                )
            })?,
            1.0,
        )),
    }
}

/// One record of a JSON trace, being read.
struct Record<'a> {
    file: &'a str,
    r: usize,
    o: &'a Value,
    published: bool,
}

impl Record<'_> {
    /// The job of a record with work to do: its iteration time per GPU
    /// set, its slowdowns and CPU read.
    fn job(
        &self,
        id: String,
        arrival: f64,
        gpus: f64,
        iterations: f64,
        iter_time: f64,
    ) -> Result<JobSpec, SimError> {
        let Record {
            file,
            r,
            o,
            published,
        } = *self;
        if !(iterations > 0.0 && iter_time > 0.0 && (iterations * iter_time).is_finite()) {
            return Err(bad(
                file,
                r,
                "total_iterations",
                "iterations and time per iteration must be > 0",
            ));
        }
        // The published time is one GPU's; the job's n GPUs share the work.
        let iter_time = if published {
            iter_time / gpus
        } else {
            iter_time
        };
        let def = Slowdown::default();
        let sd = |k: &str, d: f64| slowdown(file, r, o, k, d, published);
        let slowdown = Slowdown {
            cross_slot: sd("cross_slot_slowdown", def.cross_slot)?,
            cross_machine: sd("cross_machine_slowdown", def.cross_machine)?,
            cross_rack: sd("cross_rack_slowdown", def.cross_rack)?,
        };
        let cpu = num(file, r, o, "cpu_num")?.unwrap_or(0.0);
        if !(cpu >= 0.0 && cpu.is_finite()) {
            return Err(bad(file, r, "cpu_num", "must be >= 0"));
        }
        Ok(JobSpec {
            dataset: text(o, "dataset").unwrap_or_else(|| format!("job:{id}")),
            model: text(o, "model").unwrap_or_default(),
            id,
            arrival,
            gpus: gpus as u32,
            iterations,
            iter_time,
            slowdown,
            cpu,
        })
    }
}
