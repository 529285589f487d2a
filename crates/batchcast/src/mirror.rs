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

use std::io;
use std::os::fd::OwnedFd;

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
