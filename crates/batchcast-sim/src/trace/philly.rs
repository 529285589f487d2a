//! Philly `cluster_job_log` JSON: jobid, user, vc, submitted_time and
//! attempts, each with start_time, end_time and detail (per machine: ip and
//! a list of GPUs). A job's demand is the GPUs of its last attempt; its
//! duration the summed run time of its attempts. Jobs that never ran or
//! held no GPU are skipped.

use serde_json::Value;

use super::dally::{num, parse_json, records};
use super::{bad, Parsed};
use crate::error::SimError;
use crate::job::{JobSpec, Slowdown};

/// Parses a Philly job log.
pub fn parse_philly(file: &str, text: &str) -> Result<Parsed, SimError> {
    let v = parse_json(file, text)?;
    let mut out = Parsed::default();
    for (k, o) in records(file, &v)?.iter().enumerate() {
        let r = k + 1;
        let id = match o.get("jobid") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err(bad(file, r, "jobid", "missing (a string)")),
        };
        let submitted = num(file, r, o, "submitted_time")?
            .ok_or_else(|| bad(file, r, "submitted_time", "missing"))?;
        let attempts = match o.get("attempts") {
            Some(Value::Array(a)) => a,
            None | Some(Value::Null) => {
                out.skipped += 1;
                continue;
            }
            Some(_) => return Err(bad(file, r, "attempts", "expected an array")),
        };
        let (mut ran, mut gpus) = (0.0, 0usize);
        for (n, a) in attempts.iter().enumerate() {
            let field = |f: &str| format!("attempts[{n}].{f}");
            let start = num(file, r, a, "start_time")
                .map_err(|_| bad(file, r, &field("start_time"), "not a time"))?;
            let end = num(file, r, a, "end_time")
                .map_err(|_| bad(file, r, &field("end_time"), "not a time"))?;
            if let (Some(s), Some(e)) = (start, end) {
                ran += (e - s).max(0.0);
            }
            gpus = match a.get("detail") {
                Some(Value::Array(d)) => d
                    .iter()
                    .map(|m| match m.get("gpus") {
                        Some(Value::Array(g)) => Ok(g.len()),
                        _ => Err(bad(
                            file,
                            r,
                            &field("detail.gpus"),
                            "expected a list of GPUs per machine",
                        )),
                    })
                    .sum::<Result<usize, SimError>>()?,
                None | Some(Value::Null) => gpus,
                Some(_) => return Err(bad(file, r, &field("detail"), "expected an array")),
            };
        }
        if gpus == 0 || ran <= 0.0 {
            out.skipped += 1;
            continue;
        }
        out.jobs.push(JobSpec {
            dataset: format!("job:{id}"),
            id,
            arrival: submitted,
            gpus: gpus.min(u32::MAX as usize) as u32,
            iterations: ran,
            iter_time: 1.0,
            slowdown: Slowdown::default(),
            model: String::new(),
            cpu: 0.0,
        });
    }
    Ok(out)
}
