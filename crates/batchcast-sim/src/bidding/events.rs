//! The published models' event queue: events by time, then kind (the
//! published order for one instant), then first come first served; and
//! the GPU leases they hand out.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Event kinds in the published order for one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Arrive,
    End,
    Start,
    Auction,
}

/// A GPU's lease: the job and when it ends.
#[derive(Clone, Copy)]
pub(super) struct Lease {
    pub job: usize,
    pub end: f64,
}

/// The GPUs of `gpus` leased to `job`, in cluster order.
pub(super) fn leased_to(gpus: &[Option<Lease>], job: usize) -> Vec<usize> {
    (0..gpus.len())
        .filter(|&g| gpus[g].is_some_and(|l| l.job == job))
        .collect()
}

/// Pending events (times finite and >= 0, ordered by their bits).
#[derive(Default)]
pub(super) struct Events {
    queue: BinaryHeap<Reverse<(u64, Kind, u64, usize)>>,
    seq: u64,
    /// Events taken so far.
    pub taken: u64,
}

impl Events {
    /// Queues `kind` for `job` (`usize::MAX` for none) at `t`.
    pub fn push(&mut self, t: f64, kind: Kind, job: usize) {
        self.seq += 1;
        self.queue.push(Reverse((t.to_bits(), kind, self.seq, job)));
    }

    /// The next event: its time, kind and job.
    pub fn pop(&mut self) -> Option<(f64, Kind, usize)> {
        let Reverse((t, kind, _, job)) = self.queue.pop()?;
        self.taken += 1;
        Some((f64::from_bits(t), kind, job))
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Ends the leases of `set` and, if there are any, queues an auction at
    /// `at`.
    pub fn release(&mut self, gpus: &mut [Option<Lease>], set: &[usize], at: f64) {
        for &g in set {
            gpus[g] = None;
        }
        if !set.is_empty() {
            self.push(at, Kind::Auction, usize::MAX);
        }
    }
}
