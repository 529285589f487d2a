//! SRSF: shortest remaining service (remaining ideal time x GPUs) first,
//! preempting at lease boundaries.

use super::{all_ranked, greedy, preempt_outside, rank_by, Policy};
use crate::sched::Sched;

/// Shortest remaining service first.
pub struct Srsf;

impl Policy for Srsf {
    fn name(&self) -> &str {
        "srsf"
    }

    fn preemptive(&self) -> bool {
        true
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        let key = |s: &Sched<'_>, i: u32| {
            (
                s.remaining_now(i) * s.job(i).spec.gpus as f64,
                s.job(i).spec.arrival,
            )
        };
        let mut out = Vec::new();
        if s.lease_boundary() {
            let ranked = all_ranked(s, |i| key(s, i));
            out = preempt_outside(s, &ranked);
        }
        let mut order = s.pending_fitting();
        order.retain(|i| !out.contains(i));
        rank_by(&mut order, |i| key(s, i));
        greedy(s, &order, false);
    }
}
