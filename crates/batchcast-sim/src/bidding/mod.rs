//! The published simulator's model (github aakash-sharma/cluster-sim at
//! 2953d56), for comparing like with like: GPUs are auctioned one at a
//! time, so a job runs on 1 to `gpus` GPUs and grows or shrinks between
//! chunks; it runs in chunks of `granularity` iterations at
//! `time_per_iteration / (n s)` each, `n` GPUs spanning a level of
//! throughput fraction `s`; a GPU is leased for `lease` seconds and a chunk
//! starts only on GPUs whose lease outlasts one iteration, but once started
//! runs to its end. Whenever GPUs come free every free GPU, in cluster
//! order (rack, machine, slot, GPU), goes to the best bid among the jobs
//! with fewer GPUs than they ask for (see `bids`). Events at one instant run
//! in the published order: arrivals, chunk ends, chunk starts, then
//! auctions, each kind first come first served. Released GPUs are auctioned
//! `restart_cost` seconds per GPU later.
//!
//! It is as slow as the published code: one event per chunk. batchcast's
//! own model (`simulate`) gang-schedules and moves progress continuously.

mod bids;
mod layout;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub use bids::Bidder;
use bids::{better, value, Asking, Bid};
use layout::Layout;

use crate::cluster::ClusterSpec;
use crate::config::SimConfig;
use crate::engine::{Outcome, Sample};
use crate::error::SimError;
use crate::job::{JobSpec, Locality};
use crate::state::{JobState, Status};

/// Most chunks one run may take (it costs a few events each).
const MAX_CHUNKS: f64 = 1e8;

/// Event kinds in the published order for one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Arrive,
    End,
    Start,
    Auction,
}

/// A GPU's lease: the job and when it ends.
#[derive(Clone, Copy)]
struct Lease {
    job: usize,
    end: f64,
}

struct Job {
    tpi: f64,
    s: [f64; 3],
    remaining: i64,
    total: i64,
    service: f64,
    current: Vec<usize>,
    next: Vec<usize>,
    expected: Vec<usize>,
    waiting: bool,
    last: f64,
    id: i64,
}

struct Sim {
    layout: Layout,
    origin: f64,
    lease: f64,
    per_gpu: f64,
    chunk: i64,
    bidder: Bidder,
    gpus: Vec<Option<Lease>>,
    jobs: Vec<Job>,
    out: Vec<JobState>,
    running: Vec<usize>,
    queue: BinaryHeap<Reverse<(u64, Kind, u64, usize)>>,
    seq: u64,
    now: f64,
    timeline: Vec<Sample>,
    events: u64,
}

/// Orders f64 times (all finite, >= 0) as integers.
fn key(t: f64) -> u64 {
    t.to_bits()
}

impl Sim {
    fn push(&mut self, t: f64, kind: Kind, job: usize) {
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

    fn auction(&mut self) {
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

    fn start(&mut self, j: usize) {
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

    fn end(&mut self, j: usize) {
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

    fn arrive(&mut self, j: usize) {
        self.running.push(j);
        self.out[j].status = Status::Pending;
        self.out[j].wait_since = self.now;
        if self.gpus.iter().any(Option::is_none) {
            self.push(self.now, Kind::Auction, usize::MAX);
        }
    }

    fn sample(&mut self) {
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

/// How a run of the published model is set up beyond the cluster shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BiddingRun {
    /// The trace's first arrival ([`Parsed::origin`](crate::trace::Parsed)):
    /// the clock runs on the trace's own times, as the published code's
    /// does, so that its rounding and its ties are the same; times are
    /// reported from the first arrival, as `simulate` reports them.
    pub origin: f64,
    /// Iterations per chunk (the cluster file's `iteration_granularity`).
    pub granularity: u64,
    /// The cluster file's `should_use_config` is not "true": the published
    /// code (2953d56) then ignores the shape and builds, per rack, 6
    /// machines of 2 slots x 2 GPUs, 3 of 2 GPUs and 2 of 1 GPU.
    pub published_default_cluster: bool,
}

/// Runs `jobs` on `spec` under the published simulator's model with
/// `bidder`'s bids, `cfg.lease` and `cfg.restart_cost` seconds per released
/// GPU (congestion, CPU and data sharing are not part of that model and are
/// ignored).
pub fn simulate_bidding(
    spec: &ClusterSpec,
    cfg: &SimConfig,
    jobs: &[JobSpec],
    run: &BiddingRun,
    bidder: Bidder,
) -> Result<Outcome, SimError> {
    let BiddingRun {
        origin,
        granularity,
        published_default_cluster,
    } = *run;
    if !(origin.is_finite() && origin >= 0.0) {
        return Err(SimError::Config(format!(
            "origin {origin}: the trace's first arrival must be a time >= 0"
        )));
    }
    spec.validate()?;
    if !(cfg.lease.is_finite() && cfg.lease > 0.0 && cfg.restart_cost >= 0.0) {
        return Err(SimError::Config(
            "lease must be > 0 and restart cost >= 0 seconds".into(),
        ));
    }
    if granularity == 0 || granularity > i64::MAX as u64 {
        return Err(SimError::Config(
            "iteration granularity must be a whole number >= 1".into(),
        ));
    }
    let chunks: f64 = jobs
        .iter()
        .map(|j| (j.iterations / granularity as f64).ceil())
        .sum();
    if chunks > MAX_CHUNKS {
        return Err(SimError::Config(format!(
            "the published model runs one event per chunk and this trace has {chunks:.3e} \
             chunks of {granularity} iterations; raise iteration_granularity to at most \
             {MAX_CHUNKS:.0e} chunks in all"
        )));
    }
    let mut state = Vec::with_capacity(jobs.len());
    let mut js = Vec::with_capacity(jobs.len());
    for (k, j) in jobs.iter().enumerate() {
        let ok = j.arrival.is_finite()
            && j.arrival >= 0.0
            && j.iterations >= 1.0
            && j.iterations < 9e18
            && j.iter_time > 0.0
            && j.gpus >= 1;
        if !ok {
            return Err(SimError::Config(format!(
                "job {:?}: needs an arrival >= 0, iterations >= 1, a time per iteration > 0 \
                 and GPUs >= 1",
                j.id
            )));
        }
        let total = j.iterations.ceil() as i64;
        js.push(Job {
            tpi: j.iter_time * j.gpus as f64,
            s: [
                1.0 / j.slowdown.cross_slot,
                1.0 / j.slowdown.cross_machine,
                1.0 / j.slowdown.cross_rack,
            ],
            remaining: total,
            total,
            service: 0.0,
            current: Vec::new(),
            next: Vec::new(),
            expected: Vec::new(),
            waiting: true,
            last: j.arrival + origin - 1.0,
            id: j.id.parse().unwrap_or(k as i64),
        });
        state.push(JobState::new(j.clone(), 0));
    }
    let mut sim = Sim {
        layout: if published_default_cluster {
            Layout::published_default(spec.racks)
        } else {
            Layout::of(spec)
        },
        origin,
        lease: cfg.lease,
        per_gpu: cfg.restart_cost,
        chunk: granularity as i64,
        bidder,
        gpus: Vec::new(),
        jobs: js,
        out: state,
        running: Vec::new(),
        queue: BinaryHeap::new(),
        seq: 0,
        now: 0.0,
        timeline: Vec::new(),
        events: 0,
    };
    sim.gpus = vec![None; sim.layout.len()];
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[a].arrival.total_cmp(&jobs[b].arrival));
    for j in order {
        sim.push(jobs[j].arrival + origin, Kind::Arrive, j);
    }
    while let Some(Reverse((t, kind, _, j))) = sim.queue.pop() {
        sim.now = f64::from_bits(t);
        sim.events += 1;
        match kind {
            Kind::Arrive => sim.arrive(j),
            Kind::End => sim.end(j),
            Kind::Start => sim.start(j),
            Kind::Auction => sim.auction(),
        }
        sim.sample();
    }
    if let Some(j) = sim.out.iter().find(|j| j.finish.is_none()) {
        return Err(SimError::Config(format!(
            "job {:?} never ran: no GPU was ever free for it",
            j.spec.id
        )));
    }
    Ok(Outcome {
        policy: bidder.name().to_string(),
        jobs: sim.out,
        timeline: sim.timeline,
        total_gpus: sim.gpus.len() as u64,
        events: sim.events,
    })
}
