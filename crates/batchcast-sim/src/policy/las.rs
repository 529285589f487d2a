//! LAS: least attained service first, preempting at lease boundaries; the
//! policy the published delay-scheduling simulator (aakash-sharma/
//! cluster-sim) calls "SRSF". Service is the work done, in seconds of one
//! GPU (iterations done x time per iteration on one GPU, as its
//! `SRSFIntraJobScheduler` bids), so a badly placed job is not charged
//! for its slowdown; ties go to the earlier arrival. Unlike the published
//! simulator, GPUs are given to a job all at once (gang scheduling), not
//! one by one through per-GPU bids.

use super::RankedByKey;
use crate::sched::Sched;

/// Least attained service (the published simulator's "SRSF").
pub struct Las;

impl RankedByKey for Las {
    const NAME: &'static str = "las";

    fn key(&self, s: &Sched<'_>, i: u32) -> (f64, f64) {
        let j = s.job(i);
        let done = j.spec.ideal_duration() - s.remaining_now(i);
        (done * j.spec.gpus as f64, j.spec.arrival)
    }
}
