//! Per-slot counts of outstanding holders, so that only the last consumer
//! to release a slot wakes a blocked producer.
//!
//! A small sealed memfd that the producer and every consumer map writable:
//! one `u32` per slot. The producer sets a slot's count to the number of
//! consumers its batch is published to (and adds one for a catch-up joiner);
//! each consumer decrements it when it releases the batch, after writing the
//! release in its ledger. The consumer that takes the count to zero is the
//! last holder: it alone sends the `Released` wake-up, and only when the
//! board says the producer waits (the same Dekker order as before, see
//! `crate::board`: ledger, count and flag are all SeqCst).
//!
//! The counts are a hint, never the truth: the producer decides which slot
//! is free from the ledgers alone. A consumer that corrupts the counts (they
//! are writable by every consumer) can only suppress or add wake-ups; a
//! suppressed one costs the blocked producer at most its 100 ms tick, never
//! data. A count that is already zero (corrupted, or its holder was evicted)
//! makes the releaser wake the producer, as before this file existed.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};
use crate::shm;

/// The producer's side.
pub struct Holds {
    file: File,
    map: MmapRaw,
    slots: usize,
}

impl Holds {
    /// Counts for `slots` slots, all zero.
    pub fn create(slots: usize) -> Result<Holds> {
        let (file, map) = shm::create_sealed("batchcast-holds", 4 * slots.max(1))?;
        Ok(Holds { file, map, slots })
    }

    /// A descriptor to send to consumers (they map it writable).
    pub fn share_fd(&self) -> Result<OwnedFd> {
        self.file
            .try_clone()
            .map(OwnedFd::from)
            .map_err(|e| Error::io("cannot share the holder counts", e))
    }

    fn count(&self, slot: usize) -> Option<&AtomicU32> {
        (slot < self.slots).then(|| shm::atomic_u32(&self.map, 4 * slot))
    }

    /// Sets slot `slot`'s count (at publish, before the batch is visible).
    pub fn set(&self, slot: usize, holders: usize) {
        if let Some(c) = self.count(slot) {
            c.store(holders.try_into().unwrap_or(u32::MAX), Ordering::SeqCst);
        }
    }

    /// One more holder of slot `slot` (a catch-up joiner).
    pub fn add(&self, slot: usize) {
        if let Some(c) = self.count(slot) {
            c.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// One holder fewer, without a release (it died or was evicted).
    pub fn forget(&self, slot: usize) {
        if let Some(c) = self.count(slot) {
            let _ = c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    /// The count of slot `slot`.
    #[cfg(test)]
    pub fn get(&self, slot: usize) -> u32 {
        self.count(slot).map_or(0, |c| c.load(Ordering::SeqCst))
    }
}

/// A consumer's side.
pub struct HoldsView {
    map: MmapRaw,
    slots: usize,
}

impl HoldsView {
    /// Maps the counts the producer sent, for `slots` slots.
    pub fn open(fd: OwnedFd, slots: usize) -> Result<HoldsView> {
        let file = File::from(fd);
        let len = shm::file_len(&file)?;
        if len < 4 * slots || !shm::is_sealed(&file) {
            return Err(Error::Protocol(format!(
                "the producer sent holder counts of {len} bytes (unsealed or too small for \
                 {slots} slots)"
            )));
        }
        // A shared mapping of the producer's sealed memfd, which cannot
        // shrink under us; its words are accessed only as atomics.
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| Error::io("cannot map the holder counts", e))?;
        Ok(HoldsView { map, slots })
    }

    /// Counts one release of slot `slot` (already written in the ledger);
    /// true when this was the last holder, or the count is unusable, so
    /// that the caller should wake a waiting producer.
    pub fn release(&self, slot: usize) -> bool {
        if slot >= self.slots {
            return true;
        }
        let count = shm::atomic_u32(&self.map, 4 * slot);
        match count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
            Ok(before) => before == 1,
            Err(_) => true,
        }
    }
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holds").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_release_reports_last() {
        let holds = Holds::create(4).unwrap();
        let view = HoldsView::open(holds.share_fd().unwrap(), 4).unwrap();
        holds.set(2, 3);
        assert!(!view.release(2));
        assert!(!view.release(2));
        assert!(view.release(2));
        assert_eq!(holds.get(2), 0);
        // A count already at zero (corrupt, or a holder evicted) wakes.
        assert!(view.release(2));
        assert!(view.release(99));
    }

    #[test]
    fn joiners_and_departures_adjust_the_count() {
        let holds = Holds::create(1).unwrap();
        let view = HoldsView::open(holds.share_fd().unwrap(), 1).unwrap();
        holds.set(0, 1);
        holds.add(0);
        holds.forget(0);
        assert!(view.release(0));
        holds.forget(0);
        assert_eq!(holds.get(0), 0);
    }
}
