//! One workload's rows run at once, as steps: MPS for the rows that ask
//! for it, placement of every row before anything starts, the shared
//! producer, the jobs and their listeners, the wait (each run recorded as
//! it ends, a stop passed on), and the producer stopped last. Whatever way
//! it returns, [`Started`] stops what it started and records its runs.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::job::{stop_all, Job};
use super::serve_events::{ServeEvents, CONSUMER, EVENTS_ENV};
use super::started::{end_of, Started};
use super::tracking::Tracking;
use super::{command_line, data, figures_slot, placement, RunError, RunOptions};
use crate::listen::{self, JobWatch, WatchOptions};
use crate::plan::{Collocation, Plan, PlanRow};
use crate::{Recorder, RunId, RunStatus, Store};

/// A workload of a plan, as the runner runs it.
pub(super) struct Workload<'a> {
    /// The plan it is part of.
    pub plan: &'a Plan,
    /// Its experiment's name.
    pub experiment: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its id in the store.
    pub id: i64,
    /// Its `Data` command, if its jobs share a producer.
    pub data: Option<&'a str>,
    /// Facts about where its runs run.
    pub env: &'a serde_json::Value,
}

/// What the run of a job stopped because the runner got Ctrl-C or
/// SIGTERM says.
const STOPPED_BY_SIGNAL: &str = "stopped by the runner (Ctrl-C or SIGTERM)";

/// Runs one workload's rows at once; returns how each claimed run ended.
/// Whatever way it returns (an error included), nothing it started is left
/// running and no run it claimed is left RUNNING: [`Started`] stops and
/// records them.
pub(super) fn run_workload(
    store: &mut Store,
    opts: &mut RunOptions,
    workload: &Workload<'_>,
    todo: &[(&PlanRow, RunId)],
) -> Result<HashMap<RunId, RunStatus>, RunError> {
    let rec = Recorder::with_log_cap(&opts.store, opts.log_cap)?;
    let tracking = Tracking::start(&opts.store)?;
    let label = format!("{}/{}", workload.experiment, workload.name);
    let mut started = Started::new(opts.store.clone(), opts.gpus.clone(), opts.grace);
    let result = Driver {
        started: &mut started,
        store,
        opts: &mut *opts,
        w: workload,
        label: &label,
        rec: &rec,
        tracking: &tracking,
        ended: HashMap::new(),
    }
    .drive(todo);
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

/// A row placed on its devices, waiting to start: the row, its run and
/// its `CUDA_VISIBLE_DEVICES`.
type Placed<'r> = (&'r PlanRow, RunId, String);

/// The steps of [`run_workload`]: what they start goes into `started`, how
/// each run ended into `ended`.
struct Driver<'a, 'w> {
    started: &'a mut Started,
    store: &'a mut Store,
    opts: &'a mut RunOptions,
    w: &'a Workload<'w>,
    label: &'a str,
    rec: &'a Recorder,
    tracking: &'a Tracking,
    ended: HashMap<RunId, RunStatus>,
}

impl Driver<'_, '_> {
    fn drive(&mut self, todo: &[(&PlanRow, RunId)]) -> Result<HashMap<RunId, RunStatus>, RunError> {
        let mps_error = self.start_mps(todo);
        let mut placed = self.place(todo, mps_error.as_deref())?;
        let producer_name = self.start_producer(&mut placed)?;
        let watches = self.start_jobs(&placed, producer_name.as_deref())?;
        let sampler = listen::watch(
            &watches,
            &WatchOptions {
                interval: self.opts.interval,
                gpus: self.opts.gpus.clone(),
            },
            &self.rec.handle(),
        );
        let stopping = self.wait_for_jobs()?;
        sampler.stop();
        self.stop_producer(stopping)?;
        Ok(std::mem::take(&mut self.ended))
    }

    /// Starts MPS when a row asks for it and it is not running; why it is
    /// unavailable, if it is.
    fn start_mps(&mut self, todo: &[(&PlanRow, RunId)]) -> Option<String> {
        if !todo.iter().any(|(r, _)| r.collocation == Collocation::Mps) {
            return None;
        }
        match self.opts.gpus.mps_running() {
            Ok(true) => None,
            Ok(false) => match self.opts.gpus.mps_start() {
                Ok(()) => {
                    self.started.mps_started = true;
                    None
                }
                Err(e) => Some(e.to_string()),
            },
            Err(e) => Some(e.to_string()),
        }
    }

    /// Places every row before anything starts; a row that cannot be
    /// placed fails.
    fn place<'r>(
        &mut self,
        todo: &[(&'r PlanRow, RunId)],
        mps_error: Option<&str>,
    ) -> Result<Vec<Placed<'r>>, RunError> {
        let mut used_mig = HashSet::new();
        let mut placed = Vec::new();
        for (row, id) in todo {
            let place = match (&row.collocation, mps_error) {
                (Collocation::Mps, Some(e)) => Err(placement::PlaceError::Mps(e.to_string())),
                _ => placement::place(row, self.opts.gpus.as_ref(), &mut used_mig),
            };
            match place {
                Ok(visible) => placed.push((*row, *id, visible)),
                Err(e) => self.fail(row, *id, &e.to_string())?,
            }
        }
        Ok(placed)
    }

    /// Starts the workload's shared producer, if it has one and a row was
    /// placed; its name. When it does not start, every placed row fails.
    fn start_producer(&mut self, placed: &mut Vec<Placed<'_>>) -> Result<Option<String>, RunError> {
        let Some(data) = self.w.data else {
            return Ok(None);
        };
        if placed.is_empty() {
            return Ok(None);
        }
        let started = data::start(
            self.store,
            self.w.plan,
            self.opts,
            self.w.id,
            data,
            &self.rec.handle(),
            self.w.env,
            placed.len(),
        );
        match started {
            Ok(p) => {
                self.started.producer = Some(p.job);
                Ok(Some(p.name))
            }
            Err(msg) => {
                for (row, id, _) in placed.drain(..) {
                    self.fail(
                        row,
                        id,
                        &format!("the workload's Data did not start: {msg}"),
                    )?;
                }
                Ok(None)
            }
        }
    }

    /// Starts the placed rows' jobs; what the listeners watch: each job
    /// with its own row's devices and listeners, and the producer.
    fn start_jobs(
        &mut self,
        placed: &[Placed<'_>],
        producer_name: Option<&str>,
    ) -> Result<Vec<JobWatch>, RunError> {
        let mut watches: Vec<JobWatch> = Vec::new();
        for (row, id, visible) in placed {
            let argv = command_line(self.w.plan, row, &self.opts.python);
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .current_dir(&self.w.plan.dir)
                .env("CUDA_VISIBLE_DEVICES", visible)
                .env("BATCHCAST_RUN_ID", id.to_string());
            self.tracking.env(&mut cmd, *id, self.w.experiment)?;
            if let Some(name) = producer_name {
                cmd.env("BATCHCAST_NAME", name);
            }
            let figures = figures_slot(&mut cmd, *id, &self.rec.handle());
            let events = figures.as_ref().map(|f| ServeEvents::new(f, CONSUMER));
            if let Some(e) = &events {
                cmd.env(EVENTS_ENV, e.path());
            }
            match Job::start(*id, &row.name, cmd, &self.rec.handle()) {
                Ok(mut job) => {
                    job.figures = figures;
                    job.serve_events = events;
                    let pid = job.pid();
                    let job_start = job.start;
                    self.started.jobs.push(job);
                    self.store.set_pid(*id, i64::from(pid), job_start)?;
                    watches.push(JobWatch {
                        run: *id,
                        pid,
                        devices: row.devices.clone(),
                        listeners: row.listeners.clone(),
                    });
                }
                Err(e) => self.fail(row, *id, &format!("cannot start {}: {e}", argv[0]))?,
            }
        }
        if let Some(p) = &self.started.producer {
            watches.push(JobWatch {
                run: p.run,
                pid: p.pid(),
                devices: vec![],
                listeners: vec![],
            });
        }
        Ok(watches)
    }

    /// Waits for the jobs, or for a stop; records each run as it ends and
    /// reports progress. Whether the runner was stopped.
    fn wait_for_jobs(&mut self) -> Result<bool, RunError> {
        let begun = Instant::now();
        let mut last_report = Instant::now() - Duration::from_secs(60);
        let mut stopping = false;
        loop {
            if let Some(p) = self.started.producer.as_mut() {
                p.record_serve_events();
            }
            for j in self.started.jobs.iter_mut() {
                j.record_serve_events();
            }
            let alive = self
                .started
                .jobs
                .iter_mut()
                .map(|j| !j.poll())
                .filter(|a| *a)
                .count();
            for j in self
                .started
                .jobs
                .iter_mut()
                .filter(|j| !j.recorded && j.exited())
            {
                let status = record(self.store, j, self.label, &mut *self.opts.progress)?;
                self.ended.insert(j.run, status);
            }
            if alive == 0 {
                return Ok(stopping);
            }
            if self.opts.stop.load(Ordering::SeqCst) && !stopping {
                stopping = true;
                (self.opts.progress)(&format!("{}: stopping {alive} job(s)", self.label));
                stop_all(
                    self.started.jobs.iter_mut(),
                    self.opts.grace,
                    STOPPED_BY_SIGNAL,
                );
                continue;
            }
            if last_report.elapsed() >= self.opts.report_every {
                last_report = Instant::now();
                self.report(alive, begun);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Reports which jobs are alive, the elapsed time and each live job's
    /// last line.
    fn report(&mut self, alive: usize, begun: Instant) {
        let lines: Vec<String> = self
            .started
            .jobs
            .iter()
            .filter(|j| !j.exited())
            .map(|j| format!("  {}: {}", j.name, j.last_line()))
            .collect();
        (self.opts.progress)(&format!(
            "{}: {alive}/{} job(s) alive, {:.0} s\n{}",
            self.label,
            self.started.jobs.len(),
            begun.elapsed().as_secs_f64(),
            lines.join("\n")
        ));
    }

    /// Stops the shared producer after the jobs, which is how it is meant
    /// to end, and records its run: KILLED only when the whole runner was
    /// stopped (`stopping`).
    fn stop_producer(&mut self, stopping: bool) -> Result<(), RunError> {
        let Some(p) = self.started.producer.as_mut() else {
            return Ok(());
        };
        let after = "the shared producer, stopped after the workload's jobs";
        p.stop(self.opts.grace, after);
        p.join_output();
        let (status, code, msg) = match end_of(p) {
            (RunStatus::Killed, _, _) if stopping => {
                (RunStatus::Killed, None, Some(STOPPED_BY_SIGNAL.to_string()))
            }
            (RunStatus::Killed, _, _) => (RunStatus::Finished, None, Some(after.to_string())),
            other => other,
        };
        self.store.finish_run(p.run, status, code, msg.as_deref())?;
        p.recorded = true;
        Ok(())
    }

    /// Records `row`'s run FAILED before its job started, saying why.
    fn fail(&mut self, row: &PlanRow, id: RunId, msg: &str) -> Result<(), RunError> {
        self.store
            .finish_run(id, RunStatus::Failed, None, Some(msg))?;
        (self.opts.progress)(&format!("{}/{}: FAILED: {msg}", self.label, row.name));
        self.ended.insert(id, RunStatus::Failed);
        Ok(())
    }
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
