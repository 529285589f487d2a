//! The published model's event handlers (see the parent module): chunk
//! starts and ends, arrivals, and the per-GPU auction.

use super::bids::{better, value, Asking, Bid, Bidder};
use super::events::{leased_to, Events, Kind, Lease};
use super::layout::Layout;
use super::record;
use super::BiddingRun;
use crate::config::SimConfig;
use crate::engine::Sample;
use crate::job::{JobSpec, Locality};
use crate::state::{JobState, Status};

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
    pub ev: Events,
    pub now: f64,
    pub timeline: Vec<Sample>,
}

impl Sim {
    /// The published model at its start: every GPU free, no job arrived.
    pub fn new(
        layout: Layout,
        cfg: &SimConfig,
        run: &BiddingRun,
        bidder: Bidder,
        jobs: &[JobSpec],
    ) -> Self {
        let mut state = Vec::with_capacity(jobs.len());
        let mut js = Vec::with_capacity(jobs.len());
        for (k, j) in jobs.iter().enumerate() {
            let total = j.iterations.ceil() as i64;
            js.push(Job {
                tpi: j.iter_time * j.gpus as f64,
                s: j.slowdown.fractions(),
                remaining: total,
                total,
                service: 0.0,
                current: Vec::new(),
                next: Vec::new(),
                expected: Vec::new(),
                waiting: true,
                last: j.arrival + run.origin - 1.0,
                id: j.id.parse().unwrap_or(k as i64),
            });
            state.push(JobState::new(j.clone(), 0));
        }
        Sim {
            gpus: vec![None; layout.len()],
            layout,
            origin: run.origin,
            lease: cfg.lease,
            per_gpu: cfg.restart_cost,
            chunk: run.granularity as i64,
            bidder,
            jobs: js,
            out: state,
            running: Vec::new(),
            ev: Events::default(),
            now: 0.0,
            timeline: Vec::new(),
        }
    }

    pub fn push(&mut self, t: f64, kind: Kind, job: usize) {
        self.ev.push(t, kind, job);
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
        let s = self.fraction(j, &self.jobs[j].current);
        let cur = &self.jobs[j].current;
        let at = (self.now, self.origin);
        let level = self.layout.level(cur);
        record::chunk_started(&mut self.out[j], at, level, end - self.now, cur.len(), s);
        self.push(end, Kind::End, j);
    }

    fn release(&mut self, gpus: &[usize], delay: f64) {
        self.ev.release(&mut self.gpus, gpus, self.now + delay);
    }

    pub fn end(&mut self, j: usize) {
        let job = &mut self.jobs[j];
        job.remaining = (job.remaining - self.chunk).max(0);
        if job.remaining == 0 {
            let mine = leased_to(&self.gpus, j);
            self.release(&mine, self.per_gpu * mine.len() as f64);
            self.running.retain(|&r| r != j);
            record::finished(&mut self.out[j], self.now - self.origin);
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
            record::preempted(&mut self.out[j], now);
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
        let waiting = self.running.iter().filter(|&&j| self.jobs[j].waiting);
        let t = self.now - self.origin;
        record::sample(&mut self.timeline, t, &self.gpus, waiting.count());
    }
}
