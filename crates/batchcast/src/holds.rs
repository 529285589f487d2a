//! Per-slot counts of outstanding holders, so that only the last consumer
//! to release a slot wakes a blocked producer.
//!
//! A small region (`crate::region`) that the producer and every consumer
//! map writable: one `u32` per slot. The producer sets a slot's count to
//! the number of consumers its batch is published to (and adds one for a
//! catch-up joiner); each consumer decrements it when it releases the
//! batch, after writing the release in its ledger. The consumer that takes
//! the count to zero is the last holder: it alone sends the `Released`
//! wake-up, and only when the board says the producer waits (the Dekker
//! order of `crate::board`: ledger, count and flag are all SeqCst).
//!
//! The counts are a hint, never the truth: the producer decides which slot
//! is free from the ledgers alone. A consumer that corrupts the counts (they
//! are writable by every consumer, the region's header included: counts
//! that do not validate are not used, and every release wakes) can only
//! suppress or add wake-ups; a suppressed one costs the blocked producer at
//! most its 100 ms tick, never data. A count that is already zero
//! (corrupted, or its holder was evicted) makes the releaser wake the
//! producer.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};
use crate::region::{Access, Geometry, Kind, Region, Shared, Writers};
use crate::warn::Warn;

/// The holder counts' fixed part: nothing; the items are the counts
/// (`AtomicU32`, one per slot).
#[repr(C)]
pub(crate) struct HoldsHead {}

// SAFETY: `#[repr(C)]`, empty.
unsafe impl Shared for HoldsHead {}

impl Kind for HoldsHead {
    const MAGIC: [u8; 8] = *b"BCHOLDS2";
    const WHAT: &'static str = "holder counts";
    const ITEMS: &'static str = "slots";
    fn item_align() -> usize {
        COUNT
    }
}

const COUNT: usize = std::mem::size_of::<AtomicU32>();

/// The producer's side.
pub struct Holds {
    file: File,
    region: Region<HoldsHead>,
}

impl Holds {
    /// Counts for `slots` slots, all zero.
    pub fn create(slots: usize) -> Result<Holds> {
        let geometry = Geometry {
            items: slots,
            item_size: COUNT,
        };
        let (region, file) = Region::create("batchcast-holds", geometry, slots, Writers::Anyone)?;
        Ok(Holds { file, region })
    }

    /// A descriptor to send to consumers (they map it writable).
    pub fn share_fd(&self) -> Result<OwnedFd> {
        self.file
            .try_clone()
            .map(OwnedFd::from)
            .map_err(|e| Error::io("cannot share the holder counts", e))
    }

    fn count(&self, slot: usize) -> Option<&AtomicU32> {
        self.region.item(slot)
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
    /// `None` when the counts did not validate: every release wakes.
    region: Option<Region<HoldsHead>>,
}

impl HoldsView {
    /// Maps the counts the producer sent, for `slots` slots. Every consumer
    /// writes this region, its header included, so one that does not
    /// validate (spoiled by a consumer, or not sealed: then it is not
    /// mapped) costs wake-ups, never the connection: every release of a
    /// view without counts wakes a waiting producer. That degraded mode is
    /// reported once, through `warn`, with the reason.
    pub fn open(fd: OwnedFd, slots: usize, warn: &Warn) -> HoldsView {
        let region = match Region::open(fd, Access::ReadWrite, Some(slots), COUNT) {
            Ok(r) => Some(r),
            Err(e) => {
                warn.emit(&format!(
                    "the holder counts are unusable ({e}); this consumer still reads, but \
                     each of its releases wakes the producer"
                ));
                None
            }
        };
        HoldsView { region }
    }

    /// Counts one release of slot `slot` (already written in the ledger);
    /// true when this was the last holder, or the count is unusable, so
    /// that the caller should wake a waiting producer.
    pub fn release(&self, slot: usize) -> bool {
        let count = self.region.as_ref().and_then(|r| r.item::<AtomicU32>(slot));
        let Some(count) = count else {
            return true;
        };
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
        let view = HoldsView::open(holds.share_fd().unwrap(), 4, &Warn::default());
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
        let view = HoldsView::open(holds.share_fd().unwrap(), 1, &Warn::default());
        holds.set(0, 1);
        holds.add(0);
        holds.forget(0);
        assert!(view.release(0));
        holds.forget(0);
        assert_eq!(holds.get(0), 0);
    }

    #[test]
    fn a_header_spoiled_by_a_consumer_costs_wake_ups_not_joins() {
        let holds = Holds::create(2).unwrap();
        holds.set(0, 2);
        // Every consumer maps the counts writable: one rewrites the header's
        // first word (the magic).
        let header = holds.region.map().as_mut_ptr().cast::<u64>();
        // SAFETY: the header's first word, inside the mapping, 8-aligned; no
        // reference to it is alive.
        unsafe { header.write_volatile(0) };
        let (warn, warnings) = Warn::kept();
        let late = HoldsView::open(holds.share_fd().unwrap(), 2, &warn);
        assert!(late.region.is_none());
        {
            let w = warnings.lock().unwrap();
            assert_eq!(w.len(), 1, "{w:?}");
            assert!(
                w[0].contains("holder counts") && w[0].contains("each of its releases wakes"),
                "{w:?}"
            );
        }
        assert!(late.release(0), "without counts, every release wakes");
        assert_eq!(holds.get(0), 2);
        // An unsealed file is not mapped at all.
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        assert!(HoldsView::open(OwnedFd::from(file), 1, &warn)
            .region
            .is_none());
        assert_eq!(warnings.lock().unwrap().len(), 2);
    }
}
