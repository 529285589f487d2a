//! `batchcast run PLAN` and `batchcast run -- CMD ...`: run collocated
//! experiments and record them in the run store.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use batchcast_runs::plan::Plan;
use batchcast_runs::runner::{run_plan, RunOptions};
use batchcast_runs::Store;

/// Arguments of `batchcast run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The plan: a .csv or .yaml file (or use `-- CMD ARGS` for one job).
    pub plan: Option<PathBuf>,
    /// The run store (default: $BATCHCAST_STORE, else
    /// $XDG_DATA_HOME/batchcast/runs.sqlite).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Seconds between listener samples.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Run rows that FAILED before again (FINISHED rows are always skipped).
    #[arg(long)]
    pub rerun_failed: bool,
    /// Seconds a stopped job gets between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub grace: f64,
    /// MiB of each output stream (stdout, stderr) a run keeps: its first
    /// half and its last half, with a note of how much was dropped between
    /// them; 0 keeps everything.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub log_cap: u64,
    /// Experiment of a single command.
    #[arg(long, default_value = "default")]
    pub experiment: String,
    /// Workload of a single command.
    #[arg(long, default_value = "default")]
    pub workload: String,
    /// Run name of a single command (default: run-<time>).
    #[arg(long)]
    pub name: Option<String>,
    /// One command to run instead of a plan.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs `batchcast run`; the exit code is 0 when every run finished, 1 when
/// one failed, 130 when stopped.
pub fn run(args: RunArgs) -> Result<i32> {
    if !(0.05..=3600.0).contains(&args.interval) {
        bail!(
            "--interval {} is outside 0.05 to 3600 seconds",
            args.interval
        );
    }
    let plan = match (&args.plan, args.command.is_empty()) {
        (Some(p), true) => Plan::load(p)?,
        (None, false) => {
            let name = args.name.clone().unwrap_or_else(|| format!("run-{}", batchcast_runs::now_ms()));
            Plan::single(&args.experiment, &args.workload, &name, &args.command)?
        }
        (Some(_), false) => bail!("give a plan or a command after `--`, not both"),
        (None, true) => bail!("nothing to run: give a plan (batchcast run plan.csv) or a command (batchcast run -- python train.py)"),
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install(&stop)?;
    let store = args.store.clone().unwrap_or_else(Store::default_path);
    let tty = std::io::stderr().is_terminal();
    let mut opts = RunOptions {
        store: store.clone(),
        interval: Duration::from_secs_f64(args.interval),
        rerun_failed: args.rerun_failed,
        gpus: Arc::from(batchcast_runs::gpu::system()),
        stop,
        exe: std::env::current_exe().context("cannot find the batchcast binary itself")?,
        python: std::env::var("BATCHCAST_PYTHON").unwrap_or_else(|_| "python3".into()),
        grace: Duration::from_secs_f64(args.grace.clamp(0.0, 600.0)),
        log_cap: args.log_cap.saturating_mul(1 << 20),
        report_every: batchcast_runs::runner::REPORT_EVERY,
        progress: Box::new(move |line: &str| {
            if tty {
                eprintln!("\x1b[2m[batchcast run]\x1b[0m {line}");
            } else {
                eprintln!("[batchcast run] {line}");
            }
        }),
    };
    eprintln!("[batchcast run] store: {}", store.display());
    let out = run_plan(&plan, &mut opts)?;
    eprintln!(
        "[batchcast run] {} finished, {} failed, {} killed, {} skipped{}",
        out.finished,
        out.failed,
        out.killed,
        out.skipped,
        if out.repaired > 0 {
            format!(
                " ({} left RUNNING by a dead runner marked KILLED)",
                out.repaired
            )
        } else {
            String::new()
        }
    );
    Ok(if out.interrupted {
        130
    } else if out.failed > 0 || out.killed > 0 {
        1
    } else {
        0
    })
}
