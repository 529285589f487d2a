//! `batchcast runs plot RUN... --metric KEY -o FILE.svg|FILE.png`: a chart
//! of one metric across runs.

use std::path::PathBuf;

use anyhow::{bail, Result};
use batchcast_runs::plot::{plot, Format, XAxis};

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
    /// The chart to write: .svg, or .png (rendered at twice the size with
    /// the machine's fonts).
    #[arg(short = 'o', long = "output", value_name = "FILE.svg|FILE.png")]
    pub output: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: PlotArgs) -> Result<()> {
    let Some(format) = Format::of(&args.output) else {
        bail!(
            "{}: say the chart's format by its extension, .svg or .png",
            args.output.display()
        );
    };
    let store = args.store.open_read_only()?;
    let x = if args.step {
        XAxis::Step
    } else {
        XAxis::Elapsed
    };
    plot(&store, &args.runs, &args.metric, x, format, &args.output)?;
    eprintln!("wrote {}", args.output.display());
    Ok(())
}
