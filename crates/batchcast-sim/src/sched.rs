//! What a policy may see and do at one decision instant.

use crate::cluster::ClusterSpec;
use crate::config::DataSharing;
use crate::engine::Core;
use crate::job::Locality;
use crate::placement::place;
use crate::state::{JobState, Status};

/// A policy's handle on the simulation at one instant.
pub struct Sched<'a> {
    core: &'a mut Core,
    lease: bool,
}

impl<'a> Sched<'a> {
    pub(crate) fn new(core: &'a mut Core, lease: bool) -> Self {
        Sched { core, lease }
    }

    /// The current time, seconds.
    pub fn now(&self) -> f64 {
        self.core.now
    }

    /// Whether this instant is a lease boundary (preemption allowed).
    pub fn lease_boundary(&self) -> bool {
        self.lease
    }

    /// The cluster's shape.
    pub fn spec(&self) -> &ClusterSpec {
        &self.core.cluster.spec
    }

    /// Free GPUs now.
    pub fn free_gpus(&self) -> u64 {
        self.core.cluster.free_total()
    }

    /// GPUs of the smallest waiting job (0 when none waits).
    pub fn smallest_demand(&self) -> u64 {
        self.core.demands.keys().next().map_or(0, |&g| g as u64)
    }

    /// Length of the waiting queue, which may include jobs that already
    /// started (check `Status`).
    pub fn pending_len(&self) -> usize {
        self.core.pending.len()
    }

    /// The `k`-th waiting job in (arrival, index) order; jobs started in
    /// this pass keep their place until it ends (check `Status`).
    pub fn pending_at(&self, k: usize) -> u32 {
        self.core.pending[k]
    }

    /// Waiting jobs, in (arrival, index) order.
    pub fn pending(&self) -> Vec<u32> {
        let jobs = &self.core.jobs;
        self.core
            .pending
            .iter()
            .copied()
            .filter(|&i| jobs[i as usize].status == Status::Pending)
            .collect()
    }

    /// Running jobs.
    pub fn running(&self) -> Vec<u32> {
        self.core.running.clone()
    }

    /// A job's state (progress accounted up to its last rate change).
    pub fn job(&self, i: u32) -> &JobState {
        &self.core.jobs[i as usize]
    }

    /// Ideal seconds of work `i` has left, as of now.
    pub fn remaining_now(&self, i: u32) -> f64 {
        let j = &self.core.jobs[i as usize];
        if j.status != Status::Running {
            return j.remaining();
        }
        let work = (self.core.now - j.last.max(j.stall_until)).max(0.0);
        let done = j.done + work / (j.spec.iter_time * j.net.max(1.0) * j.cpu.max(1.0));
        (j.spec.iterations - done).max(0.0) * j.spec.iter_time
    }

    /// Waiting jobs that could fit in the free GPUs now, in arrival order
    /// (the only ones a pass can start without preempting).
    pub fn pending_fitting(&self) -> Vec<u32> {
        let free = self.core.cluster.free_total();
        self.core
            .pending
            .iter()
            .copied()
            .filter(|&i| {
                let j = &self.core.jobs[i as usize];
                j.status == Status::Pending && j.spec.gpus as u64 <= free
            })
            .collect()
    }

    /// GPU-seconds `i` has held, as of now.
    pub fn attained_now(&self, i: u32) -> f64 {
        let j = &self.core.jobs[i as usize];
        match j.status {
            Status::Running => j.attained + (self.core.now - j.last).max(0.0) * j.spec.gpus as f64,
            _ => j.attained,
        }
    }

    /// The ranked waiting jobs of `policy::ranked_round` (`None` until its
    /// first round).
    pub(crate) fn ranked_mut(&mut self) -> &mut Option<crate::policy::Ranked> {
        &mut self.core.ranked
    }

    /// Asks for another decision instant at `t` (a timer expiring).
    pub fn wake_at(&mut self, t: f64) {
        self.core.wake_at(t);
    }

    /// Starts pending job `i` at the tightest level with room, no wider than
    /// `max_level`. Returns the level, or `None` (nothing changes) when no
    /// placement fits.
    pub fn try_start(&mut self, i: u32, max_level: Locality) -> Option<Locality> {
        let c = &mut *self.core;
        let j = &c.jobs[i as usize];
        if j.status != Status::Pending || c.cluster.free_total() < j.spec.gpus as u64 {
            return None;
        }
        let ds = j.dataset;
        let datasets = &c.datasets;
        let prefer = c.cfg.data_sharing == DataSharing::SharePlace;
        let shares = |m: usize| datasets[m].iter().any(|e| e.0 == ds);
        let (gpus, level) = place(&c.cluster, j.spec.gpus, max_level, prefer, &shares)?;
        c.cluster.assign(i, &gpus);
        let mut machines: Vec<(usize, u32)> = Vec::new();
        let per = c.cluster.spec.gpus_per_machine;
        for &g in &gpus {
            let m = (g / per) as usize;
            match machines.last_mut() {
                Some(last) if last.0 == m => last.1 += 1,
                _ => machines.push((m, 1)),
            }
        }
        machines.sort_unstable();
        machines.dedup_by(|a, b| {
            if a.0 == b.0 {
                b.1 += a.1;
                true
            } else {
                false
            }
        });
        for &(m, _) in &machines {
            match c.datasets[m].iter_mut().find(|e| e.0 == ds) {
                Some(e) => e.1 += 1,
                None => c.datasets[m].push((ds, 1)),
            }
        }
        let now = c.now;
        let j = &mut c.jobs[i as usize];
        j.queued += now - j.wait_since;
        j.first_start.get_or_insert(now);
        j.status = Status::Running;
        j.last = now;
        j.stall_until = if j.preemptions > 0 {
            now + c.cfg.restart_cost
        } else {
            now
        };
        j.gpus = gpus;
        j.machines = machines;
        j.level = level;
        j.widest = j.widest.max(level);
        c.running.push(i);
        c.fresh.push(i);
        c.stale += 1;
        c.remove_demand(i);
        c.dirty = true;
        Some(level)
    }

    /// Preempts running job `i` (it checkpoints now and pays the restart
    /// cost when it starts again). Returns false if it was not running.
    pub fn preempt(&mut self, i: u32) -> bool {
        let c = &mut *self.core;
        let now = c.now;
        let j = &mut c.jobs[i as usize];
        if j.status != Status::Running {
            return false;
        }
        j.advance(now);
        j.status = Status::Pending;
        j.wait_since = now;
        j.preemptions += 1;
        j.version += 1;
        c.unhost(i);
        c.running.retain(|&r| r != i);
        c.fresh.retain(|&r| r != i);
        c.enqueue(i);
        c.dirty = true;
        true
    }
}
