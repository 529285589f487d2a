//! SJF: shortest (ideal duration) job first, backfilling what fits. Never
//! preempts. Keeps its own queues, one per GPU demand, each ordered by
//! (duration, arrival, index) and fed by `Policy::arrived`: the next job to
//! start is the best head among the demands no wider than the free GPUs,
//! so a pass never walks past waiting jobs that cannot fit (which made a
//! long queue cost quadratic time).

use std::collections::{BTreeMap, BTreeSet};

use super::Policy;
use crate::job::Locality;
use crate::sched::Sched;
use crate::state::{JobState, Status};

/// (duration bits, arrival bits, job): non-negative f64 bits sort as the values.
type Key = (u64, u64, u32);

/// Shortest job first.
#[derive(Default)]
pub struct Sjf {
    /// Waiting jobs by GPU demand.
    queues: BTreeMap<u32, BTreeSet<Key>>,
}

impl Policy for Sjf {
    fn name(&self) -> &str {
        "sjf"
    }

    fn arrived(&mut self, i: u32, j: &JobState) {
        self.queues.entry(j.spec.gpus).or_default().insert((
            j.spec.ideal_duration().to_bits(),
            j.spec.arrival.to_bits(),
            i,
        ));
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
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
            // A pending job no wider than the free GPUs always fits
            // somewhere at cluster level; should placement ever refuse it,
            // the pass ends rather than spin.
            if s.job(i).status == Status::Pending && s.try_start(i, Locality::Cluster).is_none() {
                return;
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
