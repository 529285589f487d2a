//! Gandiva-style greedy packing: jobs in arrival order take the tightest
//! placement free right now (best-fit machine, then rack, then anywhere),
//! backfilling what fits. Never waits for locality and never preempts
//! (Gandiva's time-slicing and migration are not modelled).

use super::{greedy_arrival, Policy};
use crate::sched::Sched;

/// Greedy consolidating packing.
pub struct Gandiva;

impl Policy for Gandiva {
    fn name(&self) -> &str {
        "gandiva"
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        greedy_arrival(s, false);
    }
}
