//! Devices for batchcast's data plane: where the producer's arena is
//! mirrored (one copy per GPU) and how consumers map the mirrors.
//!
//! The core (`batchcast`) makes no device calls: it takes
//! [`batchcast::DeviceMirror`]s. This crate makes them, behind one trait:
//! - [`Backend`]: lists the visible devices ([`DeviceInfo`]), makes a
//!   producer's [`Mirror`] on a device, and maps a mirror in a consumer
//!   ([`Backend::import`] → [`Mapping`], unmapped when dropped);
//! - [`Cuda`]: the CUDA driver API, loaded at run time (no CUDA needed to
//!   build; [`Error::NoDriver`] where `libcuda.so.1` is absent). A mirror
//!   is a `cuMemCreate` allocation exported as a POSIX fd, filled from the
//!   page-locked arena on the mirror's own stream, each copy complete
//!   before `copy_in` returns; consumers map it with read-only or
//!   read-write access (read-write maps the shared allocation: writes
//!   reach every process that maps it);
//! - [`StandIn`]: N fake GPUs in host memory (memfds), for tests and CI. It
//!   shows the seams (fds, sizes, visibility, protections) work; it is never
//!   evidence of GPU behaviour. A read-write stand-in mapping is private
//!   (`MAP_PRIVATE`), unlike CUDA's;
//! - [`visible`], [`resolve`], [`parse_device_list`]: device names as CUDA
//!   reads `CUDA_VISIBLE_DEVICES` and as users write them;
//! - [`serve_devices`], [`mirrors_for`]: the producer's mirrors for the
//!   devices a user named, or the host path and the warning that says why;
//! - [`open`]: the stand-in where `BATCHCAST_DEVICE_STAND_IN` asks for it,
//!   CUDA otherwise, never a stand-in silently.
//!
//! Invariants:
//! - Devices travel between processes by UUID, never by ordinal: two
//!   processes with different `CUDA_VISIBLE_DEVICES` name the same GPU the
//!   same way, and each maps it to its own ordinal.
//! - Everything a peer sends (the fd, the import information, the length)
//!   is checked before anything is mapped: the import information is a
//!   versioned fixed-size encoding with bounded sizes, and the arena's
//!   length must fit the allocation (the stand-in's fd must hold exactly
//!   the length).
//! - A mirror's `copy_in` returns only once the bytes are on the device, so
//!   the producer may publish the slot at once; out-of-range copies are
//!   errors, never panics.
//! - No call into the CUDA library before it is known to load; a symbol
//!   the driver lacks is an error, not a panic.
//! - Every device resource is given back on drop, in reverse order of
//!   acquisition; errors there are ignored, never panics.
//!
//! Verified on a GPU: nothing yet. The CUDA backend compiles and returns
//! [`Error::NoDriver`] without a driver; scripts/gpu-check.sh checks the
//! rest (export/import across processes, read-only enforcement, copy
//! rates, leaks) on a GPU machine. MIG detection (comparing the v1 and v2
//! UUID calls) has not run on a MIG GPU.

#![deny(missing_docs)]

mod backend;
mod cuda;
mod error;
mod import_info;
mod serve;
mod stand_in;
mod stats;
mod visible;

pub use backend::{Access, Backend, DeviceInfo, Mapping, Mirror};
pub use cuda::Cuda;
pub use error::{Error, Result};
pub use serve::{mirrors_for, serve_devices, Served, ServedDevice};
pub use stand_in::{stand_in_uuid, StandIn, MAX_STAND_INS, STAND_IN_ENV};
pub use stats::MirrorStats;
pub use visible::{parse_device_list, resolve, visible, DeviceSpec, MAX_ENTRIES, MAX_SPEC_LEN};

/// The backend this process uses: the stand-in where
/// [`STAND_IN_ENV`] is set, CUDA otherwise ([`Error::NoDriver`] without a
/// driver: never a stand-in in its place).
pub fn open() -> Result<Box<dyn Backend>> {
    if let Some(stand_in) = StandIn::from_env()? {
        return Ok(Box::new(stand_in));
    }
    Ok(Box::new(Cuda::open()?))
}
