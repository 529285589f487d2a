//! `batchcast runs export --csv FILE|- --mlflow DIR`: metrics as CSV, runs
//! as an MLflow file store.

use std::path::PathBuf;

use anyhow::{bail, Result};

use super::StoreArg;

/// Arguments of `batchcast runs export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Runs to export (default: every run of the experiment, or of the store).
    pub runs: Vec<i64>,
    /// Only this experiment.
    #[arg(long)]
    pub experiment: Option<String>,
    /// Only this metric (repeat for several; default: all).
    #[arg(long = "metric", value_name = "KEY")]
    pub metrics: Vec<String>,
    /// Write CSV here (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the runs (params, metrics, tags, output) as an MLflow file
    /// store in this directory (made when missing; exporting again
    /// replaces the runs instead of copying them).
    #[arg(long, value_name = "DIR")]
    pub mlflow: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: ExportArgs) -> Result<()> {
    if args.csv.is_none() && args.mlflow.is_none() {
        bail!("say what to export: --csv FILE (or --csv - for standard output), or --mlflow DIR");
    }
    let store = args.store.open_read_only()?;
    let runs = super::select_runs(&store, &args.runs, args.experiment.as_deref())?;
    if let Some(path) = &args.csv {
        csv(&store, &runs, &args.metrics, path)?;
    }
    if let Some(dir) = &args.mlflow {
        if !args.metrics.is_empty() {
            bail!("--metric chooses CSV columns; an MLflow export takes every metric of each run");
        }
        let out = batchcast_runs::export::to_mlflow(&store, &runs, dir)?;
        for (from, to) in &out.renamed {
            eprintln!(
                "note: metric/param {from:?} exported as {to:?} (MLflow refuses the name, or another series of the run has it)"
            );
        }
        eprintln!(
            "wrote {} runs ({} metric points) to the MLflow file store {}\n\
             read it with: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {}\n\
             or move it into a database: mlflow migrate-filestore --source {} --target sqlite:///mlflow.db",
            out.runs.len(),
            out.points,
            dir.display(),
            dir.display(),
            dir.display(),
        );
    }
    Ok(())
}

fn csv(
    store: &batchcast_runs::Store,
    runs: &[i64],
    metrics: &[String],
    path: &std::path::Path,
) -> Result<()> {
    if path.as_os_str() == "-" {
        let mut stdout = crate::out::Stdout::default();
        return match batchcast_runs::export::metrics_csv(store, runs, metrics, &mut stdout) {
            Err(_) if stdout.closed() => Err(crate::out::StdoutClosed.into()),
            r => r.map(drop).map_err(Into::into),
        };
    }
    let rows = batchcast_runs::export::metrics_csv_file(store, runs, metrics, path)?;
    eprintln!(
        "wrote {rows} rows of {} runs to {}",
        runs.len(),
        path.display()
    );
    Ok(())
}
