//! `batchcast runs list`: the runs of the store, newest first.

use anyhow::Result;
use batchcast_runs::{now_ms, RunFilter, RunStatus};

use super::StoreArg;
use crate::out::outln;

/// Arguments of `batchcast runs list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this experiment.
    #[arg(long)]
    pub experiment: Option<String>,
    /// Only this workload.
    #[arg(long)]
    pub workload: Option<String>,
    /// Only runs with this status (RUNNING, FINISHED, FAILED, KILLED).
    #[arg(long)]
    pub status: Option<String>,
    /// Only runs whose name or a `key=value` parameter contains this.
    #[arg(long)]
    pub search: Option<String>,
    /// At most this many runs.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: ListArgs) -> Result<()> {
    let store = args.store.open_read_only()?;
    let status = match &args.status {
        Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
            anyhow::anyhow!("--status {s:?} is none of RUNNING, FINISHED, FAILED, KILLED, PENDING")
        })?),
        None => None,
    };
    let filter = RunFilter {
        experiment: args.experiment,
        workload: args.workload,
        status,
        search: args.search,
        limit: Some(args.limit),
    };
    let rows = store.runs(&filter)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    let now = now_ms();
    outln!(
        "{:>5}  {:<16}  {:<16}  {:<20}  {:<9}  {:>9}  {:>4}  {:<8}",
        "id",
        "experiment",
        "workload",
        "name",
        "status",
        "duration",
        "exit",
        "devices"
    )?;
    for r in rows {
        let dur = r
            .run
            .duration_ms(now)
            .map(|ms| format!("{:.1} s", ms as f64 / 1000.0))
            .unwrap_or_else(|| "-".into());
        let exit = r
            .run
            .exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into());
        let devices = if r.run.devices.is_empty() {
            "cpu".to_string()
        } else {
            r.run.devices.join(",")
        };
        outln!(
            "{:>5}  {:<16}  {:<16}  {:<20}  {:<9}  {:>9}  {:>4}  {:<8}",
            r.run.id,
            r.experiment,
            r.workload,
            r.run.name,
            r.run.status,
            dur,
            exit,
            devices
        )?;
    }
    Ok(())
}
