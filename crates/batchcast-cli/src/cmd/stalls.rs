//! `batchcast stalls`: data-stall analysis of a training script.
//!
//! The analysis lives in the Python package (`batchcast.stalls`), beside the
//! `mark()` call a script makes: this face checks the arguments and runs
//! `PYTHON -m batchcast.stalls ARGS -- COMMAND` with the command's own
//! interpreter (the one that imports batchcast), then, with `--store`,
//! records the analysis in the run store. The analysis runs the copies of
//! `--validate` with this binary's `batchcast run` (`--runner`), into
//! `--store` or the default store.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Args)]
pub struct StallsArgs {
    /// Measured steps per mode, after the warm-up [default: 30].
    #[arg(long, conflicts_with = "seconds")]
    steps: Option<u64>,
    /// Measure each mode for this many seconds instead of a number of steps.
    #[arg(long)]
    seconds: Option<f64>,
    /// Steps run before measuring.
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// Run every measurement this many rounds, interleaved, and report
    /// medians (3 on a busy or virtual machine, whose speed drifts).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    repeats: u32,
    /// Predict N collocated copies (several: 2,4).
    #[arg(long)]
    jobs: Option<String>,
    /// Also run K data-parallel processes under torchrun (communication stall).
    #[arg(long)]
    nproc: Option<u32>,
    /// Run the --jobs copies, with their own loaders and with one shared
    /// producer, and print the measurement beside the prediction.
    #[arg(long, requires = "jobs")]
    validate: bool,
    /// The dataset's files or directory [default: the files the loader opens].
    #[arg(long)]
    data: Vec<PathBuf>,
    /// Seconds one mode may take before it counts as hung.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    /// Print the analysis as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Record the analysis, and the runs of --validate, in this run store
    /// (see `batchcast run`; --validate's runs go to the default store without it).
    #[arg(long)]
    store: Option<PathBuf>,
    /// The training command: -- python train.py ARGS
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The interpreter that runs the analysis: the command's own when it is a
/// Python, else `$BATCHCAST_PYTHON`, else `python3`.
fn python(command: &[String]) -> String {
    match command.first() {
        Some(first)
            if std::path::Path::new(first)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python")) =>
        {
            first.clone()
        }
        _ => std::env::var("BATCHCAST_PYTHON").unwrap_or_else(|_| "python3".into()),
    }
}

/// Checks that `py` can import the analysis, so that a Python without
/// batchcast is named with the fix instead of ending in a bare
/// `ModuleNotFoundError` from the child.
fn check_python(py: &str) -> Result<()> {
    let probe = Command::new(py)
        .args([
            "-c",
            "import sys\ntry:\n    import batchcast.stalls\nexcept ImportError as e:\n    \
             print(sys.executable, sys.version.split()[0], e, sep='\\n'); sys.exit(3)",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .with_context(|| {
            format!("cannot run {py}: the analysis runs in the Python that runs the script; set BATCHCAST_PYTHON")
        })?;
    if probe.status.code() != Some(3) {
        return Ok(()); // importable, or a failure the analysis itself reports
    }
    let text = String::from_utf8_lossy(&probe.stdout);
    let mut lines = text.lines();
    let exe = lines.next().unwrap_or(py);
    let version = lines.next().unwrap_or("?");
    let why = lines.next().unwrap_or("no module named 'batchcast'");
    anyhow::bail!(
        "the Python that runs the analysis, {py} ({exe}, Python {version}), cannot import \
         batchcast.stalls ({why}). Install batchcast into it (`{exe} -m pip install batchcast`, \
         or `maturin develop` from a checkout), or name a Python that has it: run the script \
         with that Python (`batchcast stalls -- /path/to/python train.py`) or set BATCHCAST_PYTHON"
    )
}

pub fn run(a: StallsArgs) -> Result<i32> {
    let py = python(&a.command);
    check_python(&py)?;
    let mut cmd = Command::new(&py);
    cmd.args(["-m", "batchcast.stalls"]);
    if let Some(s) = a.steps {
        cmd.arg(format!("--steps={s}"));
    }
    if let Some(s) = a.seconds {
        cmd.arg(format!("--seconds={s}"));
    }
    cmd.arg(format!("--warmup={}", a.warmup));
    cmd.arg(format!("--repeats={}", a.repeats));
    if let Some(j) = &a.jobs {
        cmd.arg(format!("--jobs={j}"));
    }
    if let Some(k) = a.nproc {
        cmd.arg(format!("--nproc={k}"));
    }
    if a.validate {
        cmd.arg("--validate");
    }
    for d in &a.data {
        cmd.arg("--data").arg(d);
    }
    cmd.arg(format!("--timeout={}", a.timeout));
    if a.json {
        cmd.arg("--json");
    }
    if let Some(store) = &a.store {
        cmd.arg("--store").arg(store);
    }
    if let Ok(exe) = std::env::current_exe() {
        cmd.arg("--runner").arg(exe);
    }
    let report = match &a.store {
        Some(_) => Some(new_report_file()?),
        None => None,
    };
    if let Some(r) = &report {
        cmd.arg("--json-out").arg(r);
    }
    cmd.arg("--").args(&a.command);
    let result = finish(&py, cmd.status(), a.store.as_deref(), report.as_deref());
    if let Some(r) = &report {
        let _ = std::fs::remove_file(r);
    }
    result
}

fn finish(
    py: &str,
    status: std::io::Result<std::process::ExitStatus>,
    store: Option<&std::path::Path>,
    report: Option<&std::path::Path>,
) -> Result<i32> {
    let status = status.with_context(|| {
        format!("cannot run {py}: the analysis runs in the Python that runs the script; set BATCHCAST_PYTHON")
    })?;
    let code = status.code().unwrap_or(1);
    if code != 0 {
        return Ok(code);
    }
    if let (Some(store), Some(r)) = (store, report) {
        let run = batchcast_runs::stalls::record_file(store, r)
            .with_context(|| format!("recording the analysis in {}", store.display()))?;
        eprintln!(
            "batchcast stalls: recorded as run {run} in {}",
            store.display()
        );
    }
    Ok(0)
}

/// A new, empty file (created exclusively, mode 0600) for the JSON analysis.
fn new_report_file() -> Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::env::temp_dir().join(format!(
        "batchcast-stalls-{}-{}.json",
        std::process::id(),
        batchcast_runs::now_ms()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| {
            format!(
                "cannot create {}; set TMPDIR to a writable directory",
                path.display()
            )
        })?;
    Ok(path)
}
