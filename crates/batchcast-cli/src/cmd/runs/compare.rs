//! `batchcast runs compare`: a table of chosen metrics across runs, and
//! the collocation summary of each workload.

use anyhow::Result;
use batchcast_runs::compare::{
    collocation, speedups, summarize_runs, RunSummary, Speedup, WorkloadSummary,
};
use batchcast_runs::keys;

use super::StoreArg;
use crate::out::outln;

/// Arguments of `batchcast runs compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Runs to compare (ids from `batchcast runs list`); default: every run
    /// of the experiment (or of the store).
    pub runs: Vec<i64>,
    /// Only this experiment.
    #[arg(long)]
    pub experiment: Option<String>,
    /// A metric to summarise per run (repeat for several).
    #[arg(long = "metric", value_name = "KEY")]
    pub metrics: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: CompareArgs) -> Result<()> {
    let store = args.store.open_read_only()?;
    let runs = super::select_runs(&store, &args.runs, args.experiment.as_deref())?;
    let metrics = if args.metrics.is_empty() {
        vec![
            keys::BATCHCAST_SAMPLES_PER_S.to_string(),
            keys::BATCHCAST_DATA_WAIT_SHARE.to_string(),
            keys::PROC_CPU_PERCENT.to_string(),
            keys::PROC_PSS_BYTES.to_string(),
        ]
    } else {
        args.metrics.clone()
    };
    let per_run = summarize_runs(&store, &runs, &metrics)?;
    let workloads = collocation(&store, args.experiment.as_deref())?;
    let speed = speedups(&workloads);
    if args.json {
        let out = serde_json::json!({ "runs": per_run, "workloads": workloads, "speedups": speed });
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
        return Ok(());
    }

    print_runs(&metrics, &per_run)?;
    outln!()?;
    print_collocation(&workloads, &speed)
}

/// The table of runs: the mean, p50, p95 and max of each metric.
fn print_runs(metrics: &[String], per_run: &[RunSummary]) -> Result<()> {
    outln!("Runs (mean / p50 / p95 / max of each metric)")?;
    let mut header = format!(
        "{:>5}  {:<28}  {:<9}",
        "run", "experiment/workload/name", "status"
    );
    for m in metrics {
        header.push_str(&format!("  {:>30}", m));
    }
    outln!("{header}")?;
    for r in per_run {
        let name = format!("{}/{}/{}", r.run.experiment, r.run.workload, r.run.run.name);
        let mut line = format!(
            "{:>5}  {:<28}  {:<9}",
            r.run.run.id,
            cut(&name, 28),
            r.run.run.status
        );
        for (_, s) in &r.metrics {
            let cell = match s {
                Some(s) => format!(
                    "{} / {} / {} / {}",
                    num(s.mean),
                    num(s.p50),
                    num(s.p95),
                    num(s.max)
                ),
                None => "-".into(),
            };
            line.push_str(&format!("  {:>30}", cut(&cell, 30)));
        }
        outln!("{line}")?;
    }
    Ok(())
}

/// The table of workloads, then the speedup of each shared workload over
/// its independent twin.
fn print_collocation(workloads: &[WorkloadSummary], speed: &[Speedup]) -> Result<()> {
    outln!("Collocation per workload")?;
    outln!(
        "{:<24}  {:<6}  {:>4}  {:>8}  {:>10}  {:>10}  {:>12}  {:>9}  {:>10}",
        "experiment/workload",
        "data",
        "runs",
        "wall s",
        "samples/s",
        "data wait",
        "CPU s/1000",
        "GPU act.",
        "memory"
    )?;
    for w in workloads {
        print_workload(w)?;
    }
    for s in speed {
        let cpu = s
            .cpu_saving
            .map(|c| format!(", {c:.2}x less CPU per sample"))
            .unwrap_or_default();
        outln!(
            "sharing in {}: {} vs {}: {:.2}x aggregate samples/s{cpu}",
            s.experiment,
            s.shared,
            s.independent,
            s.throughput
        )?;
    }
    Ok(())
}

fn print_workload(w: &WorkloadSummary) -> Result<()> {
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map(f).unwrap_or_else(|| "-".into());
    outln!(
        "{:<24}  {:<6}  {:>4}  {:>8}  {:>10}  {:>10}  {:>12}  {:>9}  {:>10}",
        cut(&format!("{}/{}", w.experiment, w.workload), 24),
        if w.shared { "shared" } else { "own" },
        format!("{}/{}", w.finished, w.runs),
        opt(w.wall_s, &|v| format!("{v:.1}")),
        opt(w.samples_per_s, &|v| format!("{v:.1}")),
        opt(w.data_wait_share, &|v| format!("{:.1}%", 100.0 * v)),
        opt(w.cpu_s_per_1000_samples, &|v| format!("{v:.2}")),
        opt(w.gpu_activity, &|v| format!("{:.0}%", 100.0 * v)),
        opt(w.memory_bytes, &|v| format!(
            "{:.0} MiB",
            v / (1 << 20) as f64
        )),
    )
}

fn num(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{:.2e}", v)
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}
