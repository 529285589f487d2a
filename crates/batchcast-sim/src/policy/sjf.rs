//! SJF: shortest (ideal duration) job first, backfilling what fits. Never
//! preempts. Keeps its own queue ordered by (duration, arrival, index), fed
//! by `Policy::arrived`, so a pass reads only the head of the queue.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::Policy;
use crate::job::Locality;
use crate::sched::Sched;
use crate::state::{JobState, Status};

/// (duration bits, arrival bits, job): non-negative f64 bits sort as the values.
type Key = (u64, u64, u32);

/// Shortest job first.
#[derive(Default)]
pub struct Sjf {
    queue: BTreeSet<Key>,
}

impl Policy for Sjf {
    fn name(&self) -> &str {
        "sjf"
    }

    fn arrived(&mut self, i: u32, j: &JobState) {
        self.queue.insert((
            j.spec.ideal_duration().to_bits(),
            j.spec.arrival.to_bits(),
            i,
        ));
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        let mut cursor: Option<Key> = None;
        loop {
            let batch: Vec<Key> = match cursor {
                None => self.queue.iter().take(256).copied().collect(),
                Some(c) => self
                    .queue
                    .range((Bound::Excluded(c), Bound::Unbounded))
                    .take(256)
                    .copied()
                    .collect(),
            };
            if batch.is_empty() {
                return;
            }
            for e in batch {
                if s.free_gpus() == 0 || s.free_gpus() < s.smallest_demand() {
                    return;
                }
                cursor = Some(e);
                let i = e.2;
                if s.job(i).status != Status::Pending || s.try_start(i, Locality::Cluster).is_some()
                {
                    self.queue.remove(&e);
                }
            }
        }
    }
}
