//! One process of a workload (a training job or the shared producer),
//! supervised by [`batchcast_proc::Process`]: its own process group, its
//! output captured into the store, stopped as a group, and what it left
//! in its group killed when it exits. A job dropped while still running is
//! killed with its group; a runner killed outright (SIGKILL, the OOM
//! killer) takes its jobs with it too (the supervisor's watcher).

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use batchcast_proc::{Options, Output, Process, OUTPUT_AFTER_EXIT};

use super::figures::FiguresSlot;
use super::serve_events::ServeEvents;
use crate::{keys, now_ms, LogStream, MetricPoint, RecorderHandle, RunId};

/// Longest last line kept for progress.
const LAST_LINE: usize = 200;

/// A started process and where its output goes.
pub(crate) struct Job {
    pub run: RunId,
    pub name: String,
    process: Process,
    /// Its start time (clock ticks since boot), recorded against pid reuse.
    pub start: Option<i64>,
    rec: RecorderHandle,
    /// The last line it wrote (stdout or stderr), for progress.
    last_line: Arc<Mutex<String>>,
    /// Why the runner stopped it, when it was still running then: its run
    /// ends KILLED. A job that had ended already keeps its own outcome.
    pub stopped: Option<String>,
    /// Its end is in the store.
    pub recorded: bool,
    /// Where it may write its figures (see [`super::figures`]).
    pub figures: Option<FiguresSlot>,
    /// Where a shared producer, or a trainer's consumer, appends its
    /// events (see [`super::serve_events`]).
    pub serve_events: Option<ServeEvents>,
    /// Its CPU at exit is in the store.
    usage_recorded: bool,
}

impl Job {
    /// Starts `command` in a process group of its own, its output going to
    /// the run's log through `rec`.
    pub(crate) fn start(
        run: RunId,
        name: &str,
        command: Command,
        rec: &RecorderHandle,
    ) -> std::io::Result<Job> {
        let last_line = Arc::new(Mutex::new(String::new()));
        let to_log = |stream: LogStream| {
            let (rec, last_line) = (rec.clone(), last_line.clone());
            let sink: batchcast_proc::Sink = Box::new(move |chunk: &[u8]| {
                let text = String::from_utf8_lossy(chunk);
                if let Some(line) = text.lines().rev().find(|l| !l.trim().is_empty()) {
                    if let Ok(mut l) = last_line.lock() {
                        *l = line.chars().take(LAST_LINE).collect();
                    }
                }
                rec.log(run, stream, now_ms(), chunk.to_vec());
            });
            Output::Capture(Some(sink))
        };
        let options = Options {
            stdout: to_log(LogStream::Stdout),
            stderr: to_log(LogStream::Stderr),
            watcher: true,
            kill_group_on_exit: true,
            // The store keeps the output; the supervisor's own tail is not read.
            tail_bytes: 0,
            ..Options::default()
        };
        let process = Process::start(command, options)?;
        Ok(Job {
            run,
            name: name.to_string(),
            start: process.start_time(),
            process,
            rec: rec.clone(),
            last_line,
            stopped: None,
            recorded: false,
            figures: None,
            serve_events: None,
            usage_recorded: false,
        })
    }

    pub(crate) fn pid(&self) -> i32 {
        self.process.pid()
    }

    /// Whether it has ended.
    pub(crate) fn poll(&mut self) -> bool {
        self.process.poll()
    }

    /// Whether it was seen to end at the last [`Job::poll`].
    pub(crate) fn exited(&self) -> bool {
        self.process.ended()
    }

    /// SIGTERM to its group, SIGKILL after `grace`; waits for it. `why`
    /// is recorded only if it was still running.
    pub(crate) fn stop(&mut self, grace: Duration, why: &str) {
        stop_all(std::iter::once(self), grace, why);
    }

    /// Waits for the output readers, once the job has ended: until its
    /// pipes close (its group ended), but no longer than
    /// [`OUTPUT_AFTER_EXIT`]. Output cut short so is noted in the run's
    /// events. Then records, once, the CPU it used
    /// ([`keys::PROC_EXIT_CPU_SECONDS`]) and the figures it wrote.
    pub(crate) fn join_output(&mut self) {
        for stream in self.process.finish_output(OUTPUT_AFTER_EXIT) {
            let note = format!(
                "{stream} after the job ended was not recorded: a process it left outside \
                 its group (setsid, a daemon) still held it"
            );
            self.rec.event(self.run, "runner", &note);
        }
        if !self.usage_recorded {
            self.usage_recorded = true;
            if let Some(usage) = self.process.usage() {
                self.rec.metric(MetricPoint {
                    run_id: self.run,
                    key: keys::PROC_EXIT_CPU_SECONDS.into(),
                    step: 0,
                    ts_ms: now_ms(),
                    value: usage.cpu_seconds,
                });
            }
        }
        self.record_serve_events();
        self.record_figures();
    }

    /// Records the events a shared producer appended since the last call,
    /// as events of its run.
    pub(crate) fn record_serve_events(&mut self) {
        if let Some(events) = self.serve_events.as_mut() {
            let source = events.source();
            for message in events.read_new() {
                self.rec.event(self.run, source, &message);
            }
        }
    }

    /// Records the figures the job wrote to its figures file, as metrics
    /// of its run; a bad file becomes an event naming the problem. The
    /// file's directory is removed.
    fn record_figures(&mut self) {
        let Some(slot) = self.figures.take() else {
            return;
        };
        match slot.read() {
            Ok(None) => {}
            Ok(Some(figures)) => {
                let ts_ms = now_ms();
                for (name, value) in figures {
                    self.rec.metric(MetricPoint {
                        run_id: self.run,
                        key: keys::figure(&name),
                        step: 0,
                        ts_ms,
                        value,
                    });
                }
            }
            Err(e) => {
                let note = format!("the job's figures were not recorded: {e}");
                self.rec.event(self.run, "runner", &note);
            }
        }
    }

    pub(crate) fn last_line(&self) -> String {
        self.last_line.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// `(exit code, signal)` once ended.
    pub(crate) fn outcome(&self) -> Option<(Option<i32>, Option<i32>)> {
        self.process.outcome()
    }
}

/// Stops every job of `jobs` still running: SIGTERM to each group at once,
/// SIGKILL to those still running after `grace`; waits for them all. `why`
/// is recorded in each job that was still running.
pub(crate) fn stop_all<'a>(
    jobs: impl IntoIterator<Item = &'a mut Job>,
    grace: Duration,
    why: &str,
) {
    let running = jobs.into_iter().filter_map(|j| {
        (!j.poll()).then(|| {
            j.stopped = Some(why.to_string());
            &mut j.process
        })
    });
    batchcast_proc::stop_all(running.collect::<Vec<_>>(), grace);
}
