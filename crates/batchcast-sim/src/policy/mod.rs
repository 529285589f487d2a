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

use std::collections::{BTreeMap, HashSet};

use by_demand::{total_bits, ByDemand, Key, Reach};

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

/// The waiting jobs of a preemptive ranking policy (SRSF, LAS, Tiresias,
/// Dally), kept ranked between passes (the simulation holds them; see
/// [`ranked_round`]).
#[derive(Default)]
pub(crate) struct Ranked {
    queues: ByDemand,
    /// Arrived since the last pass, not yet keyed.
    arrived: Vec<u32>,
    /// With `young_for`: the jobs queued less than that long ago, by
    /// (queued at, index), to the time they were queued (entries of jobs
    /// queued again since, or started, are stale).
    young: BTreeMap<(u64, u32), f64>,
}

impl Ranked {
    /// Job `i` was submitted.
    pub(crate) fn arrived(&mut self, i: u32) {
        self.arrived.push(i);
    }
}

/// One round of a preemptive ranking policy, ranking by `key` (lower
/// first, ties by index). At a lease boundary the running jobs ranked
/// outside the best set that fits in the cluster are preempted
/// ([`ByDemand::preempt_outside`]); then the waiting jobs that fit in the
/// free GPUs, bar those just preempted, are visited best first
/// ([`ByDemand::walk`]) until the free GPUs cannot hold the smallest
/// waiting job. A waiting job holds no GPUs, so its key does not change
/// while it waits: waiting jobs stay ranked between rounds, keyed once when
/// they arrive and again when a boundary preempts them, and a round reads
/// only the few it may start or that rank ahead of a running job, in the
/// order of ranking them all (a test holds it to that schedule). Jobs wider
/// than the GPUs free at their turn are passed over; with `young_for`, those
/// of them that have waited less than `young_for` seconds (a `visit` to an
/// older one that cannot fit must do nothing) are visited after the walk,
/// best first, so every job a full walk would have visited is visited, at
/// a cost of the young jobs rather than the whole queue.
pub(crate) fn ranked_round(
    s: &mut Sched<'_>,
    key: impl Fn(&Sched<'_>, u32) -> (f64, f64),
    young_for: Option<f64>,
    mut visit: impl FnMut(&mut Sched<'_>, u32),
) {
    let keyed = |s: &Sched<'_>, i: u32| {
        let (a, b) = key(s, i);
        (total_bits(a), total_bits(b), i)
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
            r.queue(s, i, keyed(s, i), young_for.is_some());
        }
    }
    let mut out = Vec::new();
    if s.lease_boundary() {
        let mut running: Vec<(Key, u32)> = s
            .running()
            .into_iter()
            .map(|i| (keyed(s, i), s.job(i).spec.gpus))
            .collect();
        running.sort_unstable();
        out = r.queues.preempt_outside(s, &running);
        for &i in &out {
            r.queues.forget(i);
        }
    }
    let reach = r.queues.walk(s, &mut visit);
    if let Some(longest) = young_for {
        for i in r.passed_over(s, &reach, longest) {
            visit(s, i);
        }
    }
    for i in out {
        if s.job(i).status == Status::Pending {
            r.queue(s, i, keyed(s, i), young_for.is_some());
        }
    }
    *s.ranked_mut() = Some(r);
}

impl Ranked {
    /// Queues waiting job `i` under `key` (and, with `young`, among the
    /// young jobs).
    fn queue(&mut self, s: &Sched<'_>, i: u32, key: Key, young: bool) {
        let j = s.job(i);
        self.queues.insert(j.spec.gpus, key);
        if young {
            self.young
                .insert((total_bits(j.wait_since), i), j.wait_since);
        }
    }

    /// The jobs a walk that read every job no wider than the GPUs free at
    /// its start would have visited beyond those `reach` visited, bar those
    /// that have waited `longest` seconds or more, best first. Drops the
    /// entries of jobs that have waited that long.
    fn passed_over(&mut self, s: &Sched<'_>, reach: &Reach, longest: f64) -> Vec<u32> {
        let now = s.now();
        while let Some((_, &since)) = self.young.first_key_value() {
            if now - since < longest {
                break;
            }
            self.young.pop_first();
        }
        let last = reach.visited.last().map(|&(_, k)| k);
        if reach.stopped && last.is_none() {
            return Vec::new();
        }
        let visited: HashSet<u32> = reach.visited.iter().map(|&(_, k)| k.2).collect();
        let mut late: Vec<Key> = self
            .young
            .iter()
            .filter_map(|(&(_, i), &since)| {
                let j = s.job(i);
                if j.status != Status::Pending
                    || j.wait_since.to_bits() != since.to_bits()
                    || j.spec.gpus > reach.widest
                    || visited.contains(&i)
                {
                    return None;
                }
                let k = self.queues.current(i)?;
                match last {
                    Some(l) if reach.stopped && k >= l => None,
                    _ => Some(k),
                }
            })
            .collect();
        late.sort_unstable();
        late.into_iter().map(|k| k.2).collect()
    }
}

/// A preemptive policy that ranks jobs by a key alone (SRSF, LAS,
/// Tiresias): each round is a [`ranked_round`] that starts every visited
/// job that fits, at cluster level. Implementing it implements [`Policy`].
pub(crate) trait RankedByKey {
    /// Its name in tables.
    const NAME: &'static str;
    /// Job `i`'s rank: lower first, ties by index.
    fn key(&self, s: &Sched<'_>, i: u32) -> (f64, f64);
}

impl<T: RankedByKey> Policy for T {
    fn name(&self) -> &str {
        T::NAME
    }

    fn preemptive(&self) -> bool {
        true
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        let me = &*self;
        ranked_round(
            s,
            |s: &Sched<'_>, i| me.key(s, i),
            None,
            |s, i| {
                s.try_start(i, Locality::Cluster);
            },
        );
    }
}

#[cfg(test)]
mod ranked_tests;
