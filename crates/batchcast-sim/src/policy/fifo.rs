//! FIFO: jobs start in arrival order; the first that does not fit blocks
//! those behind it (no backfilling). Never preempts.

use super::{greedy_arrival, Policy};
use crate::sched::Sched;

/// First in, first out.
pub struct Fifo;

impl Policy for Fifo {
    fn name(&self) -> &str {
        "fifo"
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        greedy_arrival(s, true);
    }
}
