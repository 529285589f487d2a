//! The published model's event handlers (see the parent module): chunk
//! starts and ends, arrivals, and the per-GPU auction.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::bids::{better, value, Asking, Bid, Bidder};
use super::layout::Layout;
use crate::engine::Sample;
use crate::job::Locality;
use crate::state::{JobState, Status};

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
    job: usize,
    end: f64,
}

/// A job as the published code keeps it.
pub(super) struct Job {
    /// Seconds of one iteration on one GPU.
    pub tpi: f64,
    /// Throughput fractions across slots, machines, racks.
    pub s: [f64; 3],
    /// Iterations left, and in all.
    pub remaining: i64,
    pub total: i64,
    /// GPU time received (the Tiresias bid).
    pub service: f64,
    /// GPUs of the running chunk, of the next one, and those of the running
    /// chunk whose lease outlasts one more iteration.
    pub current: Vec<usize>,
    pub next: Vec<usize>,
    pub expected: Vec<usize>,
    /// Waiting for GPUs (no chunk running).
    pub waiting: bool,
    /// When it last got or lost GPUs.
    pub last: f64,
    /// Its numeric id (ties go to the lower).
    pub id: i64,
}

/// The simulation's state: the cluster's leases, the jobs, the events.
pub(super) struct Sim {
    pub layout: Layout,
    /// The trace's first arrival: `now - origin` is reported.
    pub origin: f64,
    pub lease: f64,
    /// Seconds per released GPU before it is auctioned.
    pub per_gpu: f64,
    /// Iterations per chunk.
    pub chunk: i64,
    pub bidder: Bidder,
    /// Each GPU's lease, in cluster order.
    pub gpus: Vec<Option<Lease>>,
    pub jobs: Vec<Job>,
    /// What is reported per job.
    pub out: Vec<JobState>,
    /// Jobs arrived and not done, in arrival order.
    pub running: Vec<usize>,
    pub queue: BinaryHeap<Reverse<(u64, Kind, u64, usize)>>,
    pub seq: u64,
    pub now: f64,
    pub timeline: Vec<Sample>,
    pub events: u64,
}

/// Orders f64 times (all finite, >= 0) as integers.
fn key(t: f64) -> u64 {
    t.to_bits()
}

impl Sim {
    pub fn push(&mut self, t: f64, kind: Kind, job: usize) {
        self.seq += 1;
        self.queue.push(Reverse((key(t), kind, self.seq, job)));
    }

    fn fraction(&self, j: usize, set: &[usize]) -> f64 {
        match self.layout.level(set) {
            Locality::Slot => 1.0,
            Locality::Machine => self.jobs[j].s[0],
            Locality::Rack => self.jobs[j].s[1],
            Locality::Cluster => self.jobs[j].s[2],
        }
    }

    fn available(&self, j: usize) -> Vec<usize> {
        let job = &self.jobs[j];
        let mut v = job.next.clone();
        v.extend(job.expected.iter().filter(|g| !job.next.contains(g)));
        v
    }

    pub fn auction(&mut self) {
        if self.running.is_empty() {
            return;
        }
        for g in 0..self.gpus.len() {
            if self.gpus[g].is_some() {
                continue;
            }
            let mut best: Option<Bid> = None;
            for &j in &self.running {
                let mut set = self.available(j);
                if set.len() >= self.out[j].spec.gpus as usize {
                    continue;
                }
                let holding = set.len();
                set.push(g);
                let job = &self.jobs[j];
                let ask = Asking {
                    remaining: job.remaining,
                    done: job.total - job.remaining,
                    tpi: job.tpi,
                    service: job.service,
                };
                let bid = Bid {
                    value: value(self.bidder, &ask, set.len(), self.fraction(j, &set)),
                    holding,
                    last: job.last,
                    id: job.id,
                    job: j,
                };
                if best.is_none_or(|b| better(&bid, &b).is_lt()) {
                    best = Some(bid);
                }
            }
            if let Some(b) = best {
                self.jobs[b.job].next.push(g);
                self.gpus[g] = Some(Lease {
                    job: b.job,
                    end: self.now + self.lease,
                });
            }
        }
        for k in 0..self.running.len() {
            let j = self.running[k];
            if self.jobs[j].waiting && !self.jobs[j].next.is_empty() {
                self.push(self.now, Kind::Start, j);
                self.jobs[j].waiting = false;
                self.jobs[j].last = self.now;
            }
        }
    }

    pub fn start(&mut self, j: usize) {
        let current = std::mem::take(&mut self.jobs[j].next);
        let speedup = current.len() as f64 * self.fraction(j, &current);
        let job = &mut self.jobs[j];
        job.waiting = false;
        let one = job.tpi / speedup;
        let end = self.now + one * self.chunk as f64;
        job.expected = current
            .iter()
            .copied()
            .filter(|&g| self.gpus[g].is_some_and(|l| l.end > self.now + one))
            .collect();
        job.service += current.len() as f64 * one;
        job.current = current;
        let o = &mut self.out[j];
        o.first_start.get_or_insert(self.now - self.origin);
        if o.status != Status::Running {
            o.queued += self.now - o.wait_since;
            o.status = Status::Running;
        }
        let level = self.layout.level(&self.jobs[j].current);
        let o = &mut self.out[j];
        o.level = level;
        o.widest = o.widest.max(level);
        o.held += (end - self.now) * self.jobs[j].current.len() as f64 / o.spec.gpus as f64;
        let s = self.fraction(j, &self.jobs[j].current);
        self.out[j].comm += (end - self.now) * (1.0 - s);
        self.push(end, Kind::End, j);
    }

    fn release(&mut self, gpus: &[usize], delay: f64) {
        for &g in gpus {
            self.gpus[g] = None;
        }
        if !gpus.is_empty() {
            self.push(self.now + delay, Kind::Auction, usize::MAX);
        }
    }

    pub fn end(&mut self, j: usize) {
        let job = &mut self.jobs[j];
        job.remaining = (job.remaining - self.chunk).max(0);
        if job.remaining == 0 {
            let mine: Vec<usize> = (0..self.gpus.len())
                .filter(|&g| self.gpus[g].is_some_and(|l| l.job == j))
                .collect();
            self.release(&mine, self.per_gpu * mine.len() as f64);
            self.running.retain(|&r| r != j);
            let o = &mut self.out[j];
            o.finish = Some(self.now - self.origin);
            o.status = Status::Done;
            o.done = o.spec.iterations;
            return;
        }
        let now = self.now;
        let current = self.jobs[j].current.clone();
        let mut expired = Vec::new();
        let mut next = std::mem::take(&mut self.jobs[j].next);
        for &g in &current {
            if self.gpus[g].is_some_and(|l| now >= l.end) {
                expired.push(g);
            } else if !next.contains(&g) {
                next.push(g);
            }
        }
        loop {
            let t = self.jobs[j].tpi * self.fraction(j, &next) / next.len() as f64;
            let before = next.len();
            next.retain(|&g| {
                let keep = self.gpus[g].is_some_and(|l| now + t <= l.end);
                if !keep {
                    expired.push(g);
                }
                keep
            });
            if next.len() == before {
                break;
            }
        }
        self.jobs[j].expected = next.clone();
        self.release(&expired, self.per_gpu * current.len() as f64);
        let job = &mut self.jobs[j];
        job.next = next;
        if job.next.is_empty() {
            job.current.clear();
            job.waiting = true;
            job.last = now;
            let o = &mut self.out[j];
            o.status = Status::Pending;
            o.wait_since = now;
            o.preemptions += 1;
        } else {
            self.push(now, Kind::Start, j);
        }
    }

    pub fn arrive(&mut self, j: usize) {
        self.running.push(j);
        self.out[j].status = Status::Pending;
        self.out[j].wait_since = self.now;
        if self.gpus.iter().any(Option::is_none) {
            self.push(self.now, Kind::Auction, usize::MAX);
        }
    }

    pub fn sample(&mut self) {
        let busy = self.gpus.iter().filter(|g| g.is_some()).count() as u64;
        let pending = self
            .running
            .iter()
            .filter(|&&j| self.jobs[j].waiting)
            .count();
        if self
            .timeline
            .last()
            .is_none_or(|s| s.busy != busy || s.pending != pending)
        {
            self.timeline.push(Sample {
                t: self.now - self.origin,
                busy,
                pending,
            });
        }
    }
}
