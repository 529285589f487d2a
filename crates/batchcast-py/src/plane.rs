//! A consumer's device plane: its mapping of the producer's mirror of the
//! arena on the consumer's GPU, when the producer serves that GPU, and the
//! reason it reads the host arena instead when not.
//!
//! [`Plane::attach`] decides once per connection, and [`Plane::follow`]
//! maps again when a restarted producer hands new mirrors (a new mirror
//! generation). A fallback is never an error: the Python consumer gets the
//! reason, warns once and copies batches itself. The mapping lives in an
//! `Arc` that every device view holds, so views outlive a re-import.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use batchcast::{Consumer, MirrorSpec};
use batchcast_device::{resolve, Access, DeviceSpec, Error as DeviceError, Mapping};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dlpack::{lock, Deferred, DeviceMap, Released};

/// Why a consumer on a GPU reads the host arena when the producer mirrors
/// nothing.
const NO_MIRRORS: &str = "the producer serves no GPU (its welcome names no device mirror); \
     start it with device=\"cuda:N\" (`batchcast serve --device cuda:N`) to share one copy per GPU";

/// Which path a consumer's batches take to its device.
pub(crate) enum Path {
    /// The mirror is mapped: batches are read on the device.
    Device(Slots),
    /// The host arena, copied by the consumer: why.
    Host(String),
}

/// What a mapped mirror is, as `stats()["device_slots"]` shows it.
#[derive(Clone)]
pub(crate) struct Slots {
    uuid: String,
    ordinal: u32,
    addr: u64,
    len: u64,
    read_only_enforced: Option<bool>,
    backend: &'static str,
}

/// The mirrors of the producer's arena as the welcome describes them, each
/// with its fd.
type Mirrors = [(MirrorSpec, OwnedFd)];

/// The mirrors the core's consumer was handed, and their generation.
fn mirrors_of(consumer: &Consumer) -> (&Mirrors, u64) {
    (consumer.mirrors(), consumer.mirror_generation())
}

/// A consumer's device plane.
#[derive(Default)]
pub(crate) struct Plane {
    /// The mapping batches are placed in, and what it is; None on the
    /// host path.
    map: Mutex<Option<(DeviceMap, Slots)>>,
    /// The holds of freed device tensors (shared with every placement).
    deferred: Arc<Deferred>,
    /// The device asked for at attach, and the mirror generation mapped.
    asked: Mutex<Option<(String, u64)>>,
}

impl Plane {
    /// The mapping to place a batch's arrays in, if any.
    pub(crate) fn map(&self) -> Option<DeviceMap> {
        lock(&self.map).as_ref().map(|(map, _)| map.clone())
    }

    /// The mapped mirror now (it changes when a restarted producer hands
    /// new ones), as a dict; None on the host path.
    pub(crate) fn slots_to_py<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let slots = lock(&self.map).as_ref().map(|(_, slots)| slots.clone());
        slots.map(|s| s.to_py(py)).transpose()
    }

    /// The leases of device tensors freed since the last call, or None.
    pub(crate) fn take_released(&self) -> Option<Released> {
        Released::of(self.deferred.take())
    }

    /// True when freed device tensors wait to be taken.
    pub(crate) fn has_released(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// At close: holds pushed from now on are dropped at once, and those
    /// not taken are dropped now (nothing fences them any more).
    pub(crate) fn close(&self) {
        drop(self.deferred.close());
        lock(&self.map).take();
        lock(&self.asked).take();
    }

    /// Decides the path of a consumer of `consumer` on `device`
    /// (`"cuda:N"`, `N` or a GPU UUID), mapping the producer's mirror there
    /// when it can, and remembers the request for [`Plane::follow`]. Errs
    /// only for a malformed device name.
    pub(crate) fn attach(&self, consumer: &Consumer, device: &str) -> Result<Path, DeviceError> {
        DeviceSpec::parse(device)?;
        let (mirrors, generation) = mirrors_of(consumer);
        let path = self.map_mirror(mirrors, device);
        // Only a consumer on the device plane follows a restarted
        // producer's new mirrors: one on the host path stays there (its
        // Python side moves host batches, and would never fence device ones).
        *lock(&self.asked) =
            matches!(path, Path::Device(_)).then(|| (device.to_owned(), generation));
        Ok(path)
    }

    /// After taking events: maps the new mirrors when a restarted producer
    /// handed new ones. Views of the old mapping keep it mapped.
    pub(crate) fn follow(&self, consumer: &Consumer) {
        let mut asked = lock(&self.asked);
        let Some((device, generation)) = asked.as_mut() else {
            return;
        };
        let (mirrors, now) = mirrors_of(consumer);
        if *generation != now {
            *generation = now;
            self.map_mirror(mirrors, device);
        }
    }

    /// Maps the mirror of `device` among `mirrors`, or says why not.
    fn map_mirror(&self, mirrors: &Mirrors, device: &str) -> Path {
        let mut map = lock(&self.map);
        *map = None;
        let (mapping, slots) = match import(mirrors, device) {
            Ok(found) => found,
            Err(reason) => return Path::Host(reason),
        };
        let placed = DeviceMap {
            addr: mapping.addr(),
            len: mapping.len(),
            dl_device: mapping.dl_device(),
            keep: Arc::new(mapping),
            deferred: Arc::clone(&self.deferred),
        };
        *map = Some((placed, slots.clone()));
        Path::Device(slots)
    }
}

/// Imports the mirror of `device` among `mirrors` read-only; the reason
/// for the host path when it cannot.
fn import(mirrors: &Mirrors, device: &str) -> Result<(Mapping, Slots), String> {
    if mirrors.is_empty() {
        return Err(NO_MIRRORS.into());
    }
    let backend = batchcast_device::open().map_err(|e| format!("no device backend here: {e}"))?;
    let devices = backend
        .devices()
        .map_err(|e| format!("cannot list the devices: {e}"))?;
    let info = resolve(device, &devices).map_err(|e| e.to_string())?;
    if info.mig {
        return Err(DeviceError::Mig { device: info.uuid }.to_string());
    }
    let Some((spec, fd)) = mirrors.iter().find(|(spec, _)| spec.device == info.uuid) else {
        let served: Vec<&str> = mirrors
            .iter()
            .map(|(spec, _)| spec.device.as_str())
            .collect();
        return Err(format!(
            "the producer does not serve {device} ({}); it serves {}: run this consumer on one \
             of those, or start the producer with this GPU too",
            info.uuid,
            served.join(", ")
        ));
    };
    let fd = fd
        .try_clone()
        .map_err(|e| format!("cannot duplicate the mirror's fd: {e}"))?;
    let mapping = backend
        .import(spec, fd, Access::ReadOnly)
        .map_err(|e| format!("the device refused to map the producer's slots: {e}"))?;
    let slots = Slots {
        uuid: info.uuid,
        ordinal: mapping.ordinal(),
        addr: mapping.addr(),
        len: mapping.len(),
        read_only_enforced: mapping.read_only_enforced(),
        backend: backend.name(),
    };
    Ok((mapping, slots))
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
                d.set_item("slots", s.to_py(py)?)?;
            }
        }
        Ok(d)
    }
}

impl Slots {
    /// `{"uuid", "ordinal", "addr", "len", "read_only_enforced", "backend"}`.
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("uuid", &self.uuid)?;
        d.set_item("ordinal", self.ordinal)?;
        d.set_item("addr", self.addr)?;
        d.set_item("len", self.len)?;
        d.set_item("read_only_enforced", self.read_only_enforced)?;
        d.set_item("backend", self.backend)?;
        Ok(d)
    }
}
