//! Helios `cluster_log.csv`: job_id, user, vc, gpu_num, cpu_num, node_num,
//! state, submit_time, start_time, end_time, duration, queue. GPU jobs only
//! (gpu_num 0 rows are skipped); the job runs its logged duration at one
//! second per iteration with default slowdowns; cpu_num is its loading demand.

use super::{bad, check_count, parse_datetime, Parsed};
use crate::error::SimError;
use crate::job::{JobSpec, Slowdown};

/// Parses a Helios cluster log.
pub fn parse_helios(file: &str, text: &str) -> Result<Parsed, SimError> {
    let mut rd = csv::ReaderBuilder::new()
        .flexible(false)
        .from_reader(text.as_bytes());
    let header = rd
        .headers()
        .map_err(|e| bad(file, 0, "(header)", format!("unreadable CSV header: {e}")))?
        .clone();
    let col = |name: &str| -> Result<usize, SimError> {
        header
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| bad(file, 0, name, "column missing from the header"))
    };
    let (c_id, c_gpu, c_cpu, c_sub) = (
        col("job_id")?,
        col("gpu_num")?,
        col("cpu_num")?,
        col("submit_time")?,
    );
    let (c_dur, c_start, c_end) = (col("duration")?, col("start_time")?, col("end_time")?);
    let mut out = Parsed::default();
    for (k, rec) in rd.records().enumerate() {
        let r = k + 1;
        check_count(file, r)?;
        let rec = rec.map_err(|e| bad(file, r, "(row)", format!("malformed CSV row: {e}")))?;
        let get = |c: usize| rec.get(c).unwrap_or("").trim();
        let number = |c: usize, name: &str| -> Result<f64, SimError> {
            let s = get(c);
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(file, r, name, format!("{s:?} is not a number >= 0")))
        };
        let gpus = number(c_gpu, "gpu_num")?;
        if gpus == 0.0 {
            out.skipped += 1;
            continue;
        }
        if gpus.fract() != 0.0 || gpus > u32::MAX as f64 {
            return Err(bad(file, r, "gpu_num", "not a whole number of GPUs"));
        }
        let submit = parse_datetime(get(c_sub)).ok_or_else(|| {
            bad(
                file,
                r,
                "submit_time",
                format!("{:?} is not YYYY-MM-DD HH:MM:SS", get(c_sub)),
            )
        })?;
        let duration = match get(c_dur) {
            "" => match (parse_datetime(get(c_start)), parse_datetime(get(c_end))) {
                (Some(s), Some(e)) => e - s,
                _ => {
                    return Err(bad(
                        file,
                        r,
                        "duration",
                        "empty, and start_time/end_time do not give it",
                    ))
                }
            },
            _ => number(c_dur, "duration")?,
        };
        if duration <= 0.0 {
            out.skipped += 1;
            continue;
        }
        let id = get(c_id).to_string();
        out.jobs.push(JobSpec {
            dataset: format!("job:{id}"),
            id,
            arrival: submit,
            gpus: gpus as u32,
            iterations: duration,
            iter_time: 1.0,
            slowdown: Slowdown::default(),
            model: String::new(),
            cpu: number(c_cpu, "cpu_num")?,
        });
    }
    Ok(out)
}
