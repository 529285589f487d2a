//! Device views: arrays of a batch that lie in a device's copy of the
//! arena (a GPU's mirror, or the stand-in's), and the deferred release of
//! their leases.
//!
//! A [`Placement`] says where a view's bytes are on the device: an address
//! inside a [`DeviceMap`] (the consumer's import of the mirror), which the
//! placement keeps mapped. A tensor made from a device view may have work
//! queued on it that has not run when the tensor is freed, so its DLPack
//! deleter does not release the lease: it pushes the hold to the consumer's
//! [`Deferred`] list (any thread, with or without the GIL, never blocking
//! beyond a short mutex). The Python consumer takes that list
//! (`_native.Consumer.take_released`, a [`Released`]) at each `next()`,
//! records a fence on its current stream, and drops the [`Released`] once
//! the fence has completed: only then do the leases go back.

use std::sync::{Arc, Mutex};

use batchcast::Keepalive;
use pyo3::prelude::*;

use super::export::Held;

/// A consumer's mapping of one device's mirror of the arena.
#[derive(Clone)]
pub(crate) struct DeviceMap {
    /// The device address of the arena's byte 0.
    pub addr: u64,
    /// Bytes mapped (the arena's length).
    pub len: u64,
    /// The DLPack device of the memory (`(kDLCUDA, ordinal)`, or the
    /// stand-in's `(kDLCPU, 0)`).
    pub dl_device: (i32, i32),
    /// Keeps the mapping mapped while a view or a deferred hold lives.
    pub keep: Keepalive,
    /// Where the holds of freed tensors wait for their fence.
    pub deferred: Arc<Deferred>,
}

impl DeviceMap {
    /// Where `nbytes` at `arena_offset` of the arena are on the device;
    /// None when they do not lie inside the mapping.
    pub(crate) fn place(&self, arena_offset: u64, nbytes: u64) -> Option<Placement> {
        let end = arena_offset.checked_add(nbytes)?;
        if end > self.len {
            return None;
        }
        Some(Placement {
            addr: self.addr.checked_add(arena_offset)?,
            map: self.clone(),
        })
    }
}

/// Where a device view's bytes are.
#[derive(Clone)]
pub(crate) struct Placement {
    /// Device address of the first byte.
    pub addr: u64,
    /// The mapping it lies in.
    pub map: DeviceMap,
}

/// A hold on a device view's memory: the lease and the mapping.
pub(crate) struct DeviceHold {
    _held: Held,
    _map: Keepalive,
}

impl DeviceHold {
    pub(super) fn new(held: Held, map: Keepalive) -> Self {
        DeviceHold {
            _held: held,
            _map: map,
        }
    }
}

/// The holds of freed device tensors, waiting for the consumer to fence
/// them. Once closed (the consumer closed), a hold pushed is dropped at
/// once: nothing would take it any more.
#[derive(Default)]
pub(crate) struct Deferred {
    inner: Mutex<DeferredList>,
}

#[derive(Default)]
struct DeferredList {
    holds: Vec<DeviceHold>,
    closed: bool,
}

impl Deferred {
    /// Keeps `hold` until taken (a DLPack deleter's call: never blocks
    /// beyond the mutex, drops nothing under it).
    pub(super) fn push(&self, hold: DeviceHold) {
        let mut list = super::export::lock(&self.inner);
        if list.closed {
            drop(list);
            drop(hold);
            return;
        }
        list.holds.push(hold);
    }

    /// Takes every hold pushed so far.
    pub(crate) fn take(&self) -> Vec<DeviceHold> {
        std::mem::take(&mut super::export::lock(&self.inner).holds)
    }

    /// True when no hold waits.
    pub(crate) fn is_empty(&self) -> bool {
        super::export::lock(&self.inner).holds.is_empty()
    }

    /// From now on holds pushed are dropped at once; returns those waiting.
    pub(crate) fn close(&self) -> Vec<DeviceHold> {
        let mut list = super::export::lock(&self.inner);
        list.closed = true;
        std::mem::take(&mut list.holds)
    }
}

/// The leases of device tensors freed since the last take: dropping this
/// object releases them (do so once a fence recorded after the take has
/// completed).
#[pyclass(module = "batchcast._native", name = "Released", frozen)]
pub struct Released {
    holds: Mutex<Vec<DeviceHold>>,
}

impl Released {
    /// None when `holds` is empty.
    pub(crate) fn of(holds: Vec<DeviceHold>) -> Option<Released> {
        (!holds.is_empty()).then(|| Released {
            holds: Mutex::new(holds),
        })
    }
}

#[pymethods]
impl Released {
    /// Tensors whose leases this object holds.
    fn __len__(&self) -> usize {
        super::export::lock(&self.holds).len()
    }

    /// Releases the leases now (what dropping the object does).
    fn release(&self, py: Python<'_>) {
        let holds = std::mem::take(&mut *super::export::lock(&self.holds));
        py.detach(move || drop(holds));
    }

    fn __repr__(&self) -> String {
        format!("<batchcast._native.Released of {} tensors>", self.__len__())
    }
}
