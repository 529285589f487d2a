//! `batchcast runs plot RUN... --metric KEY -o FILE.svg`: a chart of one
//! metric across runs.

use std::path::PathBuf;

use anyhow::{bail, Result};
use batchcast_runs::plot::{plot_svg, XAxis};

use super::StoreArg;

/// Arguments of `batchcast runs plot`.
#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// Runs to draw (ids from `batchcast runs list`).
    #[arg(required = true)]
    pub runs: Vec<i64>,
    /// The metric.
    #[arg(long)]
    pub metric: String,
    /// Against the logged step instead of the elapsed time.
    #[arg(long)]
    pub step: bool,
    /// The chart to write (SVG).
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: PlotArgs) -> Result<()> {
    let ext = args
        .output
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ext != "svg" {
        bail!(
            "{} is not an .svg file; charts are SVG (convert one to PNG with e.g. `rsvg-convert -o chart.png chart.svg`)",
            args.output.display()
        );
    }
    let store = args.store.open_read_only()?;
    let x = if args.step {
        XAxis::Step
    } else {
        XAxis::Elapsed
    };
    plot_svg(&store, &args.runs, &args.metric, x, &args.output)?;
    eprintln!("wrote {}", args.output.display());
    Ok(())
}
