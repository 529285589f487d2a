//! The core's warnings (an eviction, lag memory refused) as records of
//! Python's `batchcast` logger, which users filter and capture like any
//! other (with no logging set up, Python prints warnings to stderr).
//!
//! The core emits a warning where it meets it, possibly under its own
//! locks, so the sink only queues it: taking the GIL there could deadlock
//! against a Python thread that holds the GIL and waits for that lock. The
//! thread that made the core call logs the queue once it holds the GIL
//! again.

use std::sync::{Arc, Mutex};

use batchcast::Warn;
use pyo3::prelude::*;

/// At most this many warnings wait between two calls; more are dropped
/// (each condition warns once anyway).
const MAX_QUEUED: usize = 64;

/// A queue of the core's warnings for one producer or consumer.
#[derive(Clone, Default)]
pub(crate) struct Queued(Arc<Mutex<Vec<String>>>);

impl Queued {
    /// The sink to give the core: queues.
    pub(crate) fn sink(&self) -> Warn {
        let queue = self.clone();
        Warn::to(move |message| queue.push(message))
    }

    /// Queues `message` (one this binding warns of itself).
    pub(crate) fn push(&self, message: &str) {
        if let Ok(mut q) = self.0.lock() {
            if q.len() < MAX_QUEUED {
                q.push(message.to_owned());
            }
        }
    }

    /// Logs what is queued to the `batchcast` logger. A logging error (a
    /// broken handler) is reported as unraisable, never raised: the core
    /// call it follows has already taken its event.
    pub(crate) fn log(&self, py: Python<'_>) {
        let queued = match self.0.lock() {
            Ok(mut q) if !q.is_empty() => std::mem::take(&mut *q),
            _ => return,
        };
        for message in queued {
            let logged = py
                .import("logging")
                .and_then(|l| l.call_method1("getLogger", ("batchcast",)))
                .and_then(|logger| logger.call_method1("warning", (message,)));
            if let Err(e) = logged {
                e.write_unraisable(py, None);
            }
        }
    }
}
