//! The runner: a plan's workloads one after another, the runs of each at
//! the same time, with their shared producer, listeners and MLflow
//! endpoint, every status change committed to the store as it happens.

mod data;
pub use data::CONSUMERS_ENV;
use serve_events::ServeEvents;
pub use serve_events::EVENTS_ENV;
mod figures;
mod serve_events;
pub use figures::{write_for_runner, FiguresError, FiguresSlot, FIGURES_ENV};
mod job;
mod orphans;
mod placement;
mod started;
mod tracking;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::gpu::GpuLayer;
use crate::listen::{self, JobWatch, WatchOptions};
use crate::plan::{Collocation, Plan, PlanRow};
use crate::StoreError;
use crate::{NewRun, Recorder, RunId, RunStatus, Store};
use job::{stop_all, Job};
use started::{end_of, Started};
use tracking::Tracking;

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
    /// Anything else that stops the plan, with what to do.
    #[error("{0}")]
    Other(String),
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
    for line in orphans::stop_orphans(&store, &host, opts.grace)? {
        (opts.progress)(&line);
    }
    let mut outcome = Outcome {
        repaired: store
            .repair_orphans(&host, |pid, start| process_start(pid) == Some(start))?
            .len(),
        ..Outcome::default()
    };
    let env = environment(opts.gpus.as_ref(), &host);
    let mut plan_status: HashMap<usize, RunStatus> = HashMap::new();
    for (position, (experiment, workload, rows)) in plan.workloads().into_iter().enumerate() {
        if opts.stop.load(Ordering::SeqCst) {
            outcome.interrupted = true;
            break;
        }
        let data = rows[0].data.clone();
        let e = store.experiment(&experiment)?;
        let w = store.workload(e, &workload, data.as_deref(), position as i64)?;
        let mut todo: Vec<(&PlanRow, RunId)> = Vec::new();
        for row in &rows {
            let new = NewRun {
                name: row.name.clone(),
                command: command_line(plan, row, &opts.python),
                params: row.params.clone(),
                devices: row.devices.clone(),
                collocation: row.collocation.as_str().to_string(),
                listeners: row.listeners.clone(),
                host: host.clone(),
                plan_file: Some(plan.file.display().to_string()),
                plan_row: Some(row.row as i64),
            };
            let (id, status) = store.add_run(w, &new)?;
            let skip = status == RunStatus::Finished
                || row.status == Some(RunStatus::Finished)
                || (status == RunStatus::Failed && !opts.rerun_failed)
                || status == RunStatus::Running;
            if skip {
                outcome.skipped += 1;
                continue;
            }
            if !store.claim_run(id, me, my_start, &env)? {
                outcome.skipped += 1;
                continue;
            }
            todo.push((row, id));
        }
        if todo.is_empty() {
            (opts.progress)(&format!("{experiment}/{workload}: nothing to run (finished, or failed without --rerun-failed)"));
            continue;
        }
        let ended = run_workload(
            &mut store,
            plan,
            opts,
            &experiment,
            &workload,
            w,
            data.as_deref(),
            &todo,
            &env,
        )?;
        for (row, id) in &todo {
            let status = ended.get(id).copied().unwrap_or(RunStatus::Killed);
            plan_status.insert(row.row, status);
            match status {
                RunStatus::Finished => outcome.finished += 1,
                RunStatus::Failed => outcome.failed += 1,
                _ => outcome.killed += 1,
            }
        }
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

/// Runs one workload's rows at once. Whatever way it returns (an error
/// included), nothing it started is left running and no run it claimed is
/// left RUNNING: [`Started`] stops and records them.
#[allow(clippy::too_many_arguments)]
fn run_workload(
    store: &mut Store,
    plan: &Plan,
    opts: &mut RunOptions,
    experiment: &str,
    workload: &str,
    workload_id: i64,
    data: Option<&str>,
    todo: &[(&PlanRow, RunId)],
    env: &serde_json::Value,
) -> Result<HashMap<RunId, RunStatus>, RunError> {
    let rec = Recorder::with_log_cap(&opts.store, opts.log_cap)?;
    let tracking = Tracking::start(&opts.store)?;
    let label = format!("{experiment}/{workload}");
    let mut started = Started::new(opts.store.clone(), opts.gpus.clone(), opts.grace);
    let result = drive(
        &mut started,
        store,
        plan,
        opts,
        &label,
        experiment,
        workload_id,
        data,
        todo,
        env,
        &rec,
        &tracking,
    );
    let why = match &result {
        Ok(_) => "stopped by the runner after the workload's jobs".to_string(),
        Err(e) => format!("stopped by the runner, which failed before the job ended: {e}"),
    };
    for problem in started.close(&why) {
        (opts.progress)(&format!("warning: {problem}"));
    }
    drop(started);
    tracking.close();
    let ended = result?;
    rec.finish()?;
    Ok(ended)
}

/// Records how a job that has ended ended, once its output is in.
fn record(
    store: &Store,
    job: &mut Job,
    label: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<RunStatus, RunError> {
    job.join_output();
    let (status, code, msg) = end_of(job);
    store.finish_run(job.run, status, code, msg.as_deref())?;
    job.recorded = true;
    progress(&format!(
        "{label}/{}: {status}{}",
        job.name,
        msg.map(|m| format!(" ({m})")).unwrap_or_default()
    ));
    Ok(status)
}

/// The body of [`run_workload`]: what it starts goes into `started`.
#[allow(clippy::too_many_arguments)]
fn drive(
    started: &mut Started,
    store: &mut Store,
    plan: &Plan,
    opts: &mut RunOptions,
    label: &str,
    experiment: &str,
    workload_id: i64,
    data: Option<&str>,
    todo: &[(&PlanRow, RunId)],
    env: &serde_json::Value,
    rec: &Recorder,
    tracking: &Tracking,
) -> Result<HashMap<RunId, RunStatus>, RunError> {
    let mut ended: HashMap<RunId, RunStatus> = HashMap::new();

    // MPS for the rows that ask for it.
    let mut mps_error = None;
    if todo.iter().any(|(r, _)| r.collocation == Collocation::Mps) {
        match opts.gpus.mps_running() {
            Ok(true) => {}
            Ok(false) => match opts.gpus.mps_start() {
                Ok(()) => started.mps_started = true,
                Err(e) => mps_error = Some(e.to_string()),
            },
            Err(e) => mps_error = Some(e.to_string()),
        }
    }

    // Place every row before starting anything.
    let mut used_mig = HashSet::new();
    let mut placed = Vec::new();
    for (row, id) in todo {
        let place = match (&row.collocation, &mps_error) {
            (Collocation::Mps, Some(e)) => Err(placement::PlaceError::Mps(e.clone())),
            _ => placement::place(row, opts.gpus.as_ref(), &mut used_mig),
        };
        match place {
            Ok(visible) => placed.push((*row, *id, visible)),
            Err(e) => {
                let msg = e.to_string();
                store.finish_run(*id, RunStatus::Failed, None, Some(&msg))?;
                (opts.progress)(&format!("{label}/{}: FAILED: {msg}", row.name));
                ended.insert(*id, RunStatus::Failed);
            }
        }
    }

    // The shared producer.
    let mut producer_name = None;
    if let (Some(data), false) = (data, placed.is_empty()) {
        let trainers = placed.len();
        match data::start(
            store,
            plan,
            opts,
            workload_id,
            data,
            &rec.handle(),
            env,
            trainers,
        ) {
            Ok(p) => {
                producer_name = Some(p.name);
                started.producer = Some(p.job);
            }
            Err(msg) => {
                for (row, id, _) in placed.drain(..) {
                    let m = format!("the workload's Data did not start: {msg}");
                    store.finish_run(id, RunStatus::Failed, None, Some(&m))?;
                    (opts.progress)(&format!("{label}/{}: FAILED: {m}", row.name));
                    ended.insert(id, RunStatus::Failed);
                }
            }
        }
    }

    // The jobs, each watched with its own row's devices and listeners.
    let mut watches: Vec<JobWatch> = Vec::new();
    for (row, id, visible) in &placed {
        let argv = command_line(plan, row, &opts.python);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(&plan.dir)
            .env("CUDA_VISIBLE_DEVICES", visible)
            .env("BATCHCAST_RUN_ID", id.to_string());
        tracking.env(&mut cmd, *id, experiment)?;
        if let Some(name) = &producer_name {
            cmd.env("BATCHCAST_NAME", name);
        }
        let figures = figures_slot(&mut cmd, *id, &rec.handle());
        let events = figures
            .as_ref()
            .map(|f| ServeEvents::new(f, serve_events::CONSUMER));
        if let Some(e) = &events {
            cmd.env(EVENTS_ENV, e.path());
        }
        match Job::start(*id, &row.name, cmd, &rec.handle()) {
            Ok(mut job) => {
                job.figures = figures;
                job.serve_events = events;
                let pid = job.pid();
                let job_start = job.start;
                started.jobs.push(job);
                store.set_pid(*id, i64::from(pid), job_start)?;
                watches.push(JobWatch {
                    run: *id,
                    pid,
                    devices: row.devices.clone(),
                    listeners: row.listeners.clone(),
                });
            }
            Err(e) => {
                let msg = format!("cannot start {}: {e}", argv[0]);
                store.finish_run(*id, RunStatus::Failed, None, Some(&msg))?;
                (opts.progress)(&format!("{label}/{}: FAILED: {msg}", row.name));
                ended.insert(*id, RunStatus::Failed);
            }
        }
    }
    if let Some(p) = &started.producer {
        watches.push(JobWatch {
            run: p.run,
            pid: p.pid(),
            devices: vec![],
            listeners: vec![],
        });
    }
    let sampler = listen::watch(
        &watches,
        &WatchOptions {
            interval: opts.interval,
            gpus: opts.gpus.clone(),
        },
        &rec.handle(),
    );

    // Wait for the jobs, or for a stop; each run is recorded as it ends.
    let begun = Instant::now();
    let mut last_report = Instant::now() - Duration::from_secs(60);
    let mut stopping = false;
    loop {
        if let Some(p) = started.producer.as_mut() {
            p.record_serve_events();
        }
        for j in started.jobs.iter_mut() {
            j.record_serve_events();
        }
        let alive = started
            .jobs
            .iter_mut()
            .map(|j| !j.poll())
            .filter(|a| *a)
            .count();
        for j in started
            .jobs
            .iter_mut()
            .filter(|j| !j.recorded && j.exited())
        {
            let status = record(store, j, label, &mut *opts.progress)?;
            ended.insert(j.run, status);
        }
        if alive == 0 {
            break;
        }
        if opts.stop.load(Ordering::SeqCst) && !stopping {
            stopping = true;
            (opts.progress)(&format!("{label}: stopping {alive} job(s)"));
            stop_all(
                started.jobs.iter_mut(),
                opts.grace,
                "stopped by the runner (Ctrl-C or SIGTERM)",
            );
            continue;
        }
        if last_report.elapsed() >= opts.report_every {
            last_report = Instant::now();
            let lines: Vec<String> = started
                .jobs
                .iter()
                .filter(|j| !j.exited())
                .map(|j| format!("  {}: {}", j.name, j.last_line()))
                .collect();
            (opts.progress)(&format!(
                "{label}: {alive}/{} job(s) alive, {:.0} s\n{}",
                started.jobs.len(),
                begun.elapsed().as_secs_f64(),
                lines.join("\n")
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    sampler.stop();

    // The producer: stopped after the jobs, which is how it is meant to
    // end; KILLED only when the whole runner was stopped.
    if let Some(p) = started.producer.as_mut() {
        let after = "the shared producer, stopped after the workload's jobs";
        p.stop(opts.grace, after);
        p.join_output();
        let (status, code, msg) = match end_of(p) {
            (RunStatus::Killed, _, _) if stopping => (
                RunStatus::Killed,
                None,
                Some("stopped by the runner (Ctrl-C or SIGTERM)".to_string()),
            ),
            (RunStatus::Killed, _, _) => (RunStatus::Finished, None, Some(after.to_string())),
            other => other,
        };
        store.finish_run(p.run, status, code, msg.as_deref())?;
        p.recorded = true;
    }
    Ok(ended)
}
