//! The runner: a plan's workloads one after another, the runs of each at
//! the same time, with their shared producer, listeners and MLflow
//! endpoint, every status change committed to the store as it happens.

mod data;
pub use data::CONSUMERS_ENV;
pub use serve_events::EVENTS_ENV;
mod figures;
mod serve_events;
pub use figures::{write_for_runner, FiguresError, FiguresSlot, FIGURES_ENV};
mod job;
mod orphans;
mod placement;
mod started;
mod tracking;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::gpu::GpuLayer;
use crate::plan::{Plan, PlanRow};
use crate::StoreError;
use crate::{NewRun, RunId, RunStatus, Store};
use workload::{run_workload, Workload};

/// How a plan is run.
pub struct RunOptions {
    /// The run store file.
    pub store: PathBuf,
    /// Listener sampling period.
    pub interval: Duration,
    /// Run FAILED rows again (FINISHED rows are always skipped).
    pub rerun_failed: bool,
    /// The GPU layer (NVML, or a stand-in in tests) for placement and
    /// listeners.
    pub gpus: Arc<dyn GpuLayer>,
    /// Set (by a signal handler) to stop every job of the running workload
    /// and record them KILLED.
    pub stop: Arc<AtomicBool>,
    /// The `batchcast` binary, for `Data = batchcast serve ...`.
    pub exe: PathBuf,
    /// The interpreter for `.py` files.
    pub python: String,
    /// Time between SIGTERM and SIGKILL when stopping a job.
    pub grace: Duration,
    /// Bytes of each stream (stdout, stderr) a run keeps: the first half
    /// and the last half, with a note of what was dropped between them; 0
    /// keeps everything. [`crate::DEFAULT_LOG_CAP`] unless told otherwise.
    pub log_cap: u64,
    /// Where progress lines go (which workload, which jobs are alive, the
    /// elapsed time, each job's last line).
    pub progress: Box<dyn FnMut(&str) + Send>,
    /// How often the jobs' progress is reported ([`REPORT_EVERY`] unless
    /// told otherwise).
    pub report_every: Duration,
}

/// How often `batchcast run` reports its jobs' progress.
pub const REPORT_EVERY: Duration = Duration::from_secs(2);

/// What running a plan did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Runs that ended FINISHED.
    pub finished: usize,
    /// Runs that ended FAILED.
    pub failed: usize,
    /// Runs that ended KILLED.
    pub killed: usize,
    /// Rows not run: FINISHED already, or FAILED without `--rerun-failed`.
    pub skipped: usize,
    /// Runs left RUNNING by a dead runner, marked KILLED first.
    pub repaired: usize,
    /// Stopped by a signal.
    pub interrupted: bool,
}

/// Why a plan could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run store refused a read or a write.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A job a dead runner left running could not be signalled; nothing
    /// is started beside it.
    #[error(
        "{orphan} cannot be stopped ({error}); stop it yourself (`kill -- -{pid}`) and run again, \
         or a second copy of it would run beside it"
    )]
    OrphanUnstoppable {
        /// The orphan: its run, name, pid and dead runner.
        orphan: String,
        /// Its process group.
        pid: i64,
        /// Why the signal failed: in the message, so not the error's
        /// `source()` (a reader of the whole chain would print it twice).
        error: std::io::Error,
    },
    /// A job a dead runner left running outlived SIGKILL; nothing is
    /// started beside it.
    #[error(
        "{orphan} did not end after SIGKILL; stop it yourself (`kill -KILL -- -{pid}`) and run \
         again, or a second copy of it would run beside it"
    )]
    OrphanSurvived {
        /// The orphan: its run, name, pid and dead runner.
        orphan: String,
        /// Its process group.
        pid: i64,
    },
}

/// This host's name, as runs record it.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Start time of a process (clock ticks after boot), against pid reuse.
pub fn process_start(pid: i64) -> Option<i64> {
    batchcast_proc::procfs::start_time(pid)
}

/// Runs `plan`; returns what happened. Rows fail on their own (a job that
/// exits non-zero, a row that cannot be placed); only a store that cannot
/// be written stops the plan.
pub fn run_plan(plan: &Plan, opts: &mut RunOptions) -> Result<Outcome, RunError> {
    let mut store = Store::open(&opts.store)?;
    let host = host_name();
    let me = i64::from(std::process::id());
    let my_start = process_start(me).unwrap_or(0);
    let mut outcome = Outcome {
        repaired: clean_up(&mut store, &host, opts)?,
        ..Outcome::default()
    };
    let env = environment(opts.gpus.as_ref(), &host);
    let claimant = Claimant {
        host: &host,
        me,
        start: my_start,
        env: &env,
    };
    let mut plan_status: HashMap<usize, RunStatus> = HashMap::new();
    for (position, (experiment, workload, rows)) in plan.workloads().into_iter().enumerate() {
        if opts.stop.load(Ordering::SeqCst) {
            outcome.interrupted = true;
            break;
        }
        let data = rows[0].data.clone();
        let e = store.experiment(&experiment)?;
        let w = store.workload(e, &workload, data.as_deref(), position as i64)?;
        let (todo, skipped) = claim_rows(&mut store, plan, opts, w, &rows, &claimant)?;
        outcome.skipped += skipped;
        if todo.is_empty() {
            (opts.progress)(&format!("{experiment}/{workload}: nothing to run (finished, or failed without --rerun-failed)"));
            continue;
        }
        let this = Workload {
            plan,
            experiment: &experiment,
            name: &workload,
            id: w,
            data: data.as_deref(),
            env: &env,
        };
        let ended = run_workload(&mut store, opts, &this, &todo)?;
        tally(&todo, &ended, &mut plan_status, &mut outcome);
        if let Err(e) = plan.record_status(&plan_status) {
            (opts.progress)(&format!(
                "warning: cannot write statuses back into {}: {e}",
                plan.file.display()
            ));
        }
        if opts.stop.load(Ordering::SeqCst) {
            outcome.interrupted = true;
            break;
        }
    }
    Ok(outcome)
}

/// Stops the jobs a dead runner of this host left running, and marks
/// their runs (and any other orphan) ended; returns how many runs were
/// repaired.
fn clean_up(store: &mut Store, host: &str, opts: &mut RunOptions) -> Result<usize, RunError> {
    for line in orphans::stop_orphans(store, host, opts.grace)? {
        (opts.progress)(&line);
    }
    Ok(store
        .repair_orphans(host, |pid, start| process_start(pid) == Some(start))?
        .len())
}

/// This runner, as it claims runs: its host, pid and start time, and the
/// environment facts it records.
struct Claimant<'a> {
    host: &'a str,
    me: i64,
    start: i64,
    env: &'a serde_json::Value,
}

/// The rows of a workload to run now, with their runs' ids.
type Todo<'p> = Vec<(&'p PlanRow, RunId)>;

/// Adds each row of workload `w` to the store and claims those to run now
/// (not finished, not failed unless --rerun-failed, not running under
/// another runner); returns them and how many were skipped.
fn claim_rows<'p>(
    store: &mut Store,
    plan: &Plan,
    opts: &RunOptions,
    w: i64,
    rows: &[&'p PlanRow],
    claimant: &Claimant<'_>,
) -> Result<(Todo<'p>, usize), RunError> {
    let mut todo = Vec::new();
    let mut skipped = 0;
    for &row in rows {
        let new = NewRun {
            name: row.name.clone(),
            command: command_line(plan, row, &opts.python),
            params: row.params.clone(),
            devices: row.devices.clone(),
            collocation: row.collocation.as_str().to_string(),
            listeners: row.listeners.clone(),
            host: claimant.host.to_string(),
            plan_file: Some(plan.file.display().to_string()),
            plan_row: Some(row.row as i64),
        };
        let (id, status) = store.add_run(w, &new)?;
        let skip = status == RunStatus::Finished
            || row.status == Some(RunStatus::Finished)
            || (status == RunStatus::Failed && !opts.rerun_failed)
            || status == RunStatus::Running;
        if skip || !store.claim_run(id, claimant.me, claimant.start, claimant.env)? {
            skipped += 1;
            continue;
        }
        todo.push((row, id));
    }
    Ok((todo, skipped))
}

/// Counts how the workload's runs ended (a run with no end recorded was
/// killed), and notes each row's status for the plan file.
fn tally(
    todo: &[(&PlanRow, RunId)],
    ended: &HashMap<RunId, RunStatus>,
    plan_status: &mut HashMap<usize, RunStatus>,
    outcome: &mut Outcome,
) {
    for (row, id) in todo {
        let status = ended.get(id).copied().unwrap_or(RunStatus::Killed);
        plan_status.insert(row.row, status);
        match status {
            RunStatus::Finished => outcome.finished += 1,
            RunStatus::Failed => outcome.failed += 1,
            _ => outcome.killed += 1,
        }
    }
}

/// The argv a row runs.
fn command_line(plan: &Plan, row: &PlanRow, python: &str) -> Vec<String> {
    let file = plan.resolve(&row.file).display().to_string();
    let mut argv = if row.file.ends_with(".py") {
        vec![python.to_string(), file]
    } else {
        vec![file]
    };
    argv.extend(row.args.iter().cloned());
    argv
}

/// A private place for the figures of `run`, given to its job in
/// [`FIGURES_ENV`]; when none can be made, the job is not told of one and
/// the run's events say why.
fn figures_slot(cmd: &mut Command, run: RunId, rec: &crate::RecorderHandle) -> Option<FiguresSlot> {
    match FiguresSlot::new() {
        Ok(slot) => {
            cmd.env(FIGURES_ENV, slot.file());
            Some(slot)
        }
        Err(e) => {
            let note = format!(
                "no {FIGURES_ENV} for the job: cannot make a private directory for it: {e}; \
                 check that the temporary directory (TMPDIR) is writable"
            );
            rec.event(run, "runner", &note);
            None
        }
    }
}

/// Facts about where runs ran.
fn environment(gpus: &dyn GpuLayer, host: &str) -> serde_json::Value {
    let gpus = match gpus.gpus() {
        Ok(list) => serde_json::json!(list
            .iter()
            .map(|g| format!("{}: {} ({})", g.index, g.name, g.uuid))
            .collect::<Vec<_>>()),
        Err(e) => serde_json::json!(e.to_string()),
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    serde_json::json!({
        "host": host, "batchcast": env!("CARGO_PKG_VERSION"), "kernel": kernel.trim(),
        "cpus": cpus, "gpus": gpus,
    })
}
