//! SJF: shortest (ideal duration) job first, backfilling what fits. Never
//! preempts.

use super::{walk_ranked, Policy};
use crate::job::Locality;
use crate::sched::Sched;

/// Shortest job first.
pub struct Sjf;

impl Policy for Sjf {
    fn name(&self) -> &str {
        "sjf"
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        let order = s.pending_fitting();
        let key = |s: &Sched<'_>, i: u32| (s.job(i).spec.ideal_duration(), s.job(i).spec.arrival);
        walk_ranked(s, order, key, |s, i| {
            s.try_start(i, Locality::Cluster);
        });
    }
}
