//! The delay-scheduling simulator's JSON job lists: an array (or an object
//! with a `jobs` array) of objects with job_id, arrival_time or start_time
//! (or submit_time), total_iterations and time_per_iteration (or duration),
//! max_parallelism (GPUs), cross_slot/machine/rack_slowdown, and optionally
//! job_group_id, dataset, model, gpu_util, cpu_num.

use serde_json::Value;

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

/// Parses a delay-scheduling simulator job list.
pub fn parse_dally(file: &str, text_in: &str) -> Result<Parsed, SimError> {
    let v = parse_json(file, text_in)?;
    let mut out = Parsed::default();
    for (k, o) in records(file, &v)?.iter().enumerate() {
        let r = k + 1;
        if !o.is_object() {
            return Err(bad(file, r, "(record)", "expected a JSON object"));
        }
        let id = text(o, "job_id")
            .ok_or_else(|| bad(file, r, "job_id", "missing (a number or string)"))?;
        let arrival = match num(file, r, o, "arrival_time")? {
            Some(a) => a,
            None => match num(file, r, o, "start_time")? {
                Some(a) => a,
                None => num(file, r, o, "submit_time")?.ok_or_else(|| {
                    bad(
                        file,
                        r,
                        "arrival_time",
                        "missing (also no start_time or submit_time)",
                    )
                })?,
            },
        };
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
        let (iterations, iter_time) = match (
            num(file, r, o, "total_iterations")?,
            num(file, r, o, "time_per_iteration")?,
        ) {
            (Some(i), Some(t)) => (i, t),
            _ => (
                num(file, r, o, "duration")?.ok_or_else(|| {
                    bad(
                        file,
                        r,
                        "total_iterations",
                        "missing (or give time_per_iteration, or duration)",
                    )
                })?,
                1.0,
            ),
        };
        if !(iterations > 0.0 && iter_time > 0.0 && (iterations * iter_time).is_finite()) {
            return Err(bad(
                file,
                r,
                "total_iterations",
                "iterations and time per iteration must be > 0",
            ));
        }
        let sd = |k: &str, d: f64| -> Result<f64, SimError> {
            let v = num(file, r, o, k)?.unwrap_or(d);
            if v >= 1.0 && v.is_finite() {
                Ok(v)
            } else {
                Err(bad(file, r, k, format!("{v} is not a multiplier >= 1")))
            }
        };
        let def = Slowdown::default();
        let slowdown = Slowdown {
            cross_slot: sd("cross_slot_slowdown", def.cross_slot)?,
            cross_machine: sd("cross_machine_slowdown", def.cross_machine)?,
            cross_rack: sd("cross_rack_slowdown", def.cross_rack)?,
        };
        let cpu = num(file, r, o, "cpu_num")?.unwrap_or(0.0);
        if !(cpu >= 0.0 && cpu.is_finite()) {
            return Err(bad(file, r, "cpu_num", "must be >= 0"));
        }
        out.jobs.push(JobSpec {
            dataset: text(o, "dataset").unwrap_or_else(|| format!("job:{id}")),
            model: text(o, "model").unwrap_or_default(),
            id,
            arrival,
            gpus: gpus as u32,
            iterations,
            iter_time,
            slowdown,
            cpu,
        });
    }
    Ok(out)
}
