//! What both published models (2953d56's and Dally's) report per job and
//! over time, as their events happen.

use super::events::Lease;
use crate::engine::Sample;
use crate::job::{JobSpec, Locality};
use crate::state::{JobState, Status};

/// Jobs in the order their arrivals are queued (by arrival; ties in trace
/// order).
pub(super) fn arrival_order(jobs: &[JobSpec]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[a].arrival.total_cmp(&jobs[b].arrival));
    order
}

/// A chunk starts at `now` (`origin` the first arrival) on `n` GPUs
/// spanning `level` at throughput fraction `s`, for `secs` seconds.
pub(super) fn chunk_started(
    o: &mut JobState,
    (now, origin): (f64, f64),
    level: Locality,
    secs: f64,
    n: usize,
    s: f64,
) {
    o.first_start.get_or_insert(now - origin);
    if o.status != Status::Running {
        o.queued += now - o.wait_since;
        o.status = Status::Running;
    }
    o.level = level;
    o.widest = o.widest.max(level);
    o.held += secs * n as f64 / o.spec.gpus as f64;
    o.comm += secs * (1.0 - s);
}

/// The job is done at `t`.
pub(super) fn finished(o: &mut JobState, t: f64) {
    o.finish = Some(t);
    o.status = Status::Done;
    o.done = o.spec.iterations;
}

/// The job lost all its GPUs at `t`.
pub(super) fn preempted(o: &mut JobState, t: f64) {
    o.status = Status::Pending;
    o.wait_since = t;
    o.preemptions += 1;
}

/// Adds a point to `timeline` when the leased GPUs or the waiting jobs
/// changed.
pub(super) fn sample(timeline: &mut Vec<Sample>, t: f64, gpus: &[Option<Lease>], pending: usize) {
    let busy = gpus.iter().filter(|g| g.is_some()).count() as u64;
    if timeline
        .last()
        .is_none_or(|s| s.busy != busy || s.pending != pending)
    {
        timeline.push(Sample { t, busy, pending });
    }
}
