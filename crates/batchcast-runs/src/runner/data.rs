//! A workload's shared producer (`Data`): started before its jobs,
//! watched and logged like a job (as the run named [`keys::DATA_RUN`]),
//! stopped after them.
//!
//! It is told how many trainers the workload has ([`CONSUMERS_ENV`]), and
//! `batchcast serve` and `batchcast.Producer` wait for that many before
//! the first batch, so the first trainer to attach cannot drain the epochs
//! before the last has started, whatever the producer's script says.
//!
//! It is told where to append its events ([`EVENTS_ENV`]); the runner
//! records them as events of its run as they come.

use std::process::Command;
use std::time::{Duration, Instant};

use super::job::Job;
use super::serve_events::{ServeEvents, EVENTS_ENV, SERVE};
use super::RunOptions;
use crate::keys;
use crate::plan::Plan;
use crate::{NewRun, RecorderHandle, Store, StoreError};

/// How long a producer may take to answer its first status query: long
/// enough for a Python producer that imports torch and indexes its dataset
/// on a loaded machine; one that exits is noticed at once.
const READY_WITHIN: Duration = Duration::from_secs(300);
/// [`READY_WITHIN`] as [`DataError::NotServing`] says it.
const NOT_READY: &str = "it did not answer within 300 s";

pub use batchcast::CONSUMERS_ENV;

/// Why the Data command is not serving; the workload's rows fail with it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DataError {
    /// The Data cell does not split into a command line.
    #[error("Data {0:?} is not a command line")]
    NotCommandLine(String),
    /// The store refused the Data run's row.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The producer's name makes no endpoint.
    #[error("producer {name:?}: {source}")]
    Endpoint {
        name: String,
        source: batchcast::Error,
    },
    /// The command could not be started.
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    /// The producer exited, or did not answer in time.
    #[error("producer {name:?} is not serving: {why}; its last output: {last:?}")]
    NotServing {
        name: String,
        why: &'static str,
        last: String,
    },
}

pub(crate) struct Producer {
    pub name: String,
    pub job: Job,
}

/// Starts the Data command, for `trainers` trainers, and waits until its
/// producer answers.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    store: &mut Store,
    plan: &Plan,
    opts: &RunOptions,
    workload: i64,
    data: &str,
    rec: &RecorderHandle,
    env: &serde_json::Value,
    trainers: usize,
) -> Result<Producer, DataError> {
    let (argv, name) = command_line(plan, opts, workload, data)?;
    let run = add_run(store, plan, workload, &argv, env)?;
    let endpoint = match batchcast::Endpoint::new(&name) {
        Ok(e) => e,
        Err(source) => {
            let name = name.clone();
            return Err(failed(store, run, DataError::Endpoint { name, source }));
        }
    };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(&plan.dir)
        .env("BATCHCAST_NAME", &name)
        .env(CONSUMERS_ENV, trainers.to_string());
    let figures = super::figures_slot(&mut cmd, run, rec);
    let events = figures.as_ref().map(|f| ServeEvents::new(f, SERVE));
    if let Some(e) = &events {
        cmd.env(EVENTS_ENV, e.path());
    }
    let mut job = match Job::start(run, keys::DATA_RUN, cmd, rec) {
        Ok(job) => job,
        Err(source) => {
            let program = argv[0].clone();
            return Err(failed(store, run, DataError::Start { program, source }));
        }
    };
    job.figures = figures;
    job.serve_events = events;
    let _ = store.set_pid(run, i64::from(job.pid()), job.start);
    match ready(&endpoint, &mut job, opts) {
        Ok(()) => Ok(Producer { name, job }),
        Err(why) => {
            let e = DataError::NotServing {
                name,
                why,
                last: job.last_line(),
            };
            job.recorded = true;
            Err(failed(store, run, e))
        }
    }
}

/// The Data cell `data` as a command line, and the producer's name: a
/// `batchcast` command runs this binary (named for the workload unless it
/// names itself), a `.py` script runs under the plan's Python.
fn command_line(
    plan: &Plan,
    opts: &RunOptions,
    workload: i64,
    data: &str,
) -> Result<(Vec<String>, String), DataError> {
    let name = format!("bc-run-{}-{workload}", std::process::id());
    let mut argv = shlex::split(data)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| DataError::NotCommandLine(data.to_string()))?;
    if argv[0] == "batchcast" {
        argv[0] = opts.exe.display().to_string();
        if !argv
            .iter()
            .any(|a| a == "--name" || a.starts_with("--name="))
        {
            argv.push("--name".into());
            argv.push(name.clone());
        }
    } else if argv[0].ends_with(".py") {
        let script = plan.resolve(&argv[0]).display().to_string();
        argv.splice(0..1, [opts.python.clone(), script]);
    }
    let name = argv
        .iter()
        .position(|a| a == "--name")
        .and_then(|i| argv.get(i + 1).cloned())
        .or_else(|| {
            argv.iter()
                .find_map(|a| a.strip_prefix("--name=").map(String::from))
        })
        .unwrap_or(name);
    Ok((argv, name))
}

/// The Data run's row in the store, claimed by this runner.
fn add_run(
    store: &mut Store,
    plan: &Plan,
    workload: i64,
    argv: &[String],
    env: &serde_json::Value,
) -> Result<crate::RunId, DataError> {
    let new = NewRun {
        name: keys::DATA_RUN.into(),
        command: argv.to_vec(),
        collocation: "-".into(),
        host: super::host_name(),
        plan_file: Some(plan.file.display().to_string()),
        ..NewRun::default()
    };
    let (run, _) = store.add_run(workload, &new)?;
    let me = i64::from(std::process::id());
    store.claim_run(run, me, super::process_start(me).unwrap_or(0), env)?;
    Ok(run)
}

/// Marks the Data run failed with `e`, and gives `e` back.
fn failed(store: &mut Store, run: crate::RunId, e: DataError) -> DataError {
    let _ = store.finish_run(run, crate::RunStatus::Failed, None, Some(&e.to_string()));
    e
}

/// Waits until the producer answers a status query; Err(why) once it has
/// exited or has not answered within [`READY_WITHIN`] (it is stopped then,
/// and its output read to the end).
fn ready(
    endpoint: &batchcast::Endpoint,
    job: &mut Job,
    opts: &RunOptions,
) -> Result<(), &'static str> {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if batchcast::query_status(endpoint, Duration::from_millis(500)).is_ok() {
            return Ok(());
        }
        if job.poll() || Instant::now() >= deadline {
            job.stop(opts.grace, NOT_READY);
            job.join_output();
            return Err(if job.stopped.is_none() {
                "it exited"
            } else {
                NOT_READY
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_not_ready_message_names_the_wait() {
        assert_eq!(
            NOT_READY,
            format!("it did not answer within {} s", READY_WITHIN.as_secs())
        );
    }
}
