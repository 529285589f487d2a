//! `batchcast runs mlflow-serve` (hidden): the MLflow endpoint of
//! `batchcast run` on its own, for tests and for logging a script run by
//! hand into the store. Prints `MLFLOW_TRACKING_URI=...`,
//! `MLFLOW_RUN_ID=...`, `BATCHCAST_RUN=...` and `MLFLOW_TRACKING_TOKEN=...`
//! lines, then serves until its stdin closes.

use std::io::Read;

use crate::out::outln;
use anyhow::Result;
use batchcast_runs::mlflow::{mlflow_run_id, Endpoint};
use batchcast_runs::{NewRun, Store};

/// Arguments of `batchcast runs mlflow-serve`.
#[derive(Debug, clap::Args)]
pub struct MlflowServeArgs {
    /// Experiment of the run it makes.
    #[arg(long, default_value = "mlflow")]
    pub experiment: String,
    /// Name of the run it makes.
    #[arg(long, default_value = "run")]
    pub name: String,
    /// The run store (created when missing).
    #[arg(long, value_name = "FILE")]
    pub store: Option<std::path::PathBuf>,
}

pub fn run(args: MlflowServeArgs) -> Result<()> {
    let path = args.store.unwrap_or_else(Store::default_path);
    let mut store = Store::open(&path)?;
    let e = store.experiment(&args.experiment)?;
    let w = store.workload(e, "mlflow", None, 0)?;
    let (run, _) = store.add_run(
        w,
        &NewRun {
            name: args.name,
            collocation: "-".into(),
            ..NewRun::default()
        },
    )?;
    store.claim_run(
        run,
        i64::from(std::process::id()),
        0,
        &serde_json::json!({}),
    )?;
    let endpoint = Endpoint::start(&path)?;
    outln!("MLFLOW_TRACKING_URI={}", endpoint.url())?;
    outln!("MLFLOW_RUN_ID={}", mlflow_run_id(run))?;
    outln!("BATCHCAST_RUN={run}")?;
    outln!("MLFLOW_TRACKING_TOKEN={}", endpoint.token_for(run)?)?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().take(1 << 20).read_to_end(&mut sink);
    drop(endpoint);
    store.finish_run(run, batchcast_runs::RunStatus::Finished, Some(0), None)?;
    Ok(())
}
