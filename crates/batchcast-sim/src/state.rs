//! One job's state during a simulation, and how its progress advances.

use crate::job::{JobSpec, Locality};

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not yet submitted.
    Future,
    /// Submitted, waiting for GPUs.
    Pending,
    /// Holding GPUs.
    Running,
    /// Finished.
    Done,
}

/// A job during the simulation.
#[derive(Clone, Debug)]
pub struct JobState {
    /// The trace's job.
    pub spec: JobSpec,
    /// Interned dataset id.
    pub dataset: u32,
    /// Life stage.
    pub status: Status,
    /// GPUs held while running.
    pub gpus: Vec<u32>,
    /// (machine, GPUs there) while running.
    pub machines: Vec<(usize, u32)>,
    /// Level spanned while running.
    pub level: Locality,
    /// Iterations done.
    pub done: f64,
    /// GPU-seconds held so far (Tiresias' attained service).
    pub attained: f64,
    /// When it last became pending (arrival or preemption).
    pub wait_since: f64,
    /// Seconds spent pending in all.
    pub queued: f64,
    /// Times preempted.
    pub preemptions: u32,
    /// First start.
    pub first_start: Option<f64>,
    /// Finish time.
    pub finish: Option<f64>,
    /// Current network and CPU multipliers.
    pub net: f64,
    /// See `net`.
    pub cpu: f64,
    /// Data-loading cores attributed to it now (its share of the pipelines
    /// it uses, scaled down where a machine's cores are oversubscribed).
    pub load_cores: f64,
    /// Data-loading core-seconds attributed to it so far.
    pub loading: f64,
    /// Progress is accounted up to here.
    pub last: f64,
    /// No progress before this (restart after preemption).
    pub stall_until: f64,
    /// Seconds held without progress (restarts).
    pub stalled: f64,
    /// Seconds lost to the network (`dt * (1 - 1/net)`).
    pub comm: f64,
    /// Seconds lost to CPU starvation.
    pub cpu_lost: f64,
    /// Seconds held while running.
    pub held: f64,
    /// Bumped whenever the finish time changes (stale events are skipped).
    pub version: u32,
    /// The level of its first placement (the worst one is in `widest`).
    pub widest: Locality,
}

impl JobState {
    /// A job not yet submitted.
    pub fn new(spec: JobSpec, dataset: u32) -> Self {
        JobState {
            spec,
            dataset,
            status: Status::Future,
            gpus: Vec::new(),
            machines: Vec::new(),
            level: Locality::Slot,
            done: 0.0,
            attained: 0.0,
            wait_since: 0.0,
            queued: 0.0,
            preemptions: 0,
            first_start: None,
            finish: None,
            net: 1.0,
            cpu: 1.0,
            load_cores: 0.0,
            loading: 0.0,
            last: 0.0,
            stall_until: 0.0,
            stalled: 0.0,
            comm: 0.0,
            cpu_lost: 0.0,
            held: 0.0,
            version: 0,
            widest: Locality::Slot,
        }
    }

    /// Accounts progress from `last` to `now` at the current multipliers.
    pub fn advance(&mut self, now: f64) {
        if self.status != Status::Running || now <= self.last {
            return;
        }
        let dt = now - self.last;
        let stall = (self.stall_until.min(now) - self.last).max(0.0);
        let work = dt - stall;
        self.held += dt;
        self.stalled += stall;
        self.attained += dt * self.spec.gpus as f64;
        self.comm += work * (1.0 - 1.0 / self.net);
        self.cpu_lost += work / self.net * (1.0 - 1.0 / self.cpu);
        self.loading += work * self.load_cores;
        self.done = (self.done + work / (self.spec.iter_time * self.net * self.cpu))
            .min(self.spec.iterations);
        self.last = now;
    }

    /// When it finishes at the current multipliers (after `advance(now)`).
    pub fn finish_at(&self, now: f64) -> f64 {
        let left = (self.spec.iterations - self.done).max(0.0);
        now.max(self.stall_until) + left * self.spec.iter_time * self.net * self.cpu
    }

    /// Ideal seconds of work left.
    pub fn remaining(&self) -> f64 {
        (self.spec.iterations - self.done).max(0.0) * self.spec.iter_time
    }
}
