//! `batchcast._native.Consumer`: the core consumer, driven by the
//! pure-Python `batchcast.Consumer`.
//!
//! `next_event` waits for the next event with the GIL released (Ctrl-C
//! checked every 100 ms) and returns it as a tuple (see [`crate::event`]):
//! a batch's arrays come back as `ArrayView`s that `batchcast._consumer`
//! turns into tensors through DLPack, its per-sample lists as Python lists.
//! On a GPU the producer mirrors its arena to, the arrays are placed in
//! this consumer's mapping of that mirror (see [`crate::plane`]).
//!
//! A producer's death is reported by the core consumer (its socket
//! closing, or its process exiting where forked DataLoader workers keep
//! the socket open) as [`batchcast::Error::ProducerGone`].

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use batchcast::Welcome;
use batchcast::{Consumer, ConsumerOptions, Error, Event, JoinPolicy, OnEvict, Position};
use pyo3::exceptions::PyRuntimeWarning;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::PyTypeInfo;

use crate::dlpack::{LeaseTracker, Released};
use crate::errors::{to_py, Exc};
use crate::event::event_to_py;
use crate::plane::Plane;
use crate::warnings::Queued;
use crate::{blocking, seconds, Guarded};

/// Waits of 100 ms before checking whether kept batches hold the window.
const WARN_AFTER_TICKS: u32 = 10;

/// How long `wait_event` sleeps between looks when nothing wakes it.
const WAIT_TICK: std::time::Duration = std::time::Duration::from_millis(100);

/// Warns that this process's kept batches hold every slot of the window.
fn warn_window_full(py: Python<'_>, name: &str, slots: usize) -> PyResult<()> {
    let msg = format!(
        "batchcast.Consumer({name:?}) waits for the producer, but batches this process keeps \
         alive hold all {slots} slots of the producer's window, so the producer cannot publish \
         more: drop them (del), keep copies (.clone(), .copy()) instead, or start the producer \
         with a larger window"
    );
    let msg = CString::new(msg).unwrap_or_default();
    PyErr::warn(py, &PyRuntimeWarning::type_object(py), &msg, 1)
}

/// A consumer attached to one producer (private API: use
/// `batchcast.Consumer`).
#[pyclass(module = "batchcast._native", name = "Consumer", frozen)]
pub struct PyConsumer {
    inner: Guarded<Consumer>,
    name: String,
    welcome: Welcome,
    /// Samples and batches of a full epoch as last announced (a dataset
    /// that grew announces its next size), [`UNKNOWN`] when not known;
    /// updated after each event taken.
    samples_per_epoch: AtomicU64,
    batches_per_epoch: AtomicU64,
    watching: bool,
    /// Slots that this consumer's arrays keep leased.
    tracker: Arc<LeaseTracker>,
    /// Warned once that kept batches hold the whole window.
    warned_full: AtomicBool,
    /// The core's warnings, logged after each call.
    warnings: Queued,
    /// The device plane: the mirror batches are placed in, if any.
    plane: Plane,
}

impl Drop for PyConsumer {
    fn drop(&mut self) {
        // In a forked child the connection and the leases are the parent's:
        // dropping them here would send releases for batches the parent
        // still reads (`take_for_drop` leaks them there).
        self.plane.close();
        if let Some(attached) = self.inner.take_for_drop() {
            retire(attached, Arc::clone(&self.tracker));
        }
    }
}

/// Disconnects. While arrays of this consumer are still alive (a batch kept
/// after the loop, such as its last loop variable), their leases keep the
/// connection open; the producer is told the consumer left (it sends
/// nothing more, and stops counting it as attached), and the connection
/// closes when the last kept array is freed. Should the producer not take
/// that message, a thread reads on instead, dropping what arrives, until
/// the last kept array is freed or the producer stops.
fn retire(mut consumer: Consumer, tracker: Arc<LeaseTracker>) {
    if tracker.slots_held() == 0 || consumer.leave().is_ok() {
        drop(consumer);
        return;
    }
    let drain = move || {
        while tracker.slots_held() > 0 {
            match consumer.next_event(&mut || tracker.slots_held() == 0) {
                // A batch that could not be built: the stream goes on.
                Ok(Event::Finished(_)) => break,
                Ok(_) | Err(Error::InvalidBatch(_)) => {}
                Err(_) => break,
            }
        }
    };
    // If no thread can be started, the closure (and the consumer) is dropped.
    let _ = std::thread::Builder::new()
        .name("batchcast-drain".into())
        .spawn(drain);
}

#[pymethods]
impl PyConsumer {
    /// Connects to the producer `name` (waiting up to `connect_timeout`
    /// seconds for it to appear) and waits for its welcome. `start`: the
    /// `(epoch, row)` a saved state stood at (see `ConsumerOptions::start`).
    /// `deferred`: join the stream only at `start_at` or the first read
    /// (see `ConsumerOptions::deferred`).
    #[new]
    #[pyo3(signature = (name, *, batch_size=None, drop_last=false, join="catch-up",
                        connect_timeout=None, label=String::new(), dir=None, copy_on_write=true,
                        on_evict="error", reconnect_timeout=300.0, start=None, deferred=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: String,
        batch_size: Option<u64>,
        drop_last: bool,
        join: &str,
        connect_timeout: Option<f64>,
        label: String,
        dir: Option<PathBuf>,
        copy_on_write: bool,
        on_evict: &str,
        reconnect_timeout: f64,
        start: Option<(u64, u64)>,
        deferred: bool,
    ) -> PyResult<Self> {
        let join = JoinPolicy::parse(join).map_err(|e| to_py(py, e, None))?;
        let on_evict = OnEvict::parse(on_evict).map_err(|e| to_py(py, e, None))?;
        let warnings = Queued::default();
        let opts = ConsumerOptions {
            batch_size,
            drop_last,
            join,
            connect_timeout: seconds(py, connect_timeout, "connect_timeout")?,
            label,
            dir,
            copy_on_write,
            on_evict,
            warn: warnings.sink(),
            reconnect_timeout: seconds(py, Some(reconnect_timeout), "reconnect_timeout")?
                .unwrap_or_default(),
            start: start.map(|(epoch, row)| Position { epoch, row }),
            deferred,
        };
        let consumer = blocking(py, |interrupt| Consumer::connect(&name, opts, interrupt))?;
        let welcome = consumer.welcome().clone();
        Ok(PyConsumer {
            samples_per_epoch: AtomicU64::new(known(welcome.samples_per_epoch)),
            batches_per_epoch: AtomicU64::new(known(consumer.batches_per_epoch())),
            watching: consumer.watches_producer(),
            tracker: Arc::new(LeaseTracker::default()),
            warned_full: AtomicBool::new(false),
            warnings,
            plane: Plane::default(),
            inner: Guarded::new(consumer, format!("batchcast.Consumer of {name:?}")),
            name,
            welcome,
        })
    }

    /// Starts a consumer connected `deferred` at `start`, the `(epoch,
    /// row)` a saved state stood at, or per its join policy with None;
    /// before its first read (see `Consumer::start_at`).
    #[pyo3(signature = (start=None))]
    fn start_at(&self, py: Python<'_>, start: Option<(u64, u64)>) -> PyResult<()> {
        let start = start.map(|(epoch, row)| Position { epoch, row });
        self.inner.call(py, |a, _| a.start_at(start))
    }

    /// How the stream identity `saved` differs from the one the producer
    /// announced (`key: then A, now B`, joined by "; "; empty when none).
    fn identity_differences(&self, saved: &str) -> String {
        batchcast::identity_differences(saved, self.welcome.identity.as_deref().unwrap_or(""))
    }

    /// The producer's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// What the producer said at join: a dict with `producer_pid`,
    /// `slot_size`, `slots`, `samples_per_epoch`, `batch_size`, `consumer_id`,
    /// and `watching_pid` (whether the producer process is watched directly).
    fn welcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let w = &self.welcome;
        let d = PyDict::new(py);
        d.set_item("producer_pid", w.producer_pid)?;
        d.set_item("slot_size", w.slot_size)?;
        d.set_item("slots", w.slots)?;
        d.set_item(
            "samples_per_epoch",
            unknown_is_none(self.samples_per_epoch.load(Ordering::Relaxed)),
        )?;
        d.set_item("batch_size", w.batch_size)?;
        d.set_item("consumer_id", w.consumer_id)?;
        d.set_item("watching_pid", self.watching)?;
        d.set_item("stream", crate::stream::stream_to_py(py, &w.stream)?)?;
        d.set_item("first_epoch_partial", w.first_epoch_partial)?;
        d.set_item("first_epoch_samples", w.first_epoch_samples)?;
        d.set_item("identity", w.identity.as_deref())?;
        Ok(d)
    }

    /// Batches of a full epoch, from what the producer announced last
    /// (at join, at a full epoch's start, or at an epoch boundary).
    fn batches_per_epoch(&self) -> Option<u64> {
        unknown_is_none(self.batches_per_epoch.load(Ordering::Relaxed))
    }

    /// The next event, waiting for it:
    /// `("start", epoch, samples, batches, batch_size, partial, first_row)`
    /// (`first_row`: the epoch's row this consumer's first row is),
    /// `("batch", epoch, index, tree_spec, leaves, rows)`,
    /// `("end", epoch, samples)`,
    /// `("trigger", id, seq, epoch, samples, first_arrival, last_arrival)`
    /// or `("finished", reason, message)`.
    fn next_event<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let event = self.wait_next(py, false)?;
        event.ok_or_else(|| Exc::ProtocolError.err(py, "a wait ended without an event", &[]))
    }

    /// As `next_event`, but None as soon as device tensors freed meanwhile
    /// (by another thread) wait to be taken (`take_released`): their
    /// slots may be the ones the producer needs, and only the caller can
    /// fence them. Looks every 100 ms.
    fn next_event_or_released<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.wait_next(py, true)
    }

    /// The next event if it has already arrived (as `next_event` would
    /// return it at once), else None; never waits. The events and their
    /// order are those of `next_event`.
    fn poll_event<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let event = self.inner.call(py, |a, _| {
            let event = a.try_next_event();
            self.note_sizes(a);
            self.plane.follow(a);
            event
        });
        self.warnings.log(py);
        let event = event?;
        event.map(|e| self.event_to_py(py, e)).transpose()
    }

    /// The next event, as `next_event`, but this consumer is held only
    /// while looking, not while asleep, so calls from other threads
    /// (`stats`, `close`) go on meanwhile: what a prefetch thread waits
    /// with, ahead of the loop. Its wait is not counted in `wait_seconds`
    /// (the loop was not waiting). `close` from another thread makes it
    /// give up within 100 ms; Ctrl-C stops it only on the main thread.
    fn wait_event<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let waiter = self.inner.call(py, |a, _| Ok(a.waiter()))?;
        loop {
            // Read the wake word before looking: a change after this makes
            // the sleep below return at once.
            let seen = waiter.wake_word();
            if let Some(event) = self.poll_event(py)? {
                return Ok(event);
            }
            let woken = py.detach(|| waiter.sleep(seen, WAIT_TICK));
            if !woken {
                // A quiet tick: has the producer died without a word?
                let died = self.inner.call(py, |a, _| Ok(a.producer_exited()))?;
                if died {
                    // next_event reports it, after what was sent before.
                    return self.next_event(py);
                }
            }
            py.check_signals()?;
        }
    }

    /// This consumer's figures: `batches` handed out, `wait_seconds` spent
    /// waiting for data, `lag` (batches received and not yet handed out),
    /// `behind` (batches of this epoch published and not yet read),
    /// `device_slots` (the mapped mirror on the device plane, else None).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.call(py, |a, _| Ok(a.stats()))?;
        let d = PyDict::new(py);
        d.set_item("batches", s.batches)?;
        d.set_item("wait_seconds", s.wait_secs)?;
        d.set_item("lag", s.lag)?;
        d.set_item("behind", s.behind)?;
        d.set_item("device_slots", self.plane.slots_to_py(py)?)?;
        Ok(d)
    }

    /// Decides how batches reach `device` (`"cuda:N"`, an index or a GPU
    /// UUID): through the producer's mirror of the arena on that GPU when
    /// it serves it and it can be mapped here (`access`: `"read-only"`),
    /// else the host arena. Returns `{"path": "device" | "host", "reason":
    /// why the host path (None on the device), "slots": the mapping
    /// (`uuid`, `ordinal`, `addr`, `len`, `read_only_enforced`, `backend`)
    /// or None}`; a fallback never raises.
    #[pyo3(signature = (device, access="read-only"))]
    fn attach_device<'py>(
        &self,
        py: Python<'py>,
        device: &str,
        access: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        if access != "read-only" {
            return Err(Exc::InvalidArgument.err(
                py,
                format!("access must be \"read-only\", not {access:?}"),
                &[],
            ));
        }
        let path = self
            .inner
            .call(py, |a, _| Ok(self.plane.attach(a, device)))?
            .map_err(|e| Exc::InvalidArgument.err(py, e.to_string(), &[]))?;
        path.to_py(py)
    }

    /// The leases of device tensors freed since the last call (their
    /// release waits for the caller, who drops the returned object once a
    /// fence recorded after this call has completed); None when none.
    fn take_released(&self) -> Option<Released> {
        self.plane.take_released()
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Disconnects (a `next_event` blocked in another thread gives up within
    /// 100 ms). Arrays still alive stay valid; see [`retire`].
    fn close(&self, py: Python<'_>) {
        self.plane.close();
        if let Some(attached) = self.inner.take(py) {
            let tracker = Arc::clone(&self.tracker);
            py.detach(move || retire(attached, tracker));
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<batchcast._native.Consumer of {:?}{}>",
            self.name,
            self.inner.closed_mark()
        )
    }
}

/// An unknown size in [`PyConsumer`]'s counters.
const UNKNOWN: u64 = u64::MAX;

fn known(n: Option<u64>) -> u64 {
    n.unwrap_or(UNKNOWN)
}

fn unknown_is_none(n: u64) -> Option<u64> {
    (n != UNKNOWN).then_some(n)
}

impl PyConsumer {
    /// The next event, waiting for it; with `until_released`, None once
    /// freed device tensors wait to be taken.
    fn wait_next<'py>(
        &self,
        py: Python<'py>,
        until_released: bool,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let name = &self.name;
        // Kept batches stall the producer once they hold the window (lag
        // slots serve only when another consumer is ahead of this one).
        let slots = self.welcome.window as usize;
        let (tracker, warned) = (&self.tracker, &self.warned_full);
        let mut warning: Option<PyErr> = None;
        let warning_slot = &mut warning;
        let mut released = false;
        let released_slot = &mut released;
        let plane = &self.plane;
        let event = self.inner.call(py, |a, signals| {
            let mut ticks = 0u32;
            let mut hook = || {
                if until_released && plane.has_released() {
                    *released_slot = true;
                    return true;
                }
                ticks += 1;
                if ticks == WARN_AFTER_TICKS
                    && tracker.slots_held() >= slots
                    && !warned.swap(true, Ordering::Relaxed)
                {
                    if let Some(Err(e)) = Python::try_attach(|py| warn_window_full(py, name, slots))
                    {
                        *warning_slot = Some(e);
                        return true;
                    }
                }
                signals()
            };
            let event = match a.next_event(&mut hook) {
                Err(Error::Interrupted) if *released_slot => Ok(None),
                event => event.map(Some),
            };
            self.note_sizes(a);
            self.plane.follow(a);
            event
        });
        self.warnings.log(py);
        let event = match (event, warning) {
            (Err(_), Some(w)) => return Err(w),
            (event, _) => event?,
        };
        event.map(|e| self.event_to_py(py, e)).transpose()
    }

    /// Keeps the epoch size the consumer knows now (after an event).
    fn note_sizes(&self, c: &Consumer) {
        let samples = known(c.welcome().samples_per_epoch);
        self.samples_per_epoch.store(samples, Ordering::Relaxed);
        let batches = known(c.batches_per_epoch());
        self.batches_per_epoch.store(batches, Ordering::Relaxed);
    }

    /// A core event as the tuple `next_event` returns.
    fn event_to_py<'py>(&self, py: Python<'py>, event: Event) -> PyResult<Bound<'py, PyTuple>> {
        event_to_py(py, event, &self.tracker, self.plane.map().as_ref())
    }
}
