//! Copies of the arena in a device's memory (a GPU's), filled by the
//! producer and mapped by the consumers on that device.
//!
//! A mirror has the arena's layout byte for byte: slot `i` of the arena is
//! at the same offset in every mirror, so a batch's layout (offsets into its
//! slot) describes its bytes on every device too, and a slot's lease covers
//! its copies. The producer copies a slot into every mirror before it
//! publishes the slot, so a consumer that sees a batch on the board may
//! read it on its device at once.
//!
//! This crate makes no device calls: the implementation is handed in
//! ([`ProducerOptions::mirrors`](crate::ProducerOptions)) by a crate that
//! knows the device (`batchcast-device`: CUDA, or a host-memory stand-in).

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One device's copy of the arena, owned by the producer.
pub trait DeviceMirror: Send {
    /// The device, as every process names it whatever its
    /// `CUDA_VISIBLE_DEVICES` (a GPU's UUID, `GPU-…`); at most
    /// [`MAX_DEVICE_ID`] bytes.
    fn device(&self) -> &str;

    /// What a consumer needs besides the fd to map the memory (for CUDA,
    /// the allocation's size and granularity), at most
    /// [`MAX_IMPORT_INFO`] bytes; it travels in the welcome as is.
    fn import_info(&self) -> Vec<u8>;

    /// Allocates `len` bytes (the arena's length) on the device and returns
    /// an fd that a consumer imports them by; called once, when the
    /// producer makes its arena. `arena_addr` is where the producer maps
    /// the arena (`len` bytes): the mirror may page-lock that range once,
    /// and it stays mapped until the mirror is dropped.
    fn allocate(&mut self, len: u64, arena_addr: usize) -> io::Result<OwnedFd>;

    /// Copies `bytes` to `offset` of the allocation and returns once the
    /// copy has completed (the bytes are readable on the device).
    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
}

/// Longest device name a welcome carries, in bytes.
pub const MAX_DEVICE_ID: usize = 96;
/// Largest import information a welcome carries per device, in bytes.
pub const MAX_IMPORT_INFO: usize = 256;
/// Most devices one producer mirrors its arena to.
pub const MAX_MIRRORS: usize = 16;

/// A mirror as a welcome describes it; its fd rides with the welcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorSpec {
    /// The device ([`DeviceMirror::device`]).
    pub device: String,
    /// Bytes of the allocation: the arena's length.
    pub len: u64,
    /// What a consumer needs besides the fd to map it
    /// ([`DeviceMirror::import_info`]).
    pub import_info: Vec<u8>,
}

impl MirrorSpec {
    /// Refuses a spec over the bounds or of another length than the
    /// arena's (`arena_len`), as a protocol error.
    pub(crate) fn check(&self, arena_len: u64) -> Result<()> {
        if self.device.len() > MAX_DEVICE_ID || self.import_info.len() > MAX_IMPORT_INFO {
            return Err(Error::Protocol(format!(
                "the welcome's mirror of device {:?} has an id over {MAX_DEVICE_ID} bytes \
                 or import information over {MAX_IMPORT_INFO} bytes",
                self.device.chars().take(MAX_DEVICE_ID).collect::<String>()
            )));
        }
        if self.len != arena_len {
            return Err(Error::Protocol(format!(
                "the welcome's mirror on {:?} is {} bytes long, the arena {arena_len}: \
                 a mirror has the arena's layout byte for byte",
                self.device, self.len
            )));
        }
        Ok(())
    }
}

/// A [`DeviceMirror`] handed to a producer in its options: shared, so that
/// the options stay cloneable, and locked only by the producer's publishing
/// thread while it copies. One mirror serves one producer: a second
/// producer created with the same mirror allocates it again. The producer
/// drops its handle before it unmaps the arena; a clone kept elsewhere
/// outlives that mapping, so drop clones with the producer.
#[derive(Clone)]
pub struct Mirror(Arc<Mutex<dyn DeviceMirror>>);

impl Mirror {
    /// Wraps `mirror` for [`ProducerOptions::mirrors`](crate::ProducerOptions).
    pub fn new(mirror: impl DeviceMirror + 'static) -> Mirror {
        Mirror(Arc::new(Mutex::new(mirror)))
    }

    /// The mirror, locked (a panic in another holder does not stop it).
    pub(crate) fn lock(&self) -> MutexGuard<'_, dyn DeviceMirror + 'static> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its device.
    pub fn device(&self) -> String {
        self.lock().device().to_owned()
    }
}

impl fmt::Debug for Mirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Mirror").field(&self.device()).finish()
    }
}

/// Refuses mirrors over the bounds: more than [`MAX_MIRRORS`], a device
/// named twice, an id or import information too long.
pub(crate) fn check_mirrors(mirrors: &[Mirror]) -> Result<()> {
    if mirrors.len() > MAX_MIRRORS {
        return Err(Error::InvalidArgument(format!(
            "{} device mirrors given; a producer mirrors its arena to at most {MAX_MIRRORS} \
             devices: serve fewer devices",
            mirrors.len()
        )));
    }
    let mut seen = HashSet::new();
    for m in mirrors {
        let m = m.lock();
        let device = m.device();
        if device.is_empty() || device.len() > MAX_DEVICE_ID {
            return Err(Error::InvalidArgument(format!(
                "a device id must be 1 to {MAX_DEVICE_ID} bytes, not {} ({:?})",
                device.len(),
                device.chars().take(MAX_DEVICE_ID).collect::<String>()
            )));
        }
        if !seen.insert(device.to_owned()) {
            return Err(Error::InvalidArgument(format!(
                "device {device:?} is mirrored twice; name each device once"
            )));
        }
        let info = m.import_info().len();
        if info > MAX_IMPORT_INFO {
            return Err(Error::InvalidArgument(format!(
                "device {device:?} gives {info} bytes of import information; at most \
                 {MAX_IMPORT_INFO} travel in a welcome"
            )));
        }
    }
    Ok(())
}
