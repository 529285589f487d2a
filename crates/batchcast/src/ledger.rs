//! A consumer's ledger: where it tells the producer, through shared memory
//! and without a message, which batches it has released.
//!
//! The producer creates one small sealed memfd per consumer and hands it
//! over, writable, with the welcome; each consumer writes only its own (a
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

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};
use crate::shm;

const MAGIC: u64 = u64::from_le_bytes(*b"BCLEDGR1");
const MAGIC_AT: usize = 0;
const SLOTS_AT: usize = 8;
const DELIVERED_AT: usize = 16;
const WAITED_AT: usize = 24;
const EVICTED_AT: usize = 32;
const POSITION_AT: usize = 40;
const RELEASED_AT: usize = 64;

/// One consumer's ledger, mapped read-write (by the producer, which made
/// it, and by its consumer).
pub struct Ledger {
    map: MmapRaw,
    slots: usize,
}

impl Ledger {
    /// Creates a ledger for a window of `slots` slots; returns it and the
    /// descriptor to send to the consumer.
    pub fn create(slots: usize) -> Result<(Ledger, OwnedFd)> {
        let (file, map) = shm::create_sealed("batchcast-ledger", RELEASED_AT + 16 * slots)?;
        let ledger = Ledger { map, slots };
        ledger.word(MAGIC_AT).store(MAGIC, Ordering::Relaxed);
        ledger.word(SLOTS_AT).store(slots as u64, Ordering::Relaxed);
        Ok((ledger, OwnedFd::from(file)))
    }

    /// Maps the ledger the producer sent, for a window of `slots` slots.
    pub fn open(fd: OwnedFd, slots: usize) -> Result<Ledger> {
        let file = File::from(fd);
        let len = shm::file_len(&file)?;
        if len < RELEASED_AT + 16 * slots || !shm::is_sealed(&file) {
            return Err(Error::Protocol(format!(
                "the producer sent a ledger of {len} bytes (unsealed or too small for {slots} slots)"
            )));
        }
        // A shared mapping of the producer's sealed memfd, which cannot
        // shrink under us; its words are accessed only as atomics.
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| Error::io("cannot map the ledger", e))?;
        let ledger = Ledger { map, slots };
        let magic = ledger.word(MAGIC_AT).load(Ordering::Relaxed);
        let announced = ledger.word(SLOTS_AT).load(Ordering::Relaxed);
        if magic != MAGIC || announced != slots as u64 {
            return Err(Error::Protocol(
                "the producer sent a malformed ledger".into(),
            ));
        }
        Ok(ledger)
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        shm::atomic_u64(&self.map, at)
    }

    fn released_word(&self, slot: usize) -> Option<&AtomicU64> {
        (slot < self.slots).then(|| self.word(RELEASED_AT + 8 * slot))
    }

    fn acquired_word(&self, slot: usize) -> Option<&AtomicU64> {
        (slot < self.slots).then(|| self.word(RELEASED_AT + 8 * self.slots + 8 * slot))
    }

    /// Consumer side: marks batch `seq` in `slot` acquired (about to be
    /// read), records it as the consumer's position, and returns the
    /// eviction generation *read after* the mark: if it differs from the
    /// last one the consumer acted on, it was evicted and must not read the
    /// slot (see the module's documentation).
    pub fn acquire(&self, slot: usize, seq: u64) -> u64 {
        if let Some(w) = self.acquired_word(slot) {
            w.store(seq + 1, Ordering::SeqCst);
        }
        // SeqCst: a producer waiting for this read sets the board's
        // `awaited_read`, then reads positions; the consumer writes its
        // position, then reads `awaited_read` (see `crate::board`).
        self.word(POSITION_AT).store(seq + 1, Ordering::SeqCst);
        self.word(EVICTED_AT).load(Ordering::SeqCst)
    }

    /// Producer side: evicts the consumer; returns the new generation. Read
    /// [`Ledger::has_acquired`] only after this.
    pub fn evict(&self) -> u64 {
        self.word(EVICTED_AT).fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Either side: the eviction generation (0: never evicted).
    pub fn evictions(&self) -> u64 {
        self.word(EVICTED_AT).load(Ordering::SeqCst)
    }

    /// Producer side: has the consumer begun to read batch `seq` in `slot`?
    pub fn has_acquired(&self, slot: usize, seq: u64) -> bool {
        self.acquired_word(slot)
            .is_some_and(|w| w.load(Ordering::SeqCst) == seq + 1)
    }

    /// Producer side: one past the last batch the consumer began to read (0
    /// before its first). Written by the consumer: a hint for figures and
    /// for choosing whom to evict, never trusted for memory safety.
    pub fn position(&self) -> u64 {
        self.word(POSITION_AT).load(Ordering::SeqCst)
    }

    /// Consumer side: batch `seq` in `slot` is released.
    pub fn release(&self, slot: usize, seq: u64) {
        if let Some(w) = self.released_word(slot) {
            w.store(seq + 1, Ordering::SeqCst);
        }
    }

    /// Producer side: has the consumer released batch `seq` from `slot`?
    pub fn has_released(&self, slot: usize, seq: u64) -> bool {
        self.released_word(slot)
            .is_some_and(|w| w.load(Ordering::SeqCst) == seq + 1)
    }

    /// Consumer side: records its running figures.
    pub fn record(&self, delivered: u64, waited_ns: u64) {
        self.word(DELIVERED_AT).store(delivered, Ordering::Relaxed);
        self.word(WAITED_AT).store(waited_ns, Ordering::Relaxed);
    }

    /// Producer side: the consumer's batches delivered and nanoseconds
    /// spent waiting for data, as it last recorded them.
    pub fn figures(&self) -> (u64, u64) {
        (
            self.word(DELIVERED_AT).load(Ordering::Relaxed),
            self.word(WAITED_AT).load(Ordering::Relaxed),
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
        assert!(Ledger::open(OwnedFd::from(file), 1).is_err());
    }
}
