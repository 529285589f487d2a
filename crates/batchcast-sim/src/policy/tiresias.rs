//! Tiresias: discretised two-dimensional least-attained-service (2D-LAS).
//! A job's attained service is GPUs x seconds held; thresholds split jobs
//! into priority queues (lower queue first, FIFO by arrival inside one).
//! Decisions are revisited at lease boundaries, preempting running jobs
//! outside the set the queues admit. Placement takes whatever is free,
//! tightest first, without waiting.

use super::RankedByKey;
use crate::sched::Sched;

/// 2D-LAS with discretised queues.
pub struct Tiresias {
    /// Queue thresholds on attained GPU-seconds, ascending.
    pub thresholds: Vec<f64>,
}

impl Default for Tiresias {
    fn default() -> Self {
        Tiresias {
            thresholds: vec![3_600.0, 36_000.0],
        }
    }
}

/// The queue index of attained service `a` under `thresholds`.
pub(crate) fn queue(thresholds: &[f64], a: f64) -> f64 {
    thresholds.iter().filter(|&&t| a >= t).count() as f64
}

impl RankedByKey for Tiresias {
    const NAME: &'static str = "tiresias";

    fn key(&self, s: &Sched<'_>, i: u32) -> (f64, f64) {
        (
            queue(&self.thresholds, s.attained_now(i)),
            s.job(i).spec.arrival,
        )
    }
}
