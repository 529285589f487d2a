//! `batchcast runs export --csv FILE|-`: metrics as CSV.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

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
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: ExportArgs) -> Result<()> {
    let Some(path) = args.csv else {
        bail!("say what to export: --csv FILE (or --csv - for standard output)");
    };
    let store = args.store.open_read_only()?;
    let runs = super::select_runs(&store, &args.runs, args.experiment.as_deref())?;
    let rows = if path.as_os_str() == "-" {
        batchcast_runs::export::metrics_csv(&store, &runs, &args.metrics, std::io::stdout().lock())?
    } else {
        let file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let rows = batchcast_runs::export::metrics_csv(
            &store,
            &runs,
            &args.metrics,
            std::io::BufWriter::new(file),
        )?;
        eprintln!(
            "wrote {rows} rows of {} runs to {}",
            runs.len(),
            path.display()
        );
        rows
    };
    let _ = rows;
    Ok(())
}
