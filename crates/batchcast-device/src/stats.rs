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
    /// Copies by how long each took: bucket `4t + f` counts durations of
    /// `2^t (1 + f/4)` to `2^t (1 + (f+1)/4)` ns (each octave in four,
    /// so a bucket is at most 25 % wide).
    latency: Latency,
}

/// A histogram of copy durations, each octave in four buckets.
#[derive(Debug)]
struct Latency([AtomicU64; BUCKETS]);

const BUCKETS: usize = 256;

impl Default for Latency {
    fn default() -> Self {
        Latency(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

fn bucket(nanos: u64) -> usize {
    if nanos == 0 {
        return 0;
    }
    // The octave from the top bit, the quarter from the two bits after it.
    let top = 63 - nanos.leading_zeros() as usize;
    let frac = if top >= 2 {
        ((nanos >> (top - 2)) & 3) as usize
    } else {
        ((nanos << (2 - top)) & 3) as usize
    };
    (top * 4 + frac).min(BUCKETS - 1)
}

/// The upper end of bucket `k`, in seconds.
fn bucket_end(k: usize) -> f64 {
    let (octave, quarter) = (k / 4, k % 4);
    2f64.powi(octave as i32) * (5 + quarter) as f64 / 4.0 / 1e9
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

    /// The `q` quantile (0 to 1) of the copies' durations in seconds, to
    /// within 25 % (the upper end of its histogram bucket); `None` before
    /// the first copy.
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let counts: Vec<u64> = self
            .latency
            .0
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (k, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bucket_end(k));
            }
        }
        Some(bucket_end(BUCKETS - 1))
    }

    pub(crate) fn record_copy(&self, bytes: usize, took: Duration) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.copies.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.latency.0[bucket(nanos)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_pinned(&self, pinned: bool) {
        self.pinned
            .store(if pinned { 1 } else { 2 }, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_copies_recorded() {
        let stats = MirrorStats::default();
        assert_eq!(stats.latency_quantile(0.5), None);
        for _ in 0..98 {
            stats.record_copy(1, Duration::from_micros(100));
        }
        stats.record_copy(1, Duration::from_millis(10));
        stats.record_copy(1, Duration::from_millis(10));
        let p50 = stats.latency_quantile(0.5).unwrap();
        let p99 = stats.latency_quantile(0.99).unwrap();
        assert!((100e-6..=100e-6 * 1.25).contains(&p50), "{p50}");
        assert!((10e-3..=10e-3 * 1.25).contains(&p99), "{p99}");
        assert_eq!(stats.copies(), 100);
    }

    #[test]
    fn buckets_grow_by_quarter_octaves_and_stay_in_range() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(1024), 40);
        assert_eq!(bucket(u64::MAX), 255);
        for n in [1u64, 3, 7, 100, 12_345, 1 << 40] {
            let end = bucket_end(bucket(n)) * 1e9;
            assert!(
                end >= n as f64 && end <= n as f64 * 1.25 + 2.0,
                "{n}: {end}"
            );
        }
    }
}
