//! Waiting jobs kept in one ordered queue per GPU demand, for the
//! non-preemptive backfilling policies (SJF, Gandiva). A pass starts, again
//! and again, the best head among the demands no wider than the free GPUs:
//! the same jobs in the same order as walking one queue and skipping what
//! does not fit, without walking past the jobs that cannot fit (which made
//! a long queue cost quadratic time). The preemptive ranking policies keep
//! their waiting jobs here too (see `Ranked`): a job queued again under a
//! new key leaves its old entry stale, skipped when it comes first.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::job::Locality;
use crate::sched::Sched;
use crate::state::Status;

/// An ordering key (two non-negative f64s as bits, which sort as the
/// values) and the job index.
pub(crate) type Key = (u64, u64, u32);

/// `x >= 0` as bits that sort as the values (-0 taken as +0).
pub(crate) fn bits(x: f64) -> u64 {
    (x + 0.0).to_bits()
}

/// Any `x` as bits that sort as `f64::total_cmp` sorts the values.
pub(crate) fn total_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// Waiting jobs by GPU demand, each queue ordered by `Key`.
#[derive(Default)]
pub(crate) struct ByDemand {
    queues: BTreeMap<u32, BTreeSet<Key>>,
    /// Each queued job's newest key; entries under another key are stale.
    current: HashMap<u32, Key>,
}

impl ByDemand {
    /// Queues job `key.2`, which needs `gpus` GPUs.
    pub(crate) fn insert(&mut self, gpus: u32, key: Key) {
        self.current.insert(key.2, key);
        self.queues.entry(gpus).or_default().insert(key);
    }

    /// Starts waiting jobs best key first, backfilling what fits, until the
    /// free GPUs cannot hold the smallest waiting job.
    pub(crate) fn start_best(&mut self, s: &mut Sched<'_>) {
        loop {
            let free = s.free_gpus();
            if free == 0 || free < s.smallest_demand() {
                return;
            }
            let widest = free.min(u32::MAX as u64) as u32;
            let best = self
                .queues
                .range(..=widest)
                .filter_map(|(&g, q)| q.first().map(|&k| (k, g)))
                .min();
            let Some((k, g)) = best else { return };
            let i = k.2;
            let newest = self.current.get(&i) == Some(&k);
            // A pending job no wider than the free GPUs always fits
            // somewhere at cluster level; should placement ever refuse it,
            // the pass ends rather than spin.
            if newest
                && s.job(i).status == Status::Pending
                && s.try_start(i, Locality::Cluster).is_none()
            {
                return;
            }
            if newest {
                self.current.remove(&i);
            }
            if let Some(q) = self.queues.get_mut(&g) {
                q.remove(&k);
                if q.is_empty() {
                    self.queues.remove(&g);
                }
            }
        }
    }
}
