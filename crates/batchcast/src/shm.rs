//! Small sealed memfds: the board and the per-consumer ledgers.
//!
//! Each is an anonymous memfd (no name in any file system, so nothing is
//! ever left behind), sized and reserved at creation, then sealed against
//! shrinking and growing: whoever else maps it can never make our mapping
//! fault with SIGBUS. (The arena, which may be large, has its own creation
//! path with detailed out-of-memory errors; see `crate::arena`.)

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{FallocateFlags, MemfdFlags, SealFlags};

use crate::error::{Error, Result};

/// Creates a zeroed, sealed memfd of at least `len` bytes (whole pages) and
/// maps it read-write (shared, raw: its words are reached through
/// [`atomic_u64`] and [`atomic_u32`] only).
pub(crate) fn create_sealed(label: &str, len: usize) -> Result<(File, MmapRaw)> {
    let len = len.next_multiple_of(rustix::param::page_size());
    let fd = rustix::fs::memfd_create(label, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| Error::io("cannot create shared memory (memfd_create)", e))?;
    rustix::fs::ftruncate(&fd, len as u64)
        .map_err(|e| Error::io("cannot size shared memory", e))?;
    rustix::fs::fallocate(&fd, FallocateFlags::empty(), 0, len as u64)
        .map_err(|e| Error::io("cannot reserve shared memory (fallocate)", e))?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .map_err(|e| Error::io("cannot seal shared memory", e))?;
    let file = File::from(fd);
    // Our own sealed memfd: its size cannot change under the mapping.
    let map = MmapOptions::new()
        .len(len)
        .map_raw(&file)
        .map_err(|e| Error::io("cannot map shared memory", e))?;
    Ok((file, map))
}

/// A read-only descriptor of `file` (`/proc/self/fd/N` reopened): whoever
/// receives it can neither write the file nor map it writable.
pub(crate) fn reopen_readonly(file: &File) -> Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    rustix::fs::open(
        path.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::io("cannot reopen shared memory read-only", e))
}

/// The size of a received shared-memory file.
pub(crate) fn file_len(file: &File) -> Result<usize> {
    let size = rustix::fs::fstat(file.as_fd())
        .map_err(|e| Error::io("cannot inspect shared memory", e))?
        .st_size;
    usize::try_from(size).map_err(|_| Error::Protocol(format!("shared memory of {size} bytes")))
}

/// True when `file` is sealed against shrinking: mapping it cannot lead to
/// SIGBUS, whatever its sender does later.
pub(crate) fn is_sealed(file: &File) -> bool {
    rustix::fs::fcntl_get_seals(file.as_fd())
        .map(|s| s.contains(SealFlags::SHRINK))
        .unwrap_or(false)
}

/// The atomic word at byte offset `at` of a shared mapping.
///
/// The word is reached through the mapping's raw pointer, never through a
/// `&[u8]` of it: other processes write these words, and a shared slice
/// would assert that nobody does.
///
/// Panics if the word is out of the mapping or misaligned: offsets are the
/// caller's constants (or checked against the mapping's size), never input.
pub(crate) fn atomic_u64(map: &MmapRaw, at: usize) -> &AtomicU64 {
    assert!(
        at % 8 == 0 && at + 8 <= map.len(),
        "word {at} outside the mapping"
    );
    // SAFETY: the word lies inside the mapping and is 8-byte aligned (the
    // mapping is page aligned, `at` a multiple of 8); the pointer comes from
    // the mapping itself, and the reference borrows the mapping, so it
    // cannot outlive it. AtomicU64 has u64's layout and allows shared
    // mutation. Other processes touch shared words only through atomics; on
    // a read-only mapping callers only load.
    unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(at).cast::<u64>()) }
}

/// [`atomic_u64`] for a 32-bit word (a futex word).
pub(crate) fn atomic_u32(map: &MmapRaw, at: usize) -> &AtomicU32 {
    assert!(
        at % 4 == 0 && at + 4 <= map.len(),
        "word {at} outside the mapping"
    );
    // SAFETY: as in `atomic_u64`, with 4-byte alignment.
    unsafe { AtomicU32::from_ptr(map.as_mut_ptr().add(at).cast::<u32>()) }
}
