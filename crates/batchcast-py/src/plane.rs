//! A consumer's device plane: its mapping of the producer's mirror of the
//! arena on the consumer's GPU, when the producer serves that GPU, and the
//! reason it reads the host arena instead when not.
//!
//! `attach` decides once per connection (and again when a restarted
//! producer hands new mirrors). A fallback is never an error: the Python
//! consumer gets the reason, warns once and copies batches itself.

use std::sync::{Arc, Mutex};

use batchcast::Consumer;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dlpack::{Deferred, DeviceMap, Released};

/// Which path a consumer's batches take to its device.
pub(crate) enum Path {
    /// The mirror is mapped: batches are read on the device.
    Device(Slots),
    /// The host arena, copied by the consumer: why.
    Host(String),
}

/// What a mapped mirror is, as `stats()["device_slots"]` shows it.
pub(crate) struct Slots {
    pub uuid: String,
    pub ordinal: i32,
    pub addr: u64,
    pub len: u64,
    pub read_only_enforced: Option<bool>,
    pub backend: String,
}

/// A consumer's device plane.
#[derive(Default)]
pub(crate) struct Plane {
    /// The mapping batches are placed in; None on the host path.
    map: Mutex<Option<DeviceMap>>,
    /// The holds of freed device tensors (shared with every placement).
    deferred: Arc<Deferred>,
}

impl Plane {
    /// The mapping to place a batch's arrays in, if any.
    pub(crate) fn map(&self) -> Option<DeviceMap> {
        crate::dlpack::lock(&self.map).clone()
    }

    /// The leases of device tensors freed since the last call, or None.
    pub(crate) fn take_released(&self) -> Option<Released> {
        Released::of(self.deferred.take())
    }

    /// At close: holds pushed from now on are dropped at once, and those
    /// not taken are dropped now (nothing fences them any more).
    pub(crate) fn close(&self) {
        drop(self.deferred.close());
        crate::dlpack::lock(&self.map).take();
    }

    /// Decides the path of a consumer of `consumer` on `device`
    /// (`"cuda:N"`, an index or a GPU UUID).
    pub(crate) fn attach(&self, consumer: &Consumer, device: &str) -> Path {
        let _ = (consumer, device);
        crate::dlpack::lock(&self.map).take();
        Path::Host(
            "the producer serves no GPU (its welcome names no device mirror); start it with \
             device=\"cuda:N\" (`batchcast serve --device cuda:N`) to share one copy per GPU"
                .into(),
        )
    }
}

impl Path {
    /// `{"path": "device" | "host", "reason": str | None, "slots": dict |
    /// None}`.
    pub(crate) fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        match self {
            Path::Host(reason) => {
                d.set_item("path", "host")?;
                d.set_item("reason", reason)?;
                d.set_item("slots", py.None())?;
            }
            Path::Device(s) => {
                d.set_item("path", "device")?;
                d.set_item("reason", py.None())?;
                let slots = PyDict::new(py);
                slots.set_item("uuid", &s.uuid)?;
                slots.set_item("ordinal", s.ordinal)?;
                slots.set_item("addr", s.addr)?;
                slots.set_item("len", s.len)?;
                slots.set_item("read_only_enforced", s.read_only_enforced)?;
                slots.set_item("backend", &s.backend)?;
                d.set_item("slots", slots)?;
            }
        }
        Ok(d)
    }
}
