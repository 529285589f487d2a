//! Counters of one mirror's copies, shared with whoever shows them.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// What one mirror has copied, readable from any thread while it copies.
#[derive(Debug, Default)]
pub struct MirrorStats {
    bytes: AtomicU64,
    copies: AtomicU64,
    nanos: AtomicU64,
    /// 0: not known yet; 1: the arena is page-locked; 2: pageable copies.
    pinned: AtomicU8,
}

impl MirrorStats {
    /// Bytes copied to the device so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Completed copies so far (one per slot published).
    pub fn copies(&self) -> u64 {
        self.copies.load(Ordering::Relaxed)
    }

    /// Seconds spent in copies, each until it completed (the host fence
    /// included).
    pub fn seconds(&self) -> f64 {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed)).as_secs_f64()
    }

    /// Whether copies come from page-locked host memory: `None` before the
    /// mirror is allocated and for the stand-in, `Some(false)` where
    /// page-locking the arena failed and copies go from pageable memory.
    pub fn pinned(&self) -> Option<bool> {
        match self.pinned.load(Ordering::Relaxed) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }

    pub(crate) fn record_copy(&self, bytes: usize, took: Duration) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.copies.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(crate) fn set_pinned(&self, pinned: bool) {
        self.pinned
            .store(if pinned { 1 } else { 2 }, Ordering::Relaxed);
    }
}
