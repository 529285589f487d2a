//! The published Dally (cluster-sim at 4cd660e, `DallyInterJobScheduler`
//! and `DallyIntraJobScheduler`) and the chunk rules of that commit, which
//! differ from 2953d56's (see the parent module):
//!
//! - a chunk of `granularity` iterations runs on each of the job's n GPUs,
//!   `time_per_iteration / s * granularity` seconds (s the throughput
//!   fraction of the widest level spanned, 1 inside a slot), and takes
//!   `granularity * n` off the iterations left;
//! - a job bids `-r`, r its progress rate (work done / (chunk seconds run /
//!   ideal run time), 0 before its first chunk ends): the slowest wins;
//! - every job whose next chunk has no GPUs yet bids, a running one too: a
//!   running job that wins takes GPUs it will not use, held until it ends;
//! - consolidated (`consolidate` "true"), a winner takes all its GPUs at
//!   once: the first slot, then the first machine (in `hashed`'s order) with
//!   enough free GPUs; a rack only once it has waited `rack_wait` leases
//!   since it last got or lost GPUs (or it needs more than a machine); any
//!   free GPUs only after `network_wait` leases (or it needs more than a
//!   rack). With both waits -1 they are tuned per job from the waits of
//!   earlier placements of the same size (mean + 2 standard deviations, over
//!   the last `history` leases; at least 6 and 12, at most 0.8 x and 1 x
//!   `history`). Otherwise GPUs are auctioned one at a time;
//! - when nothing is left to happen and jobs wait, every free GPU is offered
//!   again 60 s later.

use std::collections::BTreeMap;

use super::bids::{better, Bid};
use super::events::{leased_to, Events, Kind, Lease};
use super::hashed::iteration_order;
use super::layout::Layout;
use super::record;
use super::BiddingRun;
use crate::cluster::ClusterSpec;
use crate::config::SimConfig;
use crate::engine::{Outcome, Sample};
use crate::error::SimError;
use crate::job::{JobSpec, Locality};
use crate::state::{JobState, Status};

/// The published Dally's settings (its cluster file and command line).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DallySetup {
    /// The cluster file's `consolidate`: all of a job's GPUs at once, by
    /// delay scheduling; else one GPU at a time.
    pub consolidate: bool,
    /// Leases a job waits before it takes GPUs across machines of a rack.
    pub rack_wait: f64,
    /// Leases a job waits before it takes GPUs anywhere.
    pub network_wait: f64,
    /// Leases of past waits the tuner remembers (both waits -1: tuned).
    pub history: u32,
}

impl Default for DallySetup {
    /// The published command line's defaults: waits of 1 and 2 leases, not
    /// tuned.
    fn default() -> Self {
        DallySetup {
            consolidate: false,
            rack_wait: 1.0,
            network_wait: 2.0,
            history: 0,
        }
    }
}

/// Seconds after which, with nothing left to happen, free GPUs are offered
/// again.
const WAKEUP: f64 = 60.0;
/// Most offers in a row with no chunk run before the run is refused.
const MAX_IDLE_OFFERS: u32 = 1_000_000;

struct Job {
    tpi: f64,
    /// Throughput fractions across slots, machines, racks.
    s: [f64; 3],
    gpus: usize,
    remaining: i64,
    total: i64,
    current: Vec<usize>,
    next: Vec<usize>,
    waiting: bool,
    last: f64,
    chunk_time: f64,
    rate: f64,
    rack_wait: f64,
    network_wait: f64,
    id: i64,
}

struct Sim<'a> {
    layout: &'a Layout,
    setup: DallySetup,
    /// Both waits were -1: each job's are tuned before it may leave a
    /// machine.
    tuned: bool,
    per_machine: usize,
    per_rack: usize,
    origin: f64,
    lease: f64,
    per_gpu: f64,
    chunk: i64,
    gpus: Vec<Option<Lease>>,
    jobs: Vec<Job>,
    out: Vec<JobState>,
    running: Vec<usize>,
    ev: Events,
    now: f64,
    /// Past waits (in leases) by GPUs asked: placed inside a machine, in a
    /// rack.
    machine_waits: BTreeMap<usize, Vec<(f64, f64)>>,
    rack_waits: BTreeMap<usize, Vec<(f64, f64)>>,
    timeline: Vec<Sample>,
}

/// Runs `jobs` (validated by the caller) on `spec` laid out as `layout`
/// under the published Dally: `cfg`'s lease and restart cost per GPU,
/// `run`'s granularity, origin and Dally settings.
pub(super) fn simulate(
    layout: &Layout,
    spec: &ClusterSpec,
    cfg: &SimConfig,
    run: &BiddingRun,
    jobs: &[JobSpec],
) -> Result<Outcome, SimError> {
    if let Some(j) = jobs.iter().find(|j| j.gpus as usize > layout.len()) {
        return Err(SimError::Config(format!(
            "job {:?} asks for {} GPUs and the cluster has {}: the published Dally would wait \
             for them forever",
            j.id,
            j.gpus,
            layout.len()
        )));
    }
    let mut sim = Sim::new(layout, spec, cfg, run, jobs);
    for j in record::arrival_order(jobs) {
        sim.push(jobs[j].arrival + run.origin, Kind::Arrive, j);
    }
    sim.run()?;
    Ok(Outcome {
        policy: "dally".into(),
        jobs: sim.out,
        timeline: sim.timeline,
        total_gpus: layout.len() as u64,
        events: sim.ev.taken,
    })
}

impl<'a> Sim<'a> {
    /// The cluster idle and every job waiting, none arrived yet.
    fn new(
        layout: &'a Layout,
        spec: &ClusterSpec,
        cfg: &SimConfig,
        run: &BiddingRun,
        jobs: &[JobSpec],
    ) -> Sim<'a> {
        let (setup, origin) = (run.dally, run.origin);
        let per_machine = spec.gpus_per_machine as usize;
        let tuned = setup.rack_wait == -1.0 && setup.network_wait == -1.0;
        let mut sim = Sim {
            layout,
            setup,
            tuned,
            per_machine,
            per_rack: per_machine * spec.machines_per_rack as usize,
            origin,
            lease: cfg.lease,
            per_gpu: cfg.restart_cost,
            chunk: run.granularity as i64,
            gpus: vec![None; layout.len()],
            jobs: Vec::with_capacity(jobs.len()),
            out: Vec::with_capacity(jobs.len()),
            running: Vec::new(),
            ev: Events::default(),
            now: 0.0,
            machine_waits: BTreeMap::new(),
            rack_waits: BTreeMap::new(),
            timeline: Vec::new(),
        };
        for (k, j) in jobs.iter().enumerate() {
            let total = j.iterations.ceil() as i64;
            sim.jobs.push(Job {
                tpi: j.iter_time * j.gpus as f64,
                s: j.slowdown.fractions(),
                gpus: j.gpus as usize,
                remaining: total,
                total,
                current: Vec::new(),
                next: Vec::new(),
                waiting: true,
                last: j.arrival + origin,
                chunk_time: 0.0,
                rate: 0.0,
                rack_wait: if tuned { -1.0 } else { setup.rack_wait },
                network_wait: if tuned { -1.0 } else { setup.network_wait },
                id: j.id.parse().unwrap_or(k as i64),
            });
            sim.out.push(JobState::new(j.clone(), 0));
        }
        sim
    }

    /// Takes events until none is left; an error when free GPUs were
    /// offered a million times in a row and no job took them.
    fn run(&mut self) -> Result<(), SimError> {
        let mut idle = 0;
        while let Some((t, kind, j)) = self.ev.pop() {
            self.now = t;
            match kind {
                Kind::Arrive => self.arrive(j),
                Kind::End => self.end(j),
                Kind::Start => {
                    idle = 0;
                    self.start(j)
                }
                Kind::Auction => self.auction(),
            }
            self.sample();
            if self.ev.is_empty() && !self.running.is_empty() {
                idle += 1;
                if idle > MAX_IDLE_OFFERS {
                    return Err(SimError::Config(
                        "the published Dally offered free GPUs a million times in a row and no \
                         job took them: lower the delay timers"
                            .into(),
                    ));
                }
                self.push(self.now + WAKEUP, Kind::Auction, usize::MAX);
            }
        }
        Ok(())
    }
}

impl Sim<'_> {
    fn push(&mut self, t: f64, kind: Kind, job: usize) {
        self.ev.push(t, kind, job);
    }

    /// `getPlacementSlowdown` with the trace's fractions at the seam.
    fn fraction(&self, j: usize, set: &[usize]) -> f64 {
        match set.len() {
            0 => 0.0,
            1 => 1.0,
            _ => match self.layout.level(set) {
                Locality::Slot => 1.0,
                Locality::Machine => self.jobs[j].s[0],
                Locality::Rack => self.jobs[j].s[1],
                Locality::Cluster => self.jobs[j].s[2],
            },
        }
    }

    fn arrive(&mut self, j: usize) {
        if self.gpus.iter().any(Option::is_none) {
            self.push(self.now, Kind::Auction, usize::MAX);
        }
        self.running.push(j);
        self.out[j].status = Status::Pending;
        self.out[j].wait_since = self.now;
    }

    fn bid(&self, j: usize) -> Bid {
        let job = &self.jobs[j];
        Bid {
            value: -job.rate,
            holding: job.next.len(),
            last: job.last,
            id: job.id,
            job: j,
        }
    }

    fn lease_to(&mut self, j: usize, set: &[usize]) {
        for &g in set {
            self.gpus[g] = Some(Lease {
                job: j,
                end: self.now + self.lease,
            });
        }
        self.jobs[j].next.extend_from_slice(set);
    }

    fn auction(&mut self) {
        if self.running.is_empty() {
            return;
        }
        if self.setup.consolidate {
            let mut free: Vec<usize> = (0..self.gpus.len())
                .filter(|&g| self.gpus[g].is_none())
                .collect();
            let mut bids: Vec<Bid> = self
                .running
                .iter()
                .filter(|&&j| self.jobs[j].next.is_empty())
                .map(|&j| self.bid(j))
                .collect();
            bids.sort_by(better);
            for b in bids {
                if free.is_empty() {
                    break;
                }
                let set = self.place(&free, b.job);
                if !set.is_empty() {
                    free.retain(|g| !set.contains(g));
                    self.lease_to(b.job, &set);
                }
            }
        } else {
            for g in 0..self.gpus.len() {
                if self.gpus[g].is_some() {
                    continue;
                }
                let best = self
                    .running
                    .iter()
                    .filter(|&&j| self.jobs[j].next.len() < self.jobs[j].gpus)
                    .map(|&j| self.bid(j))
                    .min_by(better);
                if let Some(b) = best {
                    self.lease_to(b.job, &[g]);
                }
            }
        }
        for k in 0..self.running.len() {
            let j = self.running[k];
            if self.jobs[j].waiting && !self.jobs[j].next.is_empty() {
                self.push(self.now, Kind::Start, j);
                let job = &mut self.jobs[j];
                job.waiting = false;
                job.last = self.now;
            }
        }
    }

    /// `consolidatedGPUAllocation`: the GPUs of `free` job `j` takes now,
    /// or none.
    fn place(&mut self, free: &[usize], j: usize) -> Vec<usize> {
        let demand = self.jobs[j].gpus.saturating_sub(self.jobs[j].next.len());
        if demand > free.len() {
            return Vec::new();
        }
        let (lease, now, history) = (self.lease, self.now, self.setup.history);
        let starved = now - self.jobs[j].last;
        let waited = starved / lease;
        let layout = self.layout;
        let key = |g: usize, depth: usize| {
            let mut k = layout.at(g);
            k[depth..].fill(0);
            k
        };
        // Slots, then machines, in the order Java's map visits them.
        for depth in [3usize, 2] {
            let mut keys: Vec<[u32; 3]> = Vec::new();
            let mut counts: Vec<usize> = Vec::new();
            for &g in free {
                let k = key(g, depth);
                match keys.iter().position(|x| *x == k) {
                    Some(i) => counts[i] += 1,
                    None => {
                        keys.push(k);
                        counts.push(1);
                    }
                }
            }
            let hashes: Vec<i32> = keys.iter().map(|k| (k[0] ^ k[1] ^ k[2]) as i32).collect();
            if let Some(i) = iteration_order(&hashes)
                .into_iter()
                .find(|&i| counts[i] >= demand)
            {
                let waits = self.machine_waits.entry(demand).or_default();
                record(waits, waited, now, lease, history);
                return take(free, demand, |g| key(g, depth) == keys[i]);
            }
        }
        self.rack_waits.entry(demand).or_default();
        if self.tuned {
            self.tune(j, demand);
        }
        let job = &self.jobs[j];
        if starved >= lease * job.rack_wait || demand > self.per_machine {
            let rack = (0..layout.racks())
                .find(|&r| free.iter().filter(|&&g| layout.at(g)[0] == r).count() >= demand);
            if let Some(r) = rack {
                let waits = self.rack_waits.entry(demand).or_default();
                record(waits, waited, now, lease, history);
                return take(free, demand, |g| layout.at(g)[0] == r);
            }
        }
        if starved >= lease * job.network_wait || demand > self.per_rack {
            return take(free, demand, |_| true);
        }
        Vec::new()
    }

    /// `tuneDelayTimers`.
    fn tune(&mut self, j: usize, demand: usize) {
        let hist = self.setup.history as f64;
        let machine = spread_of(self.machine_waits.entry(demand).or_default());
        let rack = spread_of(self.rack_waits.entry(demand).or_default());
        let job = &mut self.jobs[j];
        job.rack_wait = (hist * 0.8).ceil().min(6f64.max(machine.ceil()));
        job.network_wait = hist.min(12f64.max(rack.ceil()));
    }

    fn start(&mut self, j: usize) {
        let current = std::mem::take(&mut self.jobs[j].next);
        let s = self.fraction(j, &current);
        let job = &mut self.jobs[j];
        job.waiting = false;
        let end = self.now + job.tpi / s * self.chunk as f64;
        job.current = current;
        let cur = &self.jobs[j].current;
        let at = (self.now, self.origin);
        let level = self.layout.level(cur);
        record::chunk_started(&mut self.out[j], at, level, end - self.now, cur.len(), s);
        self.push(end, Kind::End, j);
    }

    fn end(&mut self, j: usize) {
        let now = self.now;
        let s = self.fraction(j, &self.jobs[j].current);
        let chunk = self.chunk;
        let job = &mut self.jobs[j];
        job.chunk_time += job.tpi / s * chunk as f64;
        job.remaining = (job.remaining - chunk * job.current.len() as i64).max(0);
        let ideal = job.tpi * job.total as f64 / job.gpus as f64;
        let done = 1.0 - job.remaining as f64 / job.total as f64;
        job.rate = done / (job.chunk_time / ideal);
        if job.remaining == 0 {
            let mine = leased_to(&self.gpus, j);
            let at = now + self.per_gpu * mine.len() as f64;
            self.ev.release(&mut self.gpus, &mine, at);
            self.running.retain(|&r| r != j);
            record::finished(&mut self.out[j], now - self.origin);
            return;
        }
        // GPUs won while the chunk ran (its next set was empty, so it bid).
        let won = std::mem::take(&mut self.jobs[j].next);
        let current = std::mem::take(&mut self.jobs[j].current);
        let (expired0, mut expected): (Vec<usize>, Vec<usize>) = current
            .iter()
            .partition(|&&g| self.gpus[g].is_some_and(|l| now >= l.end));
        let mut expired = expired0;
        for &g in &expired {
            self.gpus[g] = None;
        }
        // With no lease expired, the published code's next set *is* its
        // current set: the GPUs won are not in it and the restart cost
        // counts the GPUs kept; else it is the GPUs won and kept.
        let aliased = expired.is_empty();
        let mut next = expected.clone();
        if !aliased {
            next.extend(won.iter().filter(|g| !expected.contains(g)));
        }
        while !next.is_empty() {
            let t = self.jobs[j].tpi * chunk as f64 / self.fraction(j, &next) / next.len() as f64;
            let late: Vec<usize> = next
                .iter()
                .copied()
                .filter(|&g| self.gpus[g].is_some_and(|l| now + t > l.end))
                .collect();
            if late.is_empty() {
                break;
            }
            for &g in &late {
                self.gpus[g] = None;
                expired.push(g);
            }
            next.retain(|g| !late.contains(g));
            expected.retain(|g| !late.contains(g));
        }
        if next.len() > expected.len() {
            next = expected;
        }
        let counted = if aliased { next.len() } else { current.len() };
        let at = now + self.per_gpu * counted as f64;
        self.ev.release(&mut self.gpus, &expired, at);
        let job = &mut self.jobs[j];
        // GPUs won and not kept stay leased to the job, unused, until it ends.
        job.next = next;
        if job.next.is_empty() {
            job.waiting = true;
            job.last = now;
            record::preempted(&mut self.out[j], now);
        } else {
            self.push(now, Kind::Start, j);
        }
    }

    fn sample(&mut self) {
        let waiting = self.running.iter().filter(|&&j| self.jobs[j].waiting);
        let t = self.now - self.origin;
        record::sample(&mut self.timeline, t, &self.gpus, waiting.count());
    }
}

/// The first `demand` GPUs of `free` (in cluster order) that `fits`.
fn take(free: &[usize], demand: usize, fits: impl Fn(usize) -> bool) -> Vec<usize> {
    free.iter()
        .copied()
        .filter(|&g| fits(g))
        .take(demand)
        .collect()
}

/// `setDemandDelay`: remembers a wait of `waited` leases (at least 1) and
/// forgets those older than `history` leases, skipping the entry after each
/// one it forgets, as the published loop does.
fn record(list: &mut Vec<(f64, f64)>, waited: f64, now: f64, lease: f64, history: u32) {
    if waited < 1.0 {
        return;
    }
    list.push((now, waited));
    let cutoff = now - lease * history as f64;
    let mut i = 0;
    while i < list.len() {
        if list[i].0 < cutoff {
            list.remove(i);
        }
        i += 1;
    }
}

/// Mean + 2 standard deviations of the remembered waits; 1 with none.
fn spread_of(list: &[(f64, f64)]) -> f64 {
    let sum: f64 = list.iter().map(|p| p.1).sum();
    if sum == 0.0 {
        return 1.0;
    }
    let n = list.len() as f64;
    let mean = sum / n;
    let var: f64 = list.iter().map(|p| (p.1 - mean) * (p.1 - mean)).sum();
    mean + 2.0 * (var / n).sqrt()
}
