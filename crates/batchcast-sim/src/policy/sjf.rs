//! SJF: shortest (ideal duration) job first, backfilling what fits. Never
//! preempts.

use super::{greedy, rank_by, Policy};
use crate::sched::Sched;

/// Shortest job first.
pub struct Sjf;

impl Policy for Sjf {
    fn name(&self) -> &str {
        "sjf"
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        let mut order = s.pending_fitting();
        rank_by(&mut order, |i| {
            (s.job(i).spec.ideal_duration(), s.job(i).spec.arrival)
        });
        greedy(s, &order, false);
    }
}
