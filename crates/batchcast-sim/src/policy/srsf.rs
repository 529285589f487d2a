//! SRSF: shortest remaining service (remaining ideal time x GPUs) first,
//! preempting at lease boundaries. The published delay-scheduling
//! simulator's "SRSF" ranks by service received instead: that is `las`.

use super::RankedByKey;
use crate::sched::Sched;

/// Shortest remaining service first.
pub struct Srsf;

impl RankedByKey for Srsf {
    const NAME: &'static str = "srsf";

    fn key(&self, s: &Sched<'_>, i: u32) -> (f64, f64) {
        (
            s.remaining_now(i) * s.job(i).spec.gpus as f64,
            s.job(i).spec.arrival,
        )
    }
}
