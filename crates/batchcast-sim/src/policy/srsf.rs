//! SRSF: shortest remaining service (remaining ideal time x GPUs) first,
//! preempting at lease boundaries.

use super::{all_ranked, preempt_outside, walk_ranked, Policy};
use crate::job::Locality;
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
        walk_ranked(s, order, key, |s, i| {
            s.try_start(i, Locality::Cluster);
        });
    }
}
