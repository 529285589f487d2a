//! Figures from an outcome: makespan, JCT percentiles, queueing delay,
//! communication overhead, utilisation, preemptions; CSV and tables.

use serde::Serialize;

use crate::engine::Outcome;

/// One policy's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Policy name.
    pub policy: String,
    /// Jobs.
    pub jobs: usize,
    /// Last finish minus first arrival, seconds.
    pub makespan: f64,
    /// Job completion time (finish - arrival), seconds.
    pub mean_jct: f64,
    /// Median JCT.
    pub median_jct: f64,
    /// 95th percentile JCT.
    pub p95_jct: f64,
    /// 99th percentile JCT.
    pub p99_jct: f64,
    /// Mean seconds waiting for GPUs.
    pub mean_queueing: f64,
    /// Seconds lost to network slowdowns, summed over jobs.
    pub comm_overhead: f64,
    /// Seconds lost to CPU-starved data loading, summed over jobs.
    pub cpu_overhead: f64,
    /// Core-seconds of data loading (a shared pipeline counted once; a
    /// machine's cores at most), summed over jobs.
    pub loading_core_seconds: f64,
    /// GPU-seconds held / (GPUs x makespan).
    pub utilisation: f64,
    /// Preemptions in all.
    pub preemptions: u64,
    /// Events processed.
    pub events: u64,
}

/// The `q` quantile (0..=1) of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let k = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[k - 1]
}

impl Summary {
    /// Figures of `o`.
    pub fn of(o: &Outcome) -> Summary {
        let mut jct: Vec<f64> = o
            .jobs
            .iter()
            .map(|j| j.finish.unwrap_or(f64::NAN) - j.spec.arrival)
            .collect();
        jct.sort_by(f64::total_cmp);
        let n = o.jobs.len().max(1) as f64;
        let first = o
            .jobs
            .iter()
            .map(|j| j.spec.arrival)
            .fold(f64::INFINITY, f64::min);
        let last = o.jobs.iter().filter_map(|j| j.finish).fold(0.0, f64::max);
        let makespan = if o.jobs.is_empty() { 0.0 } else { last - first };
        let held: f64 = o.jobs.iter().map(|j| j.held * j.spec.gpus as f64).sum();
        Summary {
            policy: o.policy.clone(),
            jobs: o.jobs.len(),
            makespan,
            mean_jct: jct.iter().sum::<f64>() / n,
            median_jct: quantile(&jct, 0.5),
            p95_jct: quantile(&jct, 0.95),
            p99_jct: quantile(&jct, 0.99),
            mean_queueing: o.jobs.iter().map(|j| j.queued).sum::<f64>() / n,
            comm_overhead: o.jobs.iter().map(|j| j.comm).sum(),
            cpu_overhead: o.jobs.iter().map(|j| j.cpu_lost).sum(),
            loading_core_seconds: o.jobs.iter().map(|j| j.loading).sum(),
            utilisation: if makespan > 0.0 {
                held / (o.total_gpus as f64 * makespan)
            } else {
                0.0
            },
            preemptions: o.jobs.iter().map(|j| j.preemptions as u64).sum(),
            events: o.events,
        }
    }
}

/// Per-job CSV: one row per job in trace order.
pub fn jobs_csv(o: &Outcome) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let header = [
        "job_id",
        "gpus",
        "arrival",
        "first_start",
        "finish",
        "jct",
        "queueing",
        "held",
        "comm_overhead",
        "cpu_overhead",
        "restart_stall",
        "preemptions",
        "widest_level",
        "dataset",
    ];
    // Writing to a Vec cannot fail, and every record has the header's width.
    let _ = w.write_record(header);
    let t = |x: f64| format!("{x:.3}");
    for j in &o.jobs {
        let f = j.finish.unwrap_or(f64::NAN);
        let _ = w.write_record([
            j.spec.id.clone(),
            j.spec.gpus.to_string(),
            t(j.spec.arrival),
            t(j.first_start.unwrap_or(f64::NAN)),
            t(f),
            t(f - j.spec.arrival),
            t(j.queued),
            t(j.held),
            t(j.comm),
            t(j.cpu_lost),
            t(j.stalled),
            j.preemptions.to_string(),
            j.widest.name().to_string(),
            j.spec.dataset.clone(),
        ]);
    }
    let bytes = w.into_inner().unwrap_or_default();
    // Every field written is a Rust string: the bytes are UTF-8.
    String::from_utf8(bytes).unwrap_or_default()
}

/// A plain-text (Markdown) table comparing policies; the last column is the
/// change of mean JCT against the first row.
pub fn comparison_table(rows: &[Summary]) -> String {
    let mut s = String::from(
        "| policy | makespan (h) | mean JCT (h) | median JCT (h) | p95 JCT (h) | p99 JCT (h) | mean queueing (h) | comm. overhead (job-h) | CPU overhead (job-h) | util. | preemptions |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let h = |x: f64| x / 3600.0;
    for r in rows {
        s.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1}% | {} |\n",
            r.policy,
            h(r.makespan),
            h(r.mean_jct),
            h(r.median_jct),
            h(r.p95_jct),
            h(r.p99_jct),
            h(r.mean_queueing),
            h(r.comm_overhead),
            h(r.cpu_overhead),
            100.0 * r.utilisation,
            r.preemptions
        ));
    }
    s
}
