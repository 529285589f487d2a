//! A consumer's ledger: where it tells the producer, through shared memory
//! and without a message, which batches it has released.
//!
//! The producer creates one small region (`crate::region`) per consumer
//! and hands it over, writable, with the welcome; each consumer writes only its own (a
//! consumer cannot touch another's ledger, nor the arena). It holds, per
//! slot, `released[slot] = seq + 1` for the last batch the consumer released
//! from that slot and `acquired[slot] = seq + 1` for the last batch it began
//! to read there, the consumer's position (the last batch it acquired), its
//! running figures for `batchcast status`, and `evicted`, a generation the
//! producer bumps when it evicts the consumer for falling behind.
//!
//! Eviction is a Dekker handshake on `evicted` and `acquired` (all SeqCst):
//! the consumer marks a slot acquired, *then* reads `evicted`; the producer
//! bumps `evicted`, *then* reads `acquired`. In the single total order of
//! these four operations one side sees the other: either the consumer sees
//! the eviction (and does not read the slot), or the producer sees the
//! acquisition (and keeps the slot out of rotation until it is released).
//! So an evicted consumer's data never changes under its views.
//!
//! The producer reads a ledger only to decide whether that consumer still
//! needs a slot: a consumer that writes nonsense into its own ledger can only
//! lose its own batches (the slot is rewritten under its views) or hold its
//! own slots, which it could do anyway by not releasing them.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;
use crate::region::{Access, Geometry, Kind, Region, RegionOpenError, Shared, Writers};

/// A ledger's fixed part.
#[repr(C)]
pub(crate) struct LedgerHead {
    /// Batches delivered, as the consumer last recorded them.
    delivered: AtomicU64,
    /// Nanoseconds the consumer waited for data, as it last recorded them.
    waited_ns: AtomicU64,
    /// The eviction generation (0: never evicted).
    evicted: AtomicU64,
    /// One past the last batch the consumer began to read.
    position: AtomicU64,
}

// SAFETY: `#[repr(C)]`, atomics only.
unsafe impl Shared for LedgerHead {}

impl Kind for LedgerHead {
    const MAGIC: [u8; 8] = *b"BCLEDGR2";
    const WHAT: &'static str = "ledger";
    const ITEMS: &'static str = "slots";
}

/// A ledger's item: one per slot, `seq + 1` of a batch in that slot.
#[repr(C)]
struct Marks {
    /// The last batch released from the slot.
    released: AtomicU64,
    /// The last batch the consumer began to read there.
    acquired: AtomicU64,
}

// SAFETY: `#[repr(C)]`, atomics only.
unsafe impl Shared for Marks {}

const MARKS: usize = std::mem::size_of::<Marks>();

/// One consumer's ledger, mapped read-write (by the producer, which made
/// it, and by its consumer).
pub struct Ledger {
    region: Region<LedgerHead>,
}

impl Ledger {
    /// Creates a ledger for a window of `slots` slots; returns it and the
    /// descriptor to send to the consumer.
    pub fn create(slots: usize) -> Result<(Ledger, OwnedFd)> {
        let geometry = Geometry {
            items: slots,
            item_size: MARKS,
        };
        let (region, file) = Region::create("batchcast-ledger", geometry, slots, Writers::Anyone)?;
        Ok((Ledger { region }, OwnedFd::from(file)))
    }

    /// Maps the ledger the producer sent, for a window of `slots` slots.
    pub fn open(fd: OwnedFd, slots: usize) -> Result<Ledger, RegionOpenError> {
        let region = Region::open(fd, Access::ReadWrite, Some(slots), MARKS)?;
        Ok(Ledger { region })
    }

    fn head(&self) -> &LedgerHead {
        self.region.fixed()
    }

    fn marks(&self, slot: usize) -> Option<&Marks> {
        self.region.item(slot)
    }

    /// Consumer side: marks batch `seq` in `slot` acquired (about to be
    /// read), records it as the consumer's position, and returns the
    /// eviction generation *read after* the mark: if it differs from the
    /// last one the consumer acted on, it was evicted and must not read the
    /// slot (see the module's documentation).
    pub fn acquire(&self, slot: usize, seq: u64) -> u64 {
        if let Some(m) = self.marks(slot) {
            m.acquired.store(seq + 1, Ordering::SeqCst);
        }
        // SeqCst: a producer waiting for this read sets the board's
        // `awaited_read`, then reads positions; the consumer writes its
        // position, then reads `awaited_read` (see `crate::board`).
        self.head().position.store(seq + 1, Ordering::SeqCst);
        self.head().evicted.load(Ordering::SeqCst)
    }

    /// Producer side: evicts the consumer; returns the new generation. Read
    /// [`Ledger::has_acquired`] only after this.
    pub fn evict(&self) -> u64 {
        self.head().evicted.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Either side: the eviction generation (0: never evicted).
    pub fn evictions(&self) -> u64 {
        self.head().evicted.load(Ordering::SeqCst)
    }

    /// Producer side: has the consumer begun to read batch `seq` in `slot`?
    pub fn has_acquired(&self, slot: usize, seq: u64) -> bool {
        self.marks(slot)
            .is_some_and(|m| m.acquired.load(Ordering::SeqCst) == seq + 1)
    }

    /// Producer side: one past the last batch the consumer began to read (0
    /// before its first). Written by the consumer: a hint for figures and
    /// for choosing whom to evict, never trusted for memory safety.
    pub fn position(&self) -> u64 {
        self.head().position.load(Ordering::SeqCst)
    }

    /// Consumer side: batch `seq` in `slot` is released.
    pub fn release(&self, slot: usize, seq: u64) {
        if let Some(m) = self.marks(slot) {
            m.released.store(seq + 1, Ordering::SeqCst);
        }
    }

    /// Producer side: has the consumer released batch `seq` from `slot`?
    pub fn has_released(&self, slot: usize, seq: u64) -> bool {
        self.marks(slot)
            .is_some_and(|m| m.released.load(Ordering::SeqCst) == seq + 1)
    }

    /// Consumer side: records its running figures.
    pub fn record(&self, delivered: u64, waited_ns: u64) {
        self.head().delivered.store(delivered, Ordering::Relaxed);
        self.head().waited_ns.store(waited_ns, Ordering::Relaxed);
    }

    /// Producer side: the consumer's batches delivered and nanoseconds
    /// spent waiting for data, as it last recorded them.
    pub fn figures(&self) -> (u64, u64) {
        (
            self.head().delivered.load(Ordering::Relaxed),
            self.head().waited_ns.load(Ordering::Relaxed),
        )
    }
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_seen_by_the_producer_for_that_batch_only() {
        let (producer, fd) = Ledger::create(4).unwrap();
        let consumer = Ledger::open(fd, 4).unwrap();
        assert!(!producer.has_released(2, 0));
        consumer.release(2, 7);
        assert!(producer.has_released(2, 7));
        assert!(!producer.has_released(2, 8));
        assert!(!producer.has_released(1, 7));
        // Out-of-range slots are ignored, never a panic.
        consumer.release(99, 1);
        assert!(!producer.has_released(99, 1));
    }

    #[test]
    fn acquisitions_and_positions_are_seen_by_the_producer() {
        let (producer, fd) = Ledger::create(4).unwrap();
        let consumer = Ledger::open(fd, 4).unwrap();
        assert_eq!(consumer.acquire(3, 9), 0);
        assert!(producer.has_acquired(3, 9));
        assert!(!producer.has_acquired(3, 8));
        assert!(!producer.has_acquired(2, 9));
        assert_eq!(producer.position(), 10);
        assert_eq!(producer.evict(), 1);
        assert_eq!(consumer.acquire(0, 10), 1);
        assert_eq!(consumer.evictions(), 1);
        // Acquisitions and releases have words of their own.
        consumer.release(3, 9);
        assert!(producer.has_acquired(3, 9) && producer.has_released(3, 9));
    }

    /// The eviction handshake, raced many times between two threads: in no
    /// run may the consumer miss the eviction (and go on to read the slot)
    /// while the producer misses the acquisition (and rewrites the slot).
    #[test]
    fn eviction_handshake_never_loses_both_sides() {
        use std::sync::{Arc, Barrier};
        for _ in 0..2000 {
            let (producer, fd) = Ledger::create(1).unwrap();
            let consumer = Ledger::open(fd, 1).unwrap();
            let barrier = Arc::new(Barrier::new(2));
            let b = Arc::clone(&barrier);
            let reader = std::thread::spawn(move || {
                b.wait();
                consumer.acquire(0, 5) == 0 // true: reads the slot
            });
            barrier.wait();
            producer.evict();
            let kept = producer.has_acquired(0, 5);
            let read = reader.join().unwrap();
            assert!(
                kept || !read,
                "the consumer read a slot the producer took back"
            );
        }
    }

    #[test]
    fn figures_travel() {
        let (producer, fd) = Ledger::create(1).unwrap();
        let consumer = Ledger::open(fd, 1).unwrap();
        consumer.record(12, 3_000);
        assert_eq!(producer.figures(), (12, 3_000));
    }

    #[test]
    fn a_ledger_for_another_window_is_refused() {
        let (_producer, fd) = Ledger::create(600).unwrap();
        assert!(Ledger::open(fd, 601).is_err());
    }

    #[test]
    fn an_unsealed_file_is_refused() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let err = Ledger::open(OwnedFd::from(file), 1).err().unwrap();
        assert!(matches!(err, RegionOpenError::NotSealed { .. }), "{err}");
    }
}
