//! The event loop: arrivals, finishes, lease rounds and timer wake-ups, in
//! time order; the policy decides at each instant something happened.
//!
//! Invariants: a GPU has at most one owner (asserted in `Cluster`); a job's
//! progress is accounted only while it holds GPUs; every job finishes (a
//! pass that leaves jobs pending on an idle cluster with nothing to wake it
//! is reported as an error, not looped on).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};

use crate::cluster::{Cluster, ClusterSpec};
use crate::config::SimConfig;
use crate::error::SimError;
use crate::job::JobSpec;
use crate::network::{rates, Running};
use crate::policy::Policy;
use crate::sched::Sched;
use crate::state::{JobState, Status};
pub use crate::validate::validate;

/// Cluster occupancy after one decision instant.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Time, seconds.
    pub t: f64,
    /// GPUs held.
    pub busy: u64,
    /// Jobs waiting.
    pub pending: usize,
}

/// Everything a finished simulation produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The policy's name.
    pub policy: String,
    /// Final state of every job, in trace order.
    pub jobs: Vec<JobState>,
    /// Occupancy over time (one sample per change).
    pub timeline: Vec<Sample>,
    /// GPUs in the cluster.
    pub total_gpus: u64,
    /// Events processed.
    pub events: u64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Finish(u32, u32),
    Lease,
    Wake,
}

#[derive(Clone, Copy, Debug)]
struct Event {
    t: f64,
    seq: u64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap; earliest (then first pushed) first.
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// Mutable simulation state the policy acts on through `Sched`.
pub(crate) struct Core {
    pub cfg: SimConfig,
    pub cluster: Cluster,
    pub jobs: Vec<JobState>,
    /// Waiting jobs in (arrival, index) order; may hold up to `stale`
    /// entries that already started (skipped by readers, compacted lazily).
    pub pending: std::collections::VecDeque<u32>,
    pub running: Vec<u32>,
    pub now: f64,
    heap: BinaryHeap<Event>,
    seq: u64,
    wakes: HashSet<u64>,
    pub dirty: bool,
    pub fresh: Vec<u32>,
    /// Pending jobs per GPU demand (the smallest says whether anything fits).
    pub demands: std::collections::BTreeMap<u32, u32>,
    /// Entries of `pending` that are no longer pending.
    pub stale: usize,
    /// Whether the policy preempts: lease rounds are armed, and the entries
    /// of running jobs stay in `pending` (a preempted job takes its entry
    /// back).
    keep_running: bool,
    /// Per machine: (dataset, jobs of it there).
    pub datasets: Vec<Vec<(u32, u32)>>,
    /// Waiting jobs ranked by a ranking policy, once it has run a round.
    pub ranked: Option<crate::policy::Ranked>,
}

impl Core {
    fn new(spec: &ClusterSpec, cfg: &SimConfig, jobs: &[JobSpec], preemptive: bool) -> Self {
        let mut names: HashMap<&str, u32> = HashMap::new();
        let states: Vec<JobState> = jobs
            .iter()
            .map(|j| {
                let n = names.len() as u32;
                let id = *names.entry(j.dataset.as_str()).or_insert(n);
                JobState::new(j.clone(), id)
            })
            .collect();
        Core {
            cfg: cfg.clone(),
            cluster: Cluster::new(*spec),
            jobs: states,
            pending: std::collections::VecDeque::new(),
            running: Vec::new(),
            now: 0.0,
            heap: BinaryHeap::new(),
            seq: 0,
            wakes: HashSet::new(),
            dirty: false,
            fresh: Vec::new(),
            demands: std::collections::BTreeMap::new(),
            stale: 0,
            keep_running: preemptive,
            datasets: vec![Vec::new(); spec.machines()],
            ranked: None,
        }
    }

    pub(crate) fn push(&mut self, t: f64, kind: Kind) {
        self.seq += 1;
        self.heap.push(Event {
            t,
            seq: self.seq,
            kind,
        });
    }

    pub(crate) fn wake_at(&mut self, t: f64) {
        if t > self.now && self.wakes.insert(t.to_bits()) {
            self.push(t, Kind::Wake);
        }
    }

    /// Re-queues `i` keeping `pending` in (arrival, index) order: its
    /// entry from before it started is reused where still there (stale),
    /// found by binary search like the place to insert it otherwise.
    pub(crate) fn enqueue(&mut self, i: u32) {
        let jobs = &self.jobs;
        let key = |j: u32| (jobs[j as usize].spec.arrival, j);
        let k = key(i);
        let pos = self
            .pending
            .partition_point(|&j| key(j).0.total_cmp(&k.0).then(j.cmp(&k.1)).is_lt());
        if self.pending.get(pos) == Some(&i) {
            self.stale -= 1;
        } else {
            self.pending.insert(pos, i);
        }
        self.add_demand(i);
    }

    /// Drops the entries of `pending` no longer wanted (those not pending;
    /// under a preemptive policy those of finished jobs): at the front at
    /// once, elsewhere once they are over a quarter of the queue.
    fn compact_pending(&mut self) {
        let jobs = &self.jobs;
        let keep = |i: u32| match jobs[i as usize].status {
            Status::Pending => true,
            Status::Running => self.keep_running,
            _ => false,
        };
        while self.pending.front().is_some_and(|&i| !keep(i)) {
            self.pending.pop_front();
            self.stale -= 1;
        }
        let parked = if self.keep_running {
            self.running.len()
        } else {
            0
        };
        if self.stale.saturating_sub(parked) > 64 + self.pending.len() / 4 {
            self.pending.retain(|&i| keep(i));
            self.stale = parked;
        }
    }

    pub(crate) fn add_demand(&mut self, i: u32) {
        *self
            .demands
            .entry(self.jobs[i as usize].spec.gpus)
            .or_insert(0) += 1;
    }

    pub(crate) fn remove_demand(&mut self, i: u32) {
        let g = self.jobs[i as usize].spec.gpus;
        if let Some(n) = self.demands.get_mut(&g) {
            *n -= 1;
            if *n == 0 {
                self.demands.remove(&g);
            }
        }
    }

    fn complete(&mut self, i: u32) {
        let now = self.now;
        let j = &mut self.jobs[i as usize];
        j.advance(now);
        j.done = j.spec.iterations;
        j.finish = Some(now);
        j.status = Status::Done;
        j.version += 1;
        self.unhost(i);
        self.running.retain(|&r| r != i);
        self.dirty = true;
    }

    /// Releases `i`'s GPUs and dataset marks.
    pub(crate) fn unhost(&mut self, i: u32) {
        let j = &mut self.jobs[i as usize];
        let gpus = std::mem::take(&mut j.gpus);
        let machines = std::mem::take(&mut j.machines);
        let ds = j.dataset;
        self.cluster.release(i, &gpus);
        for (m, _) in machines {
            let list = &mut self.datasets[m];
            if let Some(p) = list.iter().position(|e| e.0 == ds) {
                list[p].1 -= 1;
                if list[p].1 == 0 {
                    list.swap_remove(p);
                }
            }
        }
    }

    /// Drops stale finish events once they dominate the heap.
    fn prune_heap(&mut self) {
        if self.heap.len() <= 64 + 8 * self.running.len() {
            return;
        }
        let jobs = &self.jobs;
        let live: Vec<Event> = std::mem::take(&mut self.heap)
            .into_vec()
            .into_iter()
            .filter(|e| match e.kind {
                Kind::Finish(i, v) => {
                    jobs[i as usize].version == v && jobs[i as usize].status == Status::Running
                }
                _ => true,
            })
            .collect();
        self.heap = BinaryHeap::from(live);
    }

    /// Recomputes multipliers after placements changed; reschedules the
    /// finishes that moved.
    fn refresh(&mut self) {
        let now = self.now;
        for i in std::mem::take(&mut self.fresh) {
            let j = &mut self.jobs[i as usize];
            if j.status == Status::Running {
                j.net = 0.0; // forces a finish event below
            }
        }
        let view: Vec<Running<'_>> = self
            .running
            .iter()
            .map(|&i| {
                let j = &self.jobs[i as usize];
                Running {
                    spec: &j.spec,
                    dataset: j.dataset,
                    level: j.level,
                    machines: &j.machines,
                }
            })
            .collect();
        let mults = rates(&self.cluster.spec, &self.cfg, &view);
        drop(view);
        for (k, (net, cpu, cores)) in mults.into_iter().enumerate() {
            let i = self.running[k];
            let j = &mut self.jobs[i as usize];
            if j.net == net && j.cpu == cpu {
                if j.load_cores != cores {
                    j.advance(now);
                    j.load_cores = cores;
                }
                continue;
            }
            j.advance(now);
            j.net = net;
            j.cpu = cpu;
            j.load_cores = cores;
            j.version += 1;
            let (t, v) = (j.finish_at(now), j.version);
            self.push(t, Kind::Finish(i, v));
        }
        self.dirty = false;
    }
}

/// Simulates `jobs` on `spec` under `policy`; `progress(done, total)` is
/// called now and then.
pub fn simulate(
    spec: &ClusterSpec,
    cfg: &SimConfig,
    jobs: &[JobSpec],
    policy: &mut dyn Policy,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, SimError> {
    validate(spec, jobs)?;
    if !(cfg.lease.is_finite()
        && cfg.lease > 0.0
        && cfg.restart_cost.is_finite()
        && cfg.restart_cost >= 0.0)
    {
        return Err(SimError::Config(
            "lease must be > 0 and restart cost >= 0 seconds".into(),
        ));
    }
    let mut core = Core::new(spec, cfg, jobs, policy.preemptive());
    let mut run = Run::new(jobs);
    while run.finished < jobs.len() {
        let Some(now) = run.next_instant(&core) else {
            return Err(SimError::Config(format!(
                "policy {} left {} jobs pending on an idle cluster at t={:.0}s (a policy bug)",
                policy.name(),
                core.pending.len() - core.stale,
                core.now
            )));
        };
        core.now = now;
        run.admit(&mut core, policy);
        run.arm_lease(&mut core);
        let lease = run.take_due(&mut core, progress);
        // Outside lease rounds a pass can only start jobs: skip it when not
        // even the smallest waiting job fits in the free GPUs.
        let smallest = core.demands.keys().next().copied();
        if lease || smallest.is_some_and(|g| g as u64 <= core.cluster.free_total()) {
            let mut s = Sched::new(&mut core, lease);
            policy.schedule(&mut s);
        }
        core.compact_pending();
        if lease {
            run.rearm_lease(&mut core);
        }
        if core.dirty {
            core.refresh();
        }
        core.prune_heap();
        run.sample(&core);
    }
    progress(run.finished, jobs.len());
    Ok(Outcome {
        policy: policy.name().to_string(),
        jobs: core.jobs,
        timeline: run.timeline,
        total_gpus: spec.total_gpus(),
        events: run.events,
    })
}

/// The event loop's own state: the arrivals still to come, the counts, the
/// lease timer and the occupancy timeline.
struct Run<'j> {
    jobs: &'j [JobSpec],
    /// Job indices by (arrival, index); `next` is the first not yet
    /// submitted.
    order: Vec<u32>,
    next: usize,
    finished: usize,
    events: u64,
    /// Whether a lease round is in the heap.
    armed: bool,
    timeline: Vec<Sample>,
}

impl<'j> Run<'j> {
    fn new(jobs: &'j [JobSpec]) -> Self {
        let mut order: Vec<u32> = (0..jobs.len() as u32).collect();
        order.sort_by(|&a, &b| {
            jobs[a as usize]
                .arrival
                .total_cmp(&jobs[b as usize].arrival)
                .then(a.cmp(&b))
        });
        Run {
            jobs,
            order,
            next: 0,
            finished: 0,
            events: 0,
            armed: false,
            timeline: Vec::new(),
        }
    }

    /// The next arrival or event time (`None`: nothing will ever happen).
    fn next_instant(&self, core: &Core) -> Option<f64> {
        let ta = self
            .order
            .get(self.next)
            .map(|&i| self.jobs[i as usize].arrival);
        let th = core.heap.peek().map(|e| e.t);
        match (ta, th) {
            (Some(a), Some(h)) => Some(a.min(h)),
            (a, h) => a.or(h),
        }
    }

    /// Submits the jobs arriving by now.
    fn admit(&mut self, core: &mut Core, policy: &mut dyn Policy) {
        let now = core.now;
        while let Some(&i) = self.order.get(self.next) {
            if self.jobs[i as usize].arrival > now {
                break;
            }
            let j = &mut core.jobs[i as usize];
            j.status = Status::Pending;
            j.wait_since = j.spec.arrival;
            core.pending.push_back(i);
            core.add_demand(i);
            if let Some(r) = core.ranked.as_mut() {
                r.arrived(i);
            }
            policy.arrived(i, &core.jobs[i as usize]);
            self.next += 1;
            self.events += 1;
        }
    }

    /// Lease rounds are armed only while a job waits: a round with nothing
    /// pending preempts nothing and starts nothing, so idle or uncontended
    /// stretches of simulated time cost no events. Boundaries stay at
    /// multiples of the lease.
    fn arm_lease(&mut self, core: &mut Core) {
        if core.keep_running && !self.armed && core.pending.len() > core.stale {
            let k = (core.now / core.cfg.lease).ceil().max(1.0);
            core.push(k * core.cfg.lease, Kind::Lease);
            self.armed = true;
        }
    }

    /// After a lease round, the next one while jobs still wait.
    fn rearm_lease(&mut self, core: &mut Core) {
        if self.finished < self.jobs.len() && core.pending.len() > core.stale {
            core.push(core.now + core.cfg.lease, Kind::Lease);
            self.armed = true;
        }
    }

    /// Handles the events due by now; returns whether one was a lease
    /// boundary.
    fn take_due(&mut self, core: &mut Core, progress: &mut dyn FnMut(usize, usize)) -> bool {
        let mut lease = false;
        while core.heap.peek().is_some_and(|e| e.t <= core.now) {
            let Some(e) = core.heap.pop() else { break };
            self.events += 1;
            match e.kind {
                Kind::Finish(i, v) => {
                    let j = &core.jobs[i as usize];
                    if j.version == v && j.status == Status::Running {
                        core.complete(i);
                        self.finished += 1;
                        if self.finished.is_multiple_of(1000) {
                            progress(self.finished, self.jobs.len());
                        }
                    }
                }
                Kind::Lease => {
                    lease = true;
                    self.armed = false;
                }
                Kind::Wake => {
                    core.wakes.remove(&e.t.to_bits());
                }
            }
        }
        lease
    }

    /// Records the occupancy now if it changed.
    fn sample(&mut self, core: &Core) {
        let sample = Sample {
            t: core.now,
            busy: core.cluster.spec.total_gpus() - core.cluster.free_total(),
            pending: core.pending.len() - core.stale,
        };
        if self
            .timeline
            .last()
            .is_none_or(|l| (l.busy, l.pending) != (sample.busy, sample.pending))
        {
            self.timeline.push(sample);
        }
    }
}
