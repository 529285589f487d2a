//! SRSF: shortest remaining service (remaining ideal time x GPUs) first,
//! preempting at lease boundaries. The published delay-scheduling
//! simulator's "SRSF" ranks by service received instead: that is `las`.

use super::{ranked_start, Policy};
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
        ranked_start(s, key);
    }
}
