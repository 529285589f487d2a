//! A writer thread that batches metric points and output into commits.
//!
//! Listeners and output readers run on many threads; a commit per point
//! would cost a disk sync each. They hand their points to a [`Recorder`]
//! instead, which commits whatever arrived at least every [`FLUSH_EVERY`]
//! (and at once when a batch grows large), so a killed runner loses at most
//! that much.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{LogStream, MetricPoint, RunId, Store};
use crate::error::Result;

/// Longest time a recorded point waits before it is committed.
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Points in one commit, at most.
const BATCH: usize = 4096;
/// Messages queued before senders wait (backpressure on a slow disk).
const QUEUE: usize = 65_536;

enum Msg {
    Metric(MetricPoint),
    Log(RunId, LogStream, i64, Vec<u8>),
    Event(RunId, String, String),
}

/// Sends points to a [`Recorder`]. Cheap to clone; one per thread.
#[derive(Clone)]
pub struct RecorderHandle {
    tx: SyncSender<Msg>,
}

impl RecorderHandle {
    /// Queues one metric point. Returns `false` when the recorder has
    /// stopped (its error is returned by [`Recorder::finish`]).
    pub fn metric(&self, point: MetricPoint) -> bool {
        self.tx.send(Msg::Metric(point)).is_ok()
    }

    /// Queues output of a run.
    pub fn log(&self, run: RunId, stream: LogStream, ts_ms: i64, bytes: Vec<u8>) -> bool {
        self.tx.send(Msg::Log(run, stream, ts_ms, bytes)).is_ok()
    }
}

impl RecorderHandle {
    /// Queues an event of a run (committed at once, with its own time).
    pub fn event(&self, run: RunId, source: &str, message: &str) -> bool {
        self.tx
            .send(Msg::Event(run, source.to_string(), message.to_string()))
            .is_ok()
    }
}

/// The writer thread. Dropping every handle and calling
/// [`finish`](Recorder::finish) commits what is left.
pub struct Recorder {
    handle: Option<RecorderHandle>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Recorder {
    /// Starts a writer thread on its own connection to the store at `path`.
    pub fn start(path: impl Into<PathBuf>) -> Result<Recorder> {
        let store = Store::open(path.into())?;
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("batchcast-recorder".into())
            .spawn(move || write_loop(store, rx))
            .map_err(crate::error::StoreError::Thread)?;
        Ok(Recorder {
            handle: Some(RecorderHandle { tx }),
            thread: Some(thread),
        })
    }

    /// A handle to send points with.
    pub fn handle(&self) -> RecorderHandle {
        match &self.handle {
            Some(h) => h.clone(),
            // `handle` is only taken by `finish`, which consumes self.
            None => unreachable!("recorder handle taken before finish"),
        }
    }

    /// Waits until every point sent so far (by any handle still alive or
    /// not) is committed, and returns the first error of the writer.
    /// Handles still held elsewhere keep the thread alive: drop them first.
    pub fn finish(mut self) -> Result<()> {
        self.handle = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Ok(()),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.handle = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_loop(mut store: Store, rx: Receiver<Msg>) -> Result<()> {
    let mut points: Vec<MetricPoint> = Vec::new();
    let mut told_nan: HashSet<(RunId, String)> = HashSet::new();
    let mut logs: Vec<(RunId, LogStream, i64, Vec<u8>)> = Vec::new();
    let mut first_error = None;
    let mut deadline = Instant::now() + FLUSH_EVERY;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let done = match rx.recv_timeout(wait) {
            Ok(Msg::Metric(p)) => {
                points.push(p);
                false
            }
            Ok(Msg::Log(run, stream, ts, bytes)) => {
                logs.push((run, stream, ts, bytes));
                false
            }
            Ok(Msg::Event(run, source, message)) => {
                if let Err(e) = store.add_event(run, &source, &message) {
                    first_error.get_or_insert(e);
                }
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        if done || Instant::now() >= deadline || points.len() >= BATCH || logs.len() >= BATCH {
            if let Err(e) = flush(&mut store, &mut points, &mut logs, &mut told_nan) {
                first_error.get_or_insert(e);
            }
            deadline = Instant::now() + FLUSH_EVERY;
        }
        if done {
            return first_error.map_or(Ok(()), Err);
        }
    }
}

fn flush(
    store: &mut Store,
    points: &mut Vec<MetricPoint>,
    logs: &mut Vec<(RunId, LogStream, i64, Vec<u8>)>,
    told_nan: &mut HashSet<(RunId, String)>,
) -> Result<()> {
    let mut result = Ok(());
    if !points.is_empty() {
        let nans = match store.insert_metrics(points) {
            Ok(nans) => nans,
            // One point the store refuses (its run deleted, say) must not
            // cost the others of the batch, other runs' among them: store
            // them one by one, and report the first refused.
            Err(_) => {
                let mut nans = Vec::new();
                for p in points.iter() {
                    match store.insert_metrics(std::slice::from_ref(p)) {
                        Ok(n) => nans.extend(n),
                        Err(e) => {
                            if result.is_ok() {
                                result = Err(e);
                            }
                        }
                    }
                }
                nans
            }
        };
        for p in nans {
            if told_nan.insert((p.run_id, p.key.clone())) {
                let message = format!(
                    "metric {:?} was NaN at step {}; NaN values are not stored",
                    p.key, p.step
                );
                result = result.and(store.add_event(p.run_id, "metrics", &message));
            }
        }
        points.clear();
    }
    for (run, stream, ts, bytes) in logs.drain(..) {
        if let Err(e) = store.append_log(run, stream, ts, &bytes) {
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    result
}
