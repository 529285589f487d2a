//! `batchcast._native`: the Python bindings of the batchcast core.
//!
//! The public Python API lives in the pure-Python package `batchcast`
//! (`python/batchcast`); this module is its engine:
//! - `producer::PyProducer` (`_native.Producer`) publishes flattened
//!   batches, copying them into the arena with the GIL released;
//! - `consumer::PyConsumer` (`_native.Consumer`) returns events (made by
//!   `event`), its batches' arrays as `dlpack::ArrayView`s (`__dlpack__`
//!   over the read-only arena, or, on the device plane, over the
//!   consumer's mapping of the producer's mirror on its GPU: `plane`, whose
//!   freed device tensors' leases wait in a deferred list for the Python
//!   consumer's fence);
//! - `augment::PyAugmenter` (`_native.Augmenter`) augments a decoded
//!   batch into the consumer's own memory on native threads;
//! - `selection::PySelection` (`_native.Selection`) draws and orders each
//!   epoch's samples as `serve --select` does, for `batchcast.SelectSampler`;
//! - `stored::store_image` (`_native.store_image`) stores one decoded
//!   image as `batchcast serve --decode-only` does, for a decoded stream
//!   built from a Python dataset;
//! - `errors` defines the exception classes and maps every core error.
//!
//! Every blocking core call goes through `run_detached`: arguments are
//! extracted first, the call runs with the GIL released, and its interrupt
//! hook re-attaches every 100 ms to run Python's signal handlers, so Ctrl-C
//! ends the wait and re-raises `KeyboardInterrupt`. The core objects live in
//! a `Guarded` (a mutex taken with the GIL released), so Python threads
//! never see "already borrowed", and `close()` from any thread makes a
//! blocked call give up.
//!
//! Forked children (PyTorch DataLoader workers) inherit these objects but
//! none of the threads behind them: every object remembers the pid that made
//! it, refuses to work elsewhere, and in a child leaks rather than drops its
//! core object (dropping would talk on the parent's connections).
#![deny(missing_docs)]

mod augment;
mod consumer;
mod dlpack;
mod errors;
mod event;
mod outpool;
mod plane;
mod proc;
mod producer;
mod selection;
mod serve;
mod stored;
mod stream;
mod warnings;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;

use pyo3::prelude::*;

/// What a call made with the GIL released ended with.
pub(crate) struct Outcome<T> {
    /// The core's result.
    pub result: batchcast::Result<T>,
    /// The exception a Python signal handler raised while waiting.
    pub pending: Option<PyErr>,
    /// True when the caller's `stop` condition ended the wait.
    pub stopped: bool,
}

/// Runs `f` with the GIL released. `f` gets an interrupt hook for the core's
/// blocking calls (called every 100 ms while they wait): it returns true,
/// making the call fail with `Error::Interrupted`, when `stop()` does, or
/// when a Python signal handler raised (Ctrl-C: the exception is kept in
/// [`Outcome::pending`] to be re-raised).
pub(crate) fn run_detached<T, S, F>(py: Python<'_>, mut stop: S, f: F) -> Outcome<T>
where
    T: Send,
    S: FnMut() -> bool + Send,
    F: FnOnce(&mut dyn FnMut() -> bool) -> batchcast::Result<T> + Send,
{
    let mut pending: Option<PyErr> = None;
    let mut stopped = false;
    let result = {
        let (pending, stopped) = (&mut pending, &mut stopped);
        py.detach(move || {
            let mut hook = || {
                if stop() {
                    *stopped = true;
                    return true;
                }
                match Python::try_attach(|py| py.check_signals()) {
                    Some(Ok(())) => false,
                    Some(Err(e)) => {
                        *pending = Some(e);
                        true
                    }
                    // The interpreter is shutting down: stop waiting.
                    None => true,
                }
            };
            f(&mut hook)
        })
    };
    Outcome {
        result,
        pending,
        stopped,
    }
}

/// [`run_detached`] with no stop condition, errors mapped to Python.
pub(crate) fn blocking<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce(&mut dyn FnMut() -> bool) -> batchcast::Result<T> + Send,
{
    let out = run_detached(py, || false, f);
    out.result.map_err(|e| errors::to_py(py, e, out.pending))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A core object behind a Python object that several Python threads may
/// call: a call locks it with the GIL released (so a call that blocks never
/// holds up the others' GIL), and `close` from any thread makes a blocked
/// call give up within 100 ms.
pub(crate) struct Guarded<T> {
    inner: Mutex<Option<T>>,
    closing: AtomicBool,
    /// The process that made it.
    pid: u32,
    /// "batchcast.Producer 'cifar'", for errors.
    what: String,
}

impl<T: Send> Guarded<T> {
    pub(crate) fn new(value: T, what: String) -> Self {
        Guarded {
            inner: Mutex::new(Some(value)),
            closing: AtomicBool::new(false),
            pid: std::process::id(),
            what,
        }
    }

    /// True in a process forked from the one that made the object.
    pub(crate) fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    fn check_process(&self) -> PyResult<()> {
        if self.forked() {
            return Err(PyRuntimeError::new_err(format!(
                "{} belongs to process {}; it cannot be used in a forked child (pid {}), such as \
                 a DataLoader worker: use it from the process that made it",
                self.what,
                self.pid,
                std::process::id()
            )));
        }
        Ok(())
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        errors::Exc::UsageError.err(py, format!("{} is closed", self.what), &[])
    }

    /// Runs `f` on the object with the GIL released; `f` gets the interrupt
    /// hook for the core's blocking calls.
    pub(crate) fn call<R, F>(&self, py: Python<'_>, f: F) -> PyResult<R>
    where
        R: Send,
        F: FnOnce(&mut T, &mut dyn FnMut() -> bool) -> batchcast::Result<R> + Send,
    {
        self.check_process()?;
        let closing = &self.closing;
        let inner = &self.inner;
        let out = run_detached(
            py,
            || closing.load(Ordering::Acquire),
            |hook| match lock(inner).as_mut() {
                Some(value) => f(value, hook),
                None => Err(batchcast::Error::Usage(String::new())),
            },
        );
        match out.result {
            Ok(v) => Ok(v),
            Err(batchcast::Error::Interrupted) if out.stopped => Err(self.closed_error(py)),
            Err(batchcast::Error::Usage(m)) if m.is_empty() => Err(self.closed_error(py)),
            Err(e) => Err(errors::to_py(py, e, out.pending)),
        }
    }

    /// Runs `f` on the object if no call holds it now; never waits.
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self.forked() {
            return None;
        }
        let mut guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        guard.as_mut().map(f)
    }

    /// Takes the object out (closing it for every later call), waiting for
    /// a call in progress to give up. None if already closed, or in a
    /// forked child (where the object is not ours to close).
    pub(crate) fn take(&self, py: Python<'_>) -> Option<T> {
        if self.forked() {
            return None;
        }
        self.closing.store(true, Ordering::Release);
        let inner = &self.inner;
        py.detach(|| lock(inner).take())
    }

    /// True once closing (never waits: a call in progress may hold the lock).
    pub(crate) fn is_closed(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// `" (closed)"` once closing, else `""`: the end of a `__repr__`.
    pub(crate) fn closed_mark(&self) -> &'static str {
        if self.is_closed() {
            " (closed)"
        } else {
            ""
        }
    }

    /// For `Drop`: takes the object out in the process that made it; in a
    /// forked child, leaks it instead (dropping it would act on the parent's
    /// connections; see the module docs) and returns None.
    pub(crate) fn take_for_drop(&mut self) -> Option<T> {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        let value = inner.take();
        if self.pid != std::process::id() {
            std::mem::forget(value);
            return None;
        }
        value
    }
}

/// Seconds from Python as a duration; `None` stays `None`.
pub(crate) fn seconds(py: Python<'_>, secs: Option<f64>, what: &str) -> PyResult<Option<Duration>> {
    match secs {
        None => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s).map(Some).map_err(|_| {
            errors::Exc::InvalidArgument.err(
                py,
                format!("{what} must be a non-negative number of seconds or None, not {s}"),
                &[],
            )
        }),
    }
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PROTOCOL_VERSION", batchcast::PROTOCOL_VERSION)?;
    m.add("LEAF_ARRAY", producer::KIND_ARRAY)?;
    m.add("LEAF_INTS", producer::KIND_INTS)?;
    m.add("LEAF_FLOATS", producer::KIND_FLOATS)?;
    m.add("LEAF_STRS", producer::KIND_STRS)?;
    m.add_class::<producer::PyProducer>()?;
    m.add_class::<consumer::PyConsumer>()?;
    m.add_class::<dlpack::ArrayView>()?;
    m.add_class::<dlpack::Released>()?;
    m.add_class::<augment::PyAugmenter>()?;
    m.add_class::<selection::PySelection>()?;
    m.add_function(wrap_pyfunction!(stored::store_image, m)?)?;
    proc::register(m)?;
    serve::register(m)?;
    errors::register(m)?;
    Ok(())
}
