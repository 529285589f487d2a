//! A writer thread that batches metric points and output into commits.
//!
//! Listeners and output readers run on many threads; a commit per point
//! would cost a disk sync each. They hand their points to a [`Recorder`]
//! instead, which commits whatever arrived at least every [`FLUSH_EVERY`]
//! (and at once when a batch grows large), so a killed runner loses at most
//! that much.
//!
//! Bounded: output waits for room past [`QUEUE_BYTES`] queued (the job's
//! pipe fills and the job waits, as it would on a slow terminal), and each
//! run keeps at most its log cap of each stream ([`DEFAULT_LOG_CAP`]): the
//! first half and the last half of it, with a note in between of how much
//! was dropped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::{LogStream, MetricPoint, RunId, Store};

/// Longest time a recorded point waits before it is committed.
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Points in one commit, at most.
const BATCH: usize = 4096;
/// Messages queued before senders wait (backpressure on a slow disk).
const QUEUE: usize = 65_536;
/// Bytes of output queued (received, not yet committed) before senders of
/// output wait.
pub const QUEUE_BYTES: usize = 16 << 20;
/// Output pending in the writer that makes it commit at once.
const FLUSH_BYTES: usize = 4 << 20;
/// What each run keeps of each output stream unless told otherwise.
pub const DEFAULT_LOG_CAP: u64 = 64 << 20;
/// The smallest log cap (a smaller one is raised to it).
pub const MIN_LOG_CAP: u64 = 128 << 10;

/// Output bytes queued, and whether the writer has stopped (then nobody
/// waits for room).
#[derive(Default)]
struct Budget {
    state: Mutex<(usize, bool)>,
    room: Condvar,
}

impl Budget {
    /// Waits until `n` more bytes fit (a chunk larger than the whole budget
    /// goes alone); `false` when the writer has stopped.
    fn take(&self, n: usize) -> bool {
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
        while !st.1 && st.0 > 0 && st.0 + n > QUEUE_BYTES {
            st = match self.room.wait(st) {
                Ok(st) => st,
                Err(_) => return false,
            };
        }
        st.0 += n;
        !st.1
    }

    fn give(&self, n: usize) {
        if let Ok(mut st) = self.state.lock() {
            st.0 = st.0.saturating_sub(n);
        }
        self.room.notify_all();
    }

    fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.1 = true;
        }
        self.room.notify_all();
    }
}

enum Msg {
    Metric(MetricPoint),
    Log(RunId, LogStream, i64, Vec<u8>),
    Event(RunId, String, String),
}

/// Sends points to a [`Recorder`]. Cheap to clone; one per thread.
#[derive(Clone)]
pub struct RecorderHandle {
    tx: SyncSender<Msg>,
    budget: Arc<Budget>,
}

impl RecorderHandle {
    /// Queues one metric point. Returns `false` when the recorder has
    /// stopped (its error is returned by [`Recorder::finish`]).
    pub fn metric(&self, point: MetricPoint) -> bool {
        self.tx.send(Msg::Metric(point)).is_ok()
    }

    /// Queues output of a run, waiting while [`QUEUE_BYTES`] of output
    /// are queued already.
    pub fn log(&self, run: RunId, stream: LogStream, ts_ms: i64, bytes: Vec<u8>) -> bool {
        let n = bytes.len();
        if !self.budget.take(n) {
            return false;
        }
        let sent = self.tx.send(Msg::Log(run, stream, ts_ms, bytes)).is_ok();
        if !sent {
            self.budget.give(n);
        }
        sent
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
    /// Starts a writer thread on its own connection to the store at `path`,
    /// keeping [`DEFAULT_LOG_CAP`] of each run's each stream.
    pub fn start(path: impl Into<PathBuf>) -> Result<Recorder> {
        Recorder::with_log_cap(path, DEFAULT_LOG_CAP)
    }

    /// [`start`](Recorder::start), keeping `log_cap` bytes of each run's
    /// each stream (its first half and its last half); 0 keeps everything.
    pub fn with_log_cap(path: impl Into<PathBuf>, log_cap: u64) -> Result<Recorder> {
        // Room for a chunk in each half, at the least.
        let log_cap = match log_cap {
            0 => 0,
            c => c.max(MIN_LOG_CAP),
        };
        let store = Store::open(path.into())?;
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let budget = Arc::new(Budget::default());
        let writer_budget = budget.clone();
        let thread = std::thread::Builder::new()
            .name("batchcast-recorder".into())
            .spawn(move || {
                let r = write_loop(store, rx, &writer_budget, log_cap);
                writer_budget.close();
                r
            })
            .map_err(crate::error::StoreError::Thread)?;
        Ok(Recorder {
            handle: Some(RecorderHandle { tx, budget }),
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

/// What the writer knows of one run's stream: how much of its head is left
/// to fill, the chunks of its tail, and what was dropped between them.
#[derive(Default)]
struct Kept {
    head_left: u64,
    tail: VecDeque<(i64, usize)>,
    tail_bytes: u64,
    /// The chunk between head and tail that says what was dropped.
    note: Option<i64>,
    dropped: u64,
}

/// Output received and not yet committed.
type Pending = Vec<(RunId, LogStream, i64, Vec<u8>)>;

fn write_loop(mut store: Store, rx: Receiver<Msg>, budget: &Budget, log_cap: u64) -> Result<()> {
    let mut points: Vec<MetricPoint> = Vec::new();
    let mut told_nan: HashSet<(RunId, String)> = HashSet::new();
    let mut logs: Pending = Vec::new();
    let mut log_bytes = 0usize;
    let mut kept: HashMap<(RunId, LogStream), Kept> = HashMap::new();
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
                log_bytes += bytes.len();
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
        if done
            || Instant::now() >= deadline
            || points.len() >= BATCH
            || logs.len() >= BATCH
            || log_bytes >= FLUSH_BYTES
        {
            if let Err(e) = flush(&mut store, &mut points, &mut told_nan) {
                first_error.get_or_insert(e);
            }
            for (run, stream, ts, bytes) in logs.drain(..) {
                let k = kept.entry((run, stream)).or_insert_with(|| Kept {
                    head_left: log_cap / 2,
                    ..Kept::default()
                });
                if let Err(e) = keep(&mut store, k, log_cap, (run, stream, ts), &bytes) {
                    first_error.get_or_insert(e);
                }
                budget.give(bytes.len());
            }
            log_bytes = 0;
            deadline = Instant::now() + FLUSH_EVERY;
        }
        if done {
            return first_error.map_or(Ok(()), Err);
        }
    }
}

/// Stores `bytes` of one run's stream within its cap: into the head while
/// the head has room, else into the tail, dropping the tail's oldest
/// chunks past its half of the cap and saying so in the note between them.
fn keep(
    store: &mut Store,
    k: &mut Kept,
    log_cap: u64,
    (run, stream, ts): (RunId, LogStream, i64),
    bytes: &[u8],
) -> Result<()> {
    if log_cap == 0 {
        return store.append_log(run, stream, ts, bytes).map(|_| ());
    }
    let into_head = bytes
        .len()
        .min(usize::try_from(k.head_left).unwrap_or(usize::MAX));
    let (head, rest) = bytes.split_at(into_head);
    if !head.is_empty() {
        let stored = store.append_log(run, stream, ts, head)?;
        k.head_left -= head.len() as u64;
        if k.head_left == 0 {
            // The head is full: the next chunk is the note's place (empty
            // until something is dropped).
            let seq = stored.last().map_or(0, |c| c.0) + 1;
            store.cut_log(run, stream, &[], (seq, ts, ""))?;
            k.note = Some(seq);
        }
    }
    if rest.is_empty() {
        return Ok(());
    }
    for c in store.append_log(run, stream, ts, rest)? {
        k.tail_bytes += c.1 as u64;
        k.tail.push_back(c);
    }
    let tail_cap = log_cap - log_cap / 2;
    let mut gone = Vec::new();
    let first_drop = k.dropped == 0;
    while k.tail_bytes > tail_cap {
        let Some((seq, len)) = k.tail.pop_front() else {
            break;
        };
        k.tail_bytes -= len as u64;
        k.dropped += len as u64;
        gone.push(seq);
    }
    if gone.is_empty() {
        return Ok(());
    }
    let text = format!(
        "\n[batchcast: {} bytes of {} dropped here; a run keeps the first {} and the last {} \
         bytes of each stream (raise the cap with `batchcast run --log-cap MIB`, 0 for no cap)]\n",
        k.dropped,
        stream.as_str(),
        log_cap / 2,
        tail_cap
    );
    let seq = k.note.unwrap_or(0);
    store.cut_log(run, stream, &gone, (seq, ts, &text))?;
    if first_drop {
        let message = format!(
            "{} passed the log cap of {log_cap} bytes: its middle is dropped, its first and last \
             halves kept (`batchcast run --log-cap MIB` raises the cap)",
            stream.as_str()
        );
        store.add_event(run, "runner", &message)?;
    }
    Ok(())
}

fn flush(
    store: &mut Store,
    points: &mut Vec<MetricPoint>,
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
    result
}
