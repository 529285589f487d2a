//! SJF: shortest (ideal duration) job first, backfilling what fits. Never
//! preempts. Keeps its own queues by GPU demand, ordered by (duration,
//! arrival, index) and fed by `Policy::arrived` (see `by_demand`).

use super::by_demand::{bits, ByDemand};
use super::Policy;
use crate::sched::Sched;
use crate::state::JobState;

/// Shortest job first.
#[derive(Default)]
pub struct Sjf {
    queues: ByDemand,
}

impl Policy for Sjf {
    fn name(&self) -> &str {
        "sjf"
    }

    fn arrived(&mut self, i: u32, j: &JobState) {
        let key = (bits(j.spec.ideal_duration()), bits(j.spec.arrival), i);
        self.queues.insert(j.spec.gpus, key);
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        self.queues.start_best(s);
    }
}
