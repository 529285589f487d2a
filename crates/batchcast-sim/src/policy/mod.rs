//! Scheduling policies, one per file, behind the `Policy` trait.
//!
//! A policy is asked to decide at every instant something happened
//! (arrival, finish, lease boundary, a timer it asked for). It starts
//! pending jobs with `Sched::try_start` and, at lease boundaries, may
//! preempt running ones with `Sched::preempt`.

mod by_demand;
mod dally;
mod fifo;
mod gandiva;
mod las;
mod sjf;
mod srsf;
mod tiresias;
mod tuner;

pub use dally::{Dally, DallyConfig};
pub use fifo::Fifo;
pub use gandiva::Gandiva;
pub use las::Las;
pub use sjf::Sjf;
pub use srsf::Srsf;
pub use tiresias::Tiresias;
pub use tuner::Tuner;

use std::collections::HashSet;

use by_demand::{total_bits, ByDemand};

use crate::error::SimError;
use crate::job::Locality;
use crate::sched::Sched;
use crate::state::Status;

/// A scheduling policy.
pub trait Policy {
    /// Its name in tables (`fifo`, `dally`, ...).
    fn name(&self) -> &str;
    /// Whether it preempts (and so needs lease rounds).
    fn preemptive(&self) -> bool {
        false
    }
    /// Job `i` was submitted (called before the instant's decision).
    fn arrived(&mut self, _i: u32, _job: &crate::state::JobState) {}
    /// Decides at one instant.
    fn schedule(&mut self, s: &mut Sched<'_>);
}

/// The policies `by_name` knows.
pub const NAMES: [&str; 7] = ["fifo", "sjf", "srsf", "las", "tiresias", "gandiva", "dally"];

/// A policy with default parameters by name.
pub fn by_name(name: &str) -> Result<Box<dyn Policy>, SimError> {
    Ok(match name {
        "fifo" => Box::new(Fifo),
        "sjf" => Box::new(Sjf::default()),
        "srsf" => Box::new(Srsf),
        "las" => Box::new(Las),
        "tiresias" => Box::new(Tiresias::default()),
        "gandiva" => Box::new(Gandiva::default()),
        "dally" => Box::new(Dally::new(DallyConfig::default())),
        other => {
            return Err(SimError::Config(format!(
                "unknown policy {other:?}; pick from {}",
                NAMES.join(", ")
            )))
        }
    })
}

/// Starts waiting jobs in arrival order without copying the queue;
/// `strict` stops at the first that does not fit.
pub(crate) fn greedy_arrival(s: &mut Sched<'_>, strict: bool) {
    for k in 0..s.pending_len() {
        if s.free_gpus() == 0 || s.free_gpus() < s.smallest_demand() {
            return;
        }
        let i = s.pending_at(k);
        if s.job(i).status == crate::state::Status::Pending
            && s.try_start(i, Locality::Cluster).is_none()
            && strict
        {
            return;
        }
    }
}

/// Lease-round preemption: keeps the best-ranked jobs (pending and running,
/// `ranked` best first) whose GPU demands fit in the cluster together, and
/// preempts running jobs outside that set. Returns the preempted jobs.
pub(crate) fn preempt_outside(s: &mut Sched<'_>, ranked: &[u32]) -> Vec<u32> {
    let mut room = s.spec().total_gpus();
    let mut out = Vec::new();
    for &i in ranked {
        let g = s.job(i).spec.gpus as u64;
        if g <= room {
            room -= g;
        } else if s.preempt(i) {
            out.push(i);
        }
    }
    out
}

/// A job with its ranking key.
type Keyed = ((f64, f64), u32);

/// The ranking order: by key, ties by index (so deterministic).
fn by_key(a: &Keyed, b: &Keyed) -> std::cmp::Ordering {
    a.0 .0
        .total_cmp(&b.0 .0)
        .then(a.0 .1.total_cmp(&b.0 .1))
        .then(a.1.cmp(&b.1))
}

/// Sorts `jobs` by `key` (ties by index, so deterministic).
pub(crate) fn rank_by(jobs: &mut [u32], key: impl Fn(u32) -> (f64, f64)) {
    let mut keyed: Vec<Keyed> = jobs.iter().map(|&i| (key(i), i)).collect();
    keyed.sort_by(by_key);
    for (slot, (_, i)) in jobs.iter_mut().zip(keyed) {
        *slot = i;
    }
}

/// One round of a preemptive ranking policy: at a lease boundary, the
/// running jobs ranked outside what fits are preempted
/// ([`preempt_outside`]); then the waiting jobs that fit, bar those just
/// preempted, are visited best first ([`walk_ranked`]).
pub(crate) fn preemptive_round(
    s: &mut Sched<'_>,
    key: impl Fn(&Sched<'_>, u32) -> (f64, f64),
    visit: impl FnMut(&mut Sched<'_>, u32),
) {
    let mut out = Vec::new();
    if s.lease_boundary() {
        let ranked = all_ranked(s, |i| key(s, i));
        out = preempt_outside(s, &ranked);
    }
    let out: HashSet<u32> = out.into_iter().collect();
    let mut order = s.pending_fitting();
    order.retain(|i| !out.contains(i));
    walk_ranked(s, order, key, visit);
}

/// The waiting jobs of a preemptive ranking policy that starts the best
/// that fit at cluster level (SRSF, LAS, Tiresias), kept ranked between
/// lease boundaries (the simulation holds them; see [`ranked_round`]).
#[derive(Default)]
pub(crate) struct Ranked {
    queues: ByDemand,
    /// Arrived since the last pass, not yet keyed.
    arrived: Vec<u32>,
}

impl Ranked {
    /// Job `i` was submitted.
    pub(crate) fn arrived(&mut self, i: u32) {
        self.arrived.push(i);
    }
}

/// One round of a preemptive ranking policy that starts the best waiting
/// jobs that fit at cluster level: at a lease boundary
/// [`preemptive_round`]; between boundaries the best heads of the ranked
/// waiting jobs ([`ByDemand::start_best`]), the same jobs in the same order
/// as ranking the whole queue, at a cost that does not grow with the queue.
/// A waiting job holds no GPUs, so its key does not change while it waits;
/// the jobs a boundary preempts are queued again under their new keys.
pub(crate) fn ranked_round(s: &mut Sched<'_>, key: impl Fn(&Sched<'_>, u32) -> (f64, f64)) {
    let queue = |r: &mut Ranked, s: &Sched<'_>, i: u32| {
        let (a, b) = key(s, i);
        r.queues
            .insert(s.job(i).spec.gpus, (total_bits(a), total_bits(b), i));
    };
    let mut r = match s.ranked_mut().take() {
        Some(r) => r,
        None => Ranked {
            arrived: s.pending(),
            ..Ranked::default()
        },
    };
    for i in std::mem::take(&mut r.arrived) {
        if s.job(i).status == Status::Pending {
            queue(&mut r, s, i);
        }
    }
    if s.lease_boundary() {
        let was_running = s.running();
        preemptive_round(s, &key, |s, i| {
            s.try_start(i, Locality::Cluster);
        });
        for i in was_running {
            if s.job(i).status == Status::Pending {
                queue(&mut r, s, i);
            }
        }
    } else {
        r.queues.start_best(s);
    }
    *s.ranked_mut() = Some(r);
}

/// Walks `jobs` best-first by `key`, calling `visit` on each until the free
/// GPUs cannot hold the smallest waiting job. Only the best few are sorted
/// (at most a few per free GPU can start); the rest is sorted only if the
/// walk gets that far, so the order visited is exactly the full ranking's.
pub(crate) fn walk_ranked(
    s: &mut Sched<'_>,
    jobs: Vec<u32>,
    key: impl Fn(&Sched<'_>, u32) -> (f64, f64),
    mut visit: impl FnMut(&mut Sched<'_>, u32),
) {
    let cmp = by_key;
    let mut keyed: Vec<Keyed> = jobs.into_iter().map(|i| (key(s, i), i)).collect();
    let head = (4 * s.free_gpus() as usize + 64).min(keyed.len());
    if head < keyed.len() && head > 0 {
        keyed.select_nth_unstable_by(head - 1, cmp);
    }
    keyed[..head].sort_unstable_by(cmp);
    let mut sorted_tail = false;
    for k in 0..keyed.len() {
        if k == head && !sorted_tail {
            keyed[head..].sort_unstable_by(cmp);
            sorted_tail = true;
        }
        if s.free_gpus() == 0 || s.free_gpus() < s.smallest_demand() {
            return;
        }
        visit(s, keyed[k].1);
    }
}

/// Pending then running jobs, ranked by `key`.
pub(crate) fn all_ranked(s: &Sched<'_>, key: impl Fn(u32) -> (f64, f64)) -> Vec<u32> {
    let mut all = s.pending();
    all.extend(s.running());
    rank_by(&mut all, key);
    all
}

#[cfg(test)]
mod ranked_tests;
