//! `batchcast runs list|show|compare|export|plot`: read the run store.

pub mod compare;
pub mod export;
pub mod list;
pub mod mlflow_serve;
pub mod plot;
pub mod show;

use std::path::PathBuf;

/// Arguments of `batchcast runs`.
#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub command: RunsCommand,
}

/// The store to read: `--store`, else the default one.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArg {
    /// The run store (default: $BATCHCAST_STORE, else
    /// $XDG_DATA_HOME/batchcast/runs.sqlite).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
}

impl StoreArg {
    pub fn open_read_only(&self) -> anyhow::Result<batchcast_runs::Store> {
        let path = self
            .store
            .clone()
            .unwrap_or_else(batchcast_runs::Store::default_path);
        Ok(batchcast_runs::Store::open_read_only(path)?)
    }
}

/// The runs a command works on: the given ids, else every run of
/// `experiment` (of the store when `None`), oldest first.
pub fn select_runs(
    store: &batchcast_runs::Store,
    ids: &[i64],
    experiment: Option<&str>,
) -> anyhow::Result<Vec<i64>> {
    if !ids.is_empty() {
        return Ok(ids.to_vec());
    }
    let filter = batchcast_runs::RunFilter {
        experiment: experiment.map(String::from),
        ..Default::default()
    };
    Ok(store
        .runs(&filter)?
        .into_iter()
        .rev()
        .map(|r| r.run.id)
        .collect())
}

#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// The runs of the store, newest first.
    List(list::ListArgs),
    /// One run: fields, parameters, events, metrics, output.
    Show(show::ShowArgs),
    /// Summaries of metrics across runs, and what collocation and sharing
    /// gave per workload.
    Compare(compare::CompareArgs),
    /// Export metrics (CSV).
    Export(export::ExportArgs),
    /// Draw one metric of several runs (SVG).
    Plot(plot::PlotArgs),
    /// Serve the MLflow endpoint for one new run (internal, for tests).
    #[command(hide = true)]
    MlflowServe(mlflow_serve::MlflowServeArgs),
}

/// Runs `batchcast runs`.
pub fn run(args: RunsArgs) -> anyhow::Result<()> {
    match args.command {
        RunsCommand::List(a) => list::run(a),
        RunsCommand::Show(a) => show::run(a),
        RunsCommand::Compare(a) => compare::run(a),
        RunsCommand::Export(a) => export::run(a),
        RunsCommand::Plot(a) => plot::run(a),
        RunsCommand::MlflowServe(a) => mlflow_serve::run(a),
    }
}
