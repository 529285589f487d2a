//! Gandiva-style greedy packing: jobs in arrival order take the tightest
//! placement free right now (best-fit machine, then rack, then anywhere),
//! backfilling what fits. Never waits for locality and never preempts
//! (Gandiva's time-slicing and migration are not modelled). Keeps its own
//! queues by GPU demand, ordered by (arrival, index) (see `by_demand`).

use super::by_demand::{bits, ByDemand};
use super::Policy;
use crate::sched::Sched;
use crate::state::JobState;

/// Greedy consolidating packing.
#[derive(Default)]
pub struct Gandiva {
    queues: ByDemand,
}

impl Policy for Gandiva {
    fn name(&self) -> &str {
        "gandiva"
    }

    fn arrived(&mut self, i: u32, j: &JobState) {
        self.queues
            .insert(j.spec.gpus, (bits(j.spec.arrival), 0, i));
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        self.queues.start_best(s);
    }
}
