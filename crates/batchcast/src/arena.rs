//! The shared-memory arena: one memfd cut into equal slots.
//!
//! The producer creates an anonymous memfd, sizes it, reserves every page
//! with `fallocate` (so a machine short of memory fails here, with a clear
//! error, rather than with SIGBUS on some later write), maps it, and seals
//! it: its size can never change, and nobody (the producer included) can
//! `write(2)` it or map it shared and writable again (`F_SEAL_FUTURE_WRITE`);
//! only the producer's own mapping writes it. Consumers receive a read-only
//! descriptor of the same file. They map it either shared and read-only, or
//! (copy-on-write, for in-place writes from Python) private and writable:
//! a write then lands on a private copy of the page it touches, made by the
//! kernel, page by page, for this process only; pages never written keep
//! showing the file (the producer's data). Before a reused slot is read for
//! a new batch, the consumer drops the private pages left in it
//! ([`crate::private_pages`]). A memfd has no name in any file system:
//! nothing can be left in `/dev/shm` by a crash, whoever dies, and
//! `/dev/shm`'s size limit (64 MiB in a default Docker container) does not
//! apply.
//!
//! The arena is a region (`crate::region`) whose items are its slots, each
//! starting on a page after the region's header page. Each slot starts
//! with a [`SLOT_HEADER`]-byte header ([`SlotHead`]): magic, sequence
//! number, epoch, bytes of arrays, and where the batch's encoded [`Layout`]
//! lies in the slot (right after its arrays). A consumer learns of a batch
//! from the board (`crate::board`) and reads everything else here.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::layout::{Layout, SLOT_HEADER};
use crate::private_pages::PrivatePages;
use crate::region::{self, Access, CreateError, Geometry, Kind, Region, RegionOpenError, Shared};

/// The arena's fixed part: nothing; its items are the slots.
#[repr(C)]
pub(crate) struct ArenaHead {}

// SAFETY: `#[repr(C)]`, empty.
unsafe impl Shared for ArenaHead {}

impl Kind for ArenaHead {
    const MAGIC: [u8; 8] = *b"BCARENA2";
    const WHAT: &'static str = "arena";
    const ITEMS: &'static str = "slots";
    /// Slots start on pages, so that a consumer can drop its private pages
    /// of one slot without touching the header or another slot.
    fn item_align() -> usize {
        rustix::param::page_size()
    }
}

const SLOT_MAGIC: u64 = u64::from_le_bytes(*b"BCSLOT03");

/// The header at the start of every slot, written by the producer while no
/// consumer holds a lease on the slot and read through a lease.
#[repr(C)]
pub(crate) struct SlotHead {
    magic: AtomicU64,
    seq: AtomicU64,
    /// Bytes of the batch's arrays, header included.
    used: AtomicU64,
    epoch: AtomicU64,
    /// Where the encoded layout starts in the slot.
    layout_at: AtomicU64,
    /// Its bytes.
    layout_len: AtomicU64,
}

// SAFETY: `#[repr(C)]`, atomics only.
unsafe impl Shared for SlotHead {}

const _: () = assert!(std::mem::size_of::<SlotHead>() <= SLOT_HEADER);

/// Where a batch's encoded layout goes: after its arrays, 8-byte aligned.
pub fn layout_offset(used: u64) -> u64 {
    used.next_multiple_of(8)
}

/// What a slot's header says about the batch in it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotHeader {
    /// The batch's sequence number.
    pub seq: u64,
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Where its arrays lie (validated against the slot size).
    pub layout: Layout,
}

/// The producer's read-write arena.
pub struct Arena {
    file: File,
    region: Region<ArenaHead>,
}

impl Arena {
    /// Creates an arena of `slots` slots of at least `slot_size` bytes
    /// each (rounded up to whole pages, so that a consumer can drop its
    /// private pages of one slot without touching the next).
    pub fn create(name: &str, slots: usize, slot_size: usize) -> Result<Arena> {
        Arena::create_lazy(name, slots, slots, slot_size)
    }

    /// Like [`Arena::create`], but reserves the memory of the first
    /// `reserved` slots only; each later slot must be [`Arena::reserve`]d
    /// before its first use (the lag slots: they cost nothing until used).
    pub fn create_lazy(
        name: &str,
        slots: usize,
        reserved: usize,
        slot_size: usize,
    ) -> Result<Arena> {
        let reserved = reserved.min(slots);
        if slots == 0 || slot_size < SLOT_HEADER {
            return Err(Error::InvalidArgument(format!(
                "an arena needs at least one slot of at least {SLOT_HEADER} bytes"
            )));
        }
        let page = rustix::param::page_size();
        let slot_size = slot_size
            .checked_next_multiple_of(page)
            .ok_or_else(|| Error::InvalidArgument("slot size overflows".into()))?;
        (slots as u64)
            .checked_mul(slot_size as u64)
            .ok_or_else(|| Error::InvalidArgument("arena size overflows".into()))?;
        // The header's page and the reserved slots.
        let upfront = page as u64 + reserved as u64 * slot_size as u64;
        let out_of_memory = |available: String| Error::OutOfSharedMemory {
            needed: upfront,
            slots: reserved,
            slot_size,
            available,
        };
        if let Some(avail) = available_memory() {
            if upfront > avail {
                return Err(out_of_memory(format!("{avail} bytes available")));
            }
        }
        let geometry = Geometry {
            items: slots,
            item_size: slot_size,
        };
        // Only the producer's own mapping writes the arena, and only a slot
        // no consumer holds a lease on (see producer::state).
        let created = Region::create(
            &format!("batchcast:{name}"),
            geometry,
            reserved,
            region::Writers::Creator,
        );
        let (region, file) = created.map_err(|e| match e {
            CreateError::Os { step, errno, .. }
                if step.starts_with("size") && [Errno::NOSPC, Errno::FBIG].contains(&errno) =>
            {
                out_of_memory(format!("ftruncate failed: {errno}"))
            }
            CreateError::Os { step, errno, .. }
                if step.starts_with("reserve") && [Errno::NOSPC, Errno::NOMEM].contains(&errno) =>
            {
                out_of_memory(format!("the kernel refused to reserve it: {errno}"))
            }
            e => e.into(),
        })?;
        Ok(Arena { file, region })
    }

    /// A read-only descriptor of the arena, to send to consumers: a consumer
    /// can neither write it nor map it writable.
    pub fn readonly_fd(&self) -> Result<OwnedFd> {
        region::reopen_readonly(&self.file)
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.region.item_size()
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.region.items()
    }

    /// Reserves the memory of slot `i` (a no-op for a slot already
    /// reserved). Fails with the kernel's refusal (ENOSPC, ENOMEM) when
    /// memory is short: then writing the slot would be SIGBUS.
    pub fn reserve(&self, i: usize) -> std::io::Result<()> {
        self.region
            .reserve(&self.file, i)
            .map_err(std::io::Error::from)
    }

    /// Bytes of the whole mapping (header page and every slot).
    pub fn mapped_len(&self) -> usize {
        self.region.map().len()
    }

    /// Where this process maps the arena ([`Arena::mapped_len`] bytes).
    pub fn addr(&self) -> usize {
        self.region.map().as_ptr() as usize
    }

    /// Where slot `i` starts in the arena.
    pub fn slot_offset(&self, i: usize) -> usize {
        self.region.item_offset(i)
    }

    /// The first `len` bytes of slot `i`, read-only (header included).
    /// Panics if `i` is out of range or `len` exceeds the slot.
    pub fn slot_prefix(&mut self, i: usize, len: usize) -> &[u8] {
        &self.slot_mut(i)[..len]
    }

    /// Slot `i`, writable. The caller must hold the slot free of leases.
    ///
    /// Panics if `i` is out of range (slot numbers are the producer's own).
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let ptr = self.region.item_ptr(i);
        let ptr = ptr.unwrap_or_else(|| panic!("slot {i} of {} slots", self.slots()));
        // SAFETY: slot `i` lies inside our shared, writable mapping; the
        // slice borrows `self` mutably, so no other reference of this process
        // into the arena lives meanwhile. No other process writes it
        // (consumers map it read-only or private; the seals refuse every
        // other writable mapping), and the caller holds the slot free of
        // leases, so no consumer reads it meanwhile either.
        unsafe { std::slice::from_raw_parts_mut(ptr, self.slot_size()) }
    }

    /// Writes the header of slot `i` for batch `seq` of `epoch`, whose
    /// arrays use `used` bytes (header included) and whose encoded layout is
    /// `layout`. Fails if the layout does not fit after the arrays.
    pub fn seal_slot(
        &mut self,
        i: usize,
        seq: u64,
        epoch: u64,
        used: u64,
        layout: &[u8],
    ) -> Result<()> {
        let slot_size = self.slot_size();
        let at = layout_offset(used) as usize;
        let slot = self.slot_mut(i);
        if at + layout.len() > slot_size {
            return Err(Error::BatchTooLarge {
                needed: at + layout.len(),
                slot_size,
            });
        }
        slot[at..at + layout.len()].copy_from_slice(layout);
        let Some(head) = self.region.item::<SlotHead>(i) else {
            return Err(Error::Usage(format!("slot {i} is not in the arena")));
        };
        head.magic.store(SLOT_MAGIC, Ordering::Relaxed);
        head.seq.store(seq, Ordering::Relaxed);
        head.used.store(used, Ordering::Relaxed);
        head.epoch.store(epoch, Ordering::Relaxed);
        head.layout_at.store(at as u64, Ordering::Relaxed);
        head.layout_len
            .store(layout.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A consumer's mapping of the arena: shared and read-only, or private and
/// writable (copy-on-write).
pub struct ArenaView {
    region: Region<ArenaHead>,
    /// Set when the mapping is private: finds and drops private pages.
    private: Option<PrivatePages>,
}

impl ArenaView {
    /// Maps the arena received from the producer, which announced `slots`
    /// slots of `slot_size` bytes: with `copy_on_write`, private and
    /// writable (an in-place write lands on a private copy of the page it
    /// touches); without, shared and read-only (a write is SIGSEGV). An
    /// error, never a silent fallback, if the private mapping is refused.
    pub fn map(
        fd: OwnedFd,
        slots: usize,
        slot_size: usize,
        copy_on_write: bool,
    ) -> Result<ArenaView, RegionOpenError> {
        // The producer writes a slot only while this consumer holds no lease
        // on it, so bytes read through a lease are stable for its lifetime.
        if slot_size < SLOT_HEADER {
            return Err(RegionOpenError::Malformed {
                what: ArenaHead::WHAT,
                why: format!(
                    "the producer announced slots of {slot_size} bytes, fewer than a slot's \
                     {SLOT_HEADER}-byte header"
                ),
            });
        }
        let access = match copy_on_write {
            true => Access::CopyOnWrite,
            false => Access::ReadOnly,
        };
        let region = Region::open(fd, access, Some(slots), slot_size).map_err(|e| match e {
            RegionOpenError::Os {
                what,
                step: "map",
                source,
            } if copy_on_write => RegionOpenError::Os {
                what,
                step: "map copy-on-write (private and writable, for in-place writes; \
                       copy_on_write=False maps it read-only instead, where an in-place write \
                       is a crash)",
                source,
            },
            e => e,
        })?;
        let private = copy_on_write.then(PrivatePages::new);
        Ok(ArenaView { region, private })
    }

    /// Readies slot `i` for a new batch: drops this process's private
    /// copies of its pages (in-place writes to the batch it held before), so
    /// that it reads what the producer wrote. Call it only once every view
    /// of the slot's previous batch is gone (the producer reuses a slot only
    /// then).
    pub fn refresh(&self, i: usize) -> Result<()> {
        if i >= self.region.items() {
            return Err(Error::Protocol(format!("slot {i} out of range")));
        }
        let Some(private) = &self.private else {
            return Ok(());
        };
        let (at, len) = (self.region.item_offset(i), self.slot_size());
        // SAFETY: the slot lies inside the mapping (checked above), a
        // private one (`private` is set only then), and no view of it is
        // alive (see above), so no reference sees its pages change.
        unsafe { private.drop_in(self.region.map(), at, len) }
            .map_err(|e| Error::io("cannot drop the private copy of a slot written in place", e))
    }

    /// Bytes of the whole mapping: the length of every device mirror.
    pub fn mapped_len(&self) -> usize {
        self.region.map().len()
    }

    /// Where slot `i` starts in the arena, and so in every device mirror.
    pub fn slot_offset(&self, i: usize) -> usize {
        self.region.item_offset(i)
    }

    /// True when in-place writes get a private copy instead of SIGSEGV.
    pub fn copy_on_write(&self) -> bool {
        self.private.is_some()
    }

    /// The start of slot `i`: writable only with copy-on-write (for tests
    /// and raw views).
    pub fn slot_ptr(&self, i: usize) -> Option<*mut u8> {
        self.region.item_ptr(i)
    }

    /// Slot `i`; `None` if out of range. Prefer [`ArenaView::bytes`]: with
    /// copy-on-write this process may write rows of a leased slot through
    /// its views, and a slice must never cover bytes written meanwhile.
    pub fn slot(&self, i: usize) -> Option<&[u8]> {
        self.bytes(i, 0, self.slot_size())
    }

    /// Bytes `offset..offset + len` of slot `i`; `None` if out of range.
    ///
    /// The slice covers only what the caller reads (a layout, one leaf's
    /// rows), never the whole slot: views of other rows of the same slot
    /// may be written in place by this process (copy-on-write) while the
    /// slice lives.
    pub fn bytes(&self, i: usize, offset: usize, len: usize) -> Option<&[u8]> {
        offset.checked_add(len).filter(|&e| e <= self.slot_size())?;
        let ptr = self.slot_ptr(i)?.wrapping_add(offset);
        // SAFETY: the range lies inside slot `i` of our live mapping (checked
        // above), which the slice borrows. The producer writes a slot only
        // while this consumer holds no lease on it, and the consumer reads a
        // slot only through a lease. In-place writes by this process go to
        // the rows of a view handed to user code; the callers here read the
        // slot's layout (never part of a view) and rows that are being
        // copied or exposed, not written, while the slice lives.
        Some(unsafe { std::slice::from_raw_parts(ptr.cast_const(), len) })
    }

    /// Reads slot `i`'s header, checks that it holds batch `seq`, and
    /// decodes and validates the batch's layout.
    pub fn header(&self, i: usize, seq: u64) -> Result<SlotHeader> {
        let out_of_range = || Error::Protocol(format!("slot {i} out of range"));
        let head = self.region.item::<SlotHead>(i).ok_or_else(out_of_range)?;
        let word = |w: &AtomicU64| w.load(Ordering::Relaxed);
        let names = word(&head.seq);
        if word(&head.magic) != SLOT_MAGIC || names != seq {
            return Err(Error::Protocol(format!(
                "slot {i} does not hold batch {seq} (header names batch {names})"
            )));
        }
        let (used, epoch) = (word(&head.used), word(&head.epoch));
        let (at, len) = (word(&head.layout_at), word(&head.layout_len));
        let end = at
            .checked_add(len)
            .filter(|&e| e <= self.slot_size() as u64);
        if at < layout_offset(used) || len as usize > crate::wire::MAX_FRAME || end.is_none() {
            return Err(Error::Protocol(format!(
                "slot {i}'s header places its layout out of bounds"
            )));
        }
        let encoded = self
            .bytes(i, at as usize, len as usize)
            .ok_or_else(out_of_range)?;
        let layout: Layout = postcard::from_bytes(encoded)
            .map_err(|e| Error::Protocol(format!("slot {i} holds a malformed layout: {e}")))?;
        layout.validate(self.slot_size())?;
        if layout.slot_bytes() > at {
            return Err(Error::Protocol(format!(
                "slot {i}'s arrays overlap its layout"
            )));
        }
        Ok(SlotHeader { seq, epoch, layout })
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.region.item_size()
    }
}

/// Bytes of memory this process can still commit: the smaller of the
/// system's `MemAvailable` and the cgroup's headroom, when readable.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let sys = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024);
    let read = |p: &str| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok();
    let cgroup = match (
        read("/sys/fs/cgroup/memory.max"),
        read("/sys/fs/cgroup/memory.current"),
    ) {
        (Some(max), Some(cur)) => Some(max.saturating_sub(cur)),
        _ => None,
    };
    match (sys, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_leaf_layout() -> (Layout, Vec<u8>) {
        use crate::dtype::DType;
        use crate::layout::{LeafSpec, Node};
        let layout = Layout::plan(Node::Leaf(0), &[LeafSpec::array(DType::U8, vec![4])]).unwrap();
        let bytes = postcard::to_stdvec(&layout).unwrap();
        (layout, bytes)
    }

    #[test]
    fn consumer_sees_what_the_producer_wrote() {
        let mut arena = Arena::create("t", 3, 4096).unwrap();
        let (layout, encoded) = one_leaf_layout();
        arena.slot_mut(1)[SLOT_HEADER..SLOT_HEADER + 4].copy_from_slice(b"abcd");
        arena
            .seal_slot(1, 42, 5, layout.slot_bytes(), &encoded)
            .unwrap();
        let view = ArenaView::map(arena.readonly_fd().unwrap(), 3, 4096, false).unwrap();
        assert_eq!(
            &view.slot(1).unwrap()[SLOT_HEADER..SLOT_HEADER + 4],
            b"abcd"
        );
        let header = view.header(1, 42).unwrap();
        assert_eq!((header.seq, header.epoch), (42, 5));
        assert_eq!(header.layout, layout);
        assert!(view.header(1, 41).is_err());
        assert!(view.header(0, 0).is_err());
        assert!(view.slot(3).is_none());
    }

    #[test]
    fn a_layout_that_does_not_fit_after_the_arrays_is_refused() {
        let mut arena = Arena::create("t", 1, 4096).unwrap();
        let (_, encoded) = one_leaf_layout();
        let err = arena.seal_slot(0, 0, 0, 4090, &encoded).unwrap_err();
        assert!(matches!(err, Error::BatchTooLarge { .. }), "{err}");
    }

    #[test]
    fn a_header_pointing_outside_the_slot_is_a_protocol_error() {
        let mut arena = Arena::create("t", 1, 4096).unwrap();
        let (layout, encoded) = one_leaf_layout();
        arena
            .seal_slot(0, 3, 0, layout.slot_bytes(), &encoded)
            .unwrap();
        let head = arena.region.item::<SlotHead>(0).unwrap();
        head.layout_len.store(u64::MAX, Ordering::Relaxed);
        let view = ArenaView::map(arena.readonly_fd().unwrap(), 1, 4096, false).unwrap();
        assert!(matches!(view.header(0, 3), Err(Error::Protocol(_))));
    }

    #[test]
    fn readonly_fd_cannot_be_mapped_writable() {
        let arena = Arena::create("t", 1, 4096).unwrap();
        let file = File::from(arena.readonly_fd().unwrap());
        // SAFETY: the mapping is expected to fail; nothing is read or written.
        let res = unsafe { memmap2::MmapOptions::new().len(4096).map_mut(&file) };
        assert!(res.is_err());
    }

    #[test]
    fn nobody_can_write_the_arena_but_the_producers_mapping() {
        let mut arena = Arena::create("t", 2, 4096).unwrap();
        use rustix::fs::SealFlags;
        let seals = rustix::fs::fcntl_get_seals(&arena.file).unwrap();
        assert!(seals.contains(SealFlags::FUTURE_WRITE | SealFlags::SHRINK | SealFlags::SEAL));
        // Not even through the producer's own read-write descriptor: no new
        // shared writable mapping, no write(2).
        // SAFETY: the mapping is expected to fail; nothing is read or written.
        let res = unsafe { memmap2::MmapOptions::new().len(4096).map_mut(&arena.file) };
        assert!(res.is_err());
        let err = rustix::io::pwrite(&arena.file, b"x", 0).unwrap_err();
        assert_eq!(err, rustix::io::Errno::PERM);
        // The producer's mapping still writes, and a consumer's private
        // writable mapping is allowed.
        arena.slot_mut(1)[SLOT_HEADER] = 5;
        let view = ArenaView::map(arena.readonly_fd().unwrap(), 2, 4096, true).unwrap();
        let p = view.slot_ptr(1).unwrap();
        // SAFETY: slot 1 of a private, writable mapping; no reference into it.
        unsafe {
            assert_eq!(p.add(SLOT_HEADER).read_volatile(), 5);
            p.add(SLOT_HEADER).write_volatile(6);
        }
        assert_eq!(arena.slot_mut(1)[SLOT_HEADER], 5);
    }

    #[test]
    fn lazy_slots_cost_nothing_until_reserved() {
        let slot = 1 << 20;
        let arena = Arena::create_lazy("t", 4, 1, slot).unwrap();
        let blocks = || rustix::fs::fstat(&arena.file).unwrap().st_blocks as u64 * 512;
        let header = rustix::param::page_size() as u64;
        assert_eq!(blocks(), header + slot as u64);
        arena.reserve(3).unwrap();
        assert_eq!(blocks(), header + 2 * slot as u64);
        assert!(arena.reserve(4).is_err());
    }

    #[test]
    fn an_impossible_arena_fails_with_the_fix() {
        let err = Arena::create("t", 1024, 1 << 40).err().unwrap().to_string();
        assert!(err.contains("lower the window"), "{err}");
    }

    #[test]
    fn an_arena_that_could_shrink_under_the_view_is_refused() {
        // A peer's memfd without seals: it could truncate it after we map
        // it, and reading the lost pages would be SIGBUS.
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let err = ArenaView::map(fd, 1, 4096, false).err().unwrap();
        assert!(matches!(err, RegionOpenError::NotSealed { .. }), "{err}");
        assert!(err.to_string().contains("not sealed"), "{err}");
    }

    #[test]
    fn a_view_larger_than_the_arena_is_refused() {
        let arena = Arena::create("t", 1, 4096).unwrap();
        assert!(ArenaView::map(arena.readonly_fd().unwrap(), 2, 4096, false).is_err());
        // Nor one of another slot size, even where the bytes would fit.
        let arena = Arena::create("t", 2, 8192).unwrap();
        let err = ArenaView::map(arena.readonly_fd().unwrap(), 4, 4096, false)
            .err()
            .unwrap();
        assert!(matches!(err, RegionOpenError::Malformed { .. }), "{err}");
    }

    #[test]
    fn slot_sizes_that_would_misplace_a_slot_header_are_refused() {
        // Too small for the slot header, or slots that do not start on
        // pages: a hostile welcome, never read through.
        let arena = Arena::create("t", 2, 4096).unwrap();
        for (slots, slot_size) in [(1, 8), (2, 4097), (1, 8191), (0, 0)] {
            let err = ArenaView::map(arena.readonly_fd().unwrap(), slots, slot_size, false)
                .err()
                .unwrap();
            assert!(
                matches!(err, RegionOpenError::Malformed { .. }),
                "{slots} x {slot_size}: {err}"
            );
        }
    }

    #[test]
    fn a_board_sent_as_the_arena_is_refused() {
        let board = crate::board::Board::create("t", 2).unwrap();
        let err = ArenaView::map(board.readonly_fd().unwrap(), 1, 4096, false)
            .err()
            .unwrap();
        assert!(matches!(err, RegionOpenError::WrongKind { .. }), "{err}");
    }
}
