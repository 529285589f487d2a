//! The one trait a device sits behind, and what it hands out.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use batchcast::{DeviceMirror, MirrorSpec};

use crate::error::Result;
use crate::stats::MirrorStats;

/// One device as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Its index among the devices visible to this process (what `cuda:N`
    /// names here; another process may see it under another index).
    pub ordinal: u32,
    /// Its name in every process: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`
    /// (`MIG-…` for a MIG instance).
    pub uuid: String,
    /// The product name.
    pub name: String,
    /// Whether it is a MIG instance (its memory cannot be shared).
    pub mig: bool,
    /// Whether its memory can be shared between processes (virtual memory
    /// management with POSIX file-descriptor handles).
    pub shareable: bool,
}

/// How a consumer maps a mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only.
    ReadOnly,
    /// Reads and writes (see [`Backend::import`] for where writes go).
    ReadWrite,
}

/// A device: lists what is visible, makes the producer's mirrors, maps them
/// in consumers. Devices are named by UUID, never by ordinal, so processes
/// with different `CUDA_VISIBLE_DEVICES` agree.
pub trait Backend: Send + Sync {
    /// `"cuda"` or `"stand-in"`.
    fn name(&self) -> &'static str;

    /// The devices visible to this process, by ordinal.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;

    /// A new mirror of the arena on the device `uuid` (producer side).
    fn mirror(&self, uuid: &str) -> Result<Mirror>;

    /// Maps the mirror `spec` describes, exported as `fd` (consumer side):
    /// on the device `spec.device`, covering `spec.len` (the arena's
    /// length), with the backend's `spec.import_info`. For the
    /// stand-in, [`Access::ReadWrite`] is a private mapping (writes stay
    /// this process's); for CUDA it maps the shared allocation writable, so
    /// writes reach every process that maps it.
    fn import(&self, spec: &MirrorSpec, fd: OwnedFd, access: Access) -> Result<Mapping>;
}

/// The producer's mirror on one device, with its counters.
pub struct Mirror {
    inner: Box<dyn DeviceMirror>,
    stats: Arc<MirrorStats>,
}

impl Mirror {
    pub(crate) fn new(inner: Box<dyn DeviceMirror>, stats: Arc<MirrorStats>) -> Self {
        Mirror { inner, stats }
    }

    /// Its counters, readable while it copies.
    pub fn stats(&self) -> Arc<MirrorStats> {
        Arc::clone(&self.stats)
    }
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("device", &self.inner.device())
            .field("copies", &self.stats.copies())
            .finish()
    }
}

impl DeviceMirror for Mirror {
    fn device(&self) -> &str {
        self.inner.device()
    }

    fn import_info(&self) -> Vec<u8> {
        self.inner.import_info()
    }

    fn allocate(&mut self, len: u64, arena_addr: usize) -> io::Result<OwnedFd> {
        self.inner.allocate(len, arena_addr)
    }

    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let start = Instant::now();
        self.inner.copy_in(offset, bytes)?;
        self.stats.record_copy(bytes.len(), start.elapsed());
        Ok(())
    }
}

/// Checks that a copy of `count` bytes at `offset` ends within a mirror of
/// `len` bytes.
pub(crate) fn check_copy(offset: u64, count: usize, len: u64) -> io::Result<()> {
    if offset.checked_add(count as u64).is_none_or(|end| end > len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a copy of {count} bytes at offset {offset} passes the mirror's end ({len})"),
        ));
    }
    Ok(())
}

/// A consumer's mapping of a mirror; unmapped when dropped. A backend
/// builds it field by field; the fields are read through the methods.
pub struct Mapping {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) ordinal: u32,
    pub(crate) read_only_enforced: Option<bool>,
    pub(crate) dl_device: (i32, i32),
    /// Unmaps and releases in its `Drop`.
    pub(crate) _owner: Box<dyn Send + Sync>,
}

impl Mapping {
    /// Where the arena's first byte is: a device address (CUDA) or a host
    /// address (the stand-in).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The arena's length, in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the mapping is empty (never: arenas have bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device's ordinal in this process.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// For a read-only mapping, whether a write faults: `Some(true)` for
    /// the stand-in (`PROT_READ` pages), `None` for CUDA until a GPU run
    /// has checked it. `Some(false)` for a read-write mapping.
    pub fn read_only_enforced(&self) -> Option<bool> {
        self.read_only_enforced
    }

    /// The DLPack device: `(2, ordinal)` (kDLCUDA) or `(1, 0)` (kDLCPU,
    /// the stand-in).
    pub fn dl_device(&self) -> (i32, i32) {
        self.dl_device
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("ordinal", &self.ordinal)
            .field("dl_device", &self.dl_device)
            .finish()
    }
}
