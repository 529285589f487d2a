//! A consumer's ledger: where it tells the producer, through shared memory
//! and without a message, which batches it has released.
//!
//! The producer creates one small sealed memfd per consumer and hands it
//! over, writable, with the welcome; each consumer writes only its own (a
//! consumer cannot touch another's ledger, nor the arena). It holds, per
//! slot, `released[slot] = seq + 1` for the last batch the consumer released
//! from that slot, and the consumer's running figures for `batchcast
//! status`.
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
        let (file, map) = shm::create_sealed("batchcast-ledger", RELEASED_AT + 8 * slots)?;
        let ledger = Ledger { map, slots };
        ledger.word(MAGIC_AT).store(MAGIC, Ordering::Relaxed);
        ledger.word(SLOTS_AT).store(slots as u64, Ordering::Relaxed);
        Ok((ledger, OwnedFd::from(file)))
    }

    /// Maps the ledger the producer sent, for a window of `slots` slots.
    pub fn open(fd: OwnedFd, slots: usize) -> Result<Ledger> {
        let file = File::from(fd);
        let len = shm::file_len(&file)?;
        if len < RELEASED_AT + 8 * slots || !shm::is_sealed(&file) {
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
