//! Dally: delay scheduling for consolidation, network-sensitive preemption
//! and auto-tuned delay timers.
//!
//! - Placement: a waiting job may take one machine at once; one rack only
//!   after it has waited its rack timer; anywhere only after its network
//!   timer. A job too big for a level skips it (a job wider than a machine
//!   may take a rack at once, one wider than a rack anywhere at once).
//! - Priority: discretised least attained service as in Tiresias, where a
//!   running job's attained GPU-seconds are weighted by its current network
//!   multiplier, so badly spread jobs drop in priority and are the first
//!   preempted at a lease boundary (then re-placed tighter).
//! - Timers: fixed, or (auto) tuned per demand size by `Tuner`.

use super::tiresias::queue;
use super::tuner::Tuner;
use super::{ranked_round, Policy};
use crate::job::Locality;
use crate::sched::Sched;
use crate::state::Status;

/// Dally's parameters.
#[derive(Clone, Debug)]
pub struct DallyConfig {
    /// Rack timer without history (or when not tuned), seconds.
    pub rack_timer: f64,
    /// Network timer without history (or when not tuned), seconds.
    pub network_timer: f64,
    /// Tune timers from recent waits.
    pub auto_tune: bool,
    /// Starts remembered per demand size.
    pub window: usize,
    /// Bounds of tuned timers, seconds.
    pub bounds: (f64, f64),
    /// Priority-queue thresholds on network-weighted GPU-seconds.
    pub thresholds: Vec<f64>,
}

impl Default for DallyConfig {
    fn default() -> Self {
        DallyConfig {
            rack_timer: 120.0,
            network_timer: 600.0,
            auto_tune: true,
            window: 50,
            bounds: (30.0, 3_600.0),
            thresholds: vec![3_600.0, 36_000.0],
        }
    }
}

/// The Dally policy.
pub struct Dally {
    cfg: DallyConfig,
    tuner: Tuner,
    /// No network timer is longer: a job that has waited this long may go
    /// anywhere whatever the tuner says (infinite where a parameter is NaN).
    longest: f64,
}

impl Dally {
    /// Dally with `cfg`.
    pub fn new(cfg: DallyConfig) -> Self {
        let tuner = Tuner::new(cfg.window, cfg.bounds);
        let mut caps = vec![cfg.rack_timer, cfg.network_timer];
        if cfg.auto_tune {
            caps.push(cfg.bounds.1);
        }
        let longest = if caps.iter().any(|t| t.is_nan()) {
            f64::INFINITY
        } else {
            caps.into_iter().fold(f64::NEG_INFINITY, f64::max)
        };
        Dally {
            cfg,
            tuner,
            longest,
        }
    }

    /// The (rack, network) timers for a job of `gpus` GPUs now.
    pub fn timers(&self, gpus: u32) -> (f64, f64) {
        let (mut rack, mut net) = (self.cfg.rack_timer, self.cfg.network_timer);
        if self.cfg.auto_tune {
            rack = self.tuner.rack_timer(gpus).unwrap_or(rack);
            net = self.tuner.network_timer(gpus).unwrap_or(net);
        }
        (rack, net.max(rack))
    }

    /// The widest level allowed after waiting `waited` s, and the wait at
    /// which the next level opens (if any).
    pub fn allowed(&self, tightest: Locality, gpus: u32, waited: f64) -> (Locality, Option<f64>) {
        let (rack, net) = self.timers(gpus);
        match tightest {
            Locality::Cluster => (Locality::Cluster, None),
            _ if waited >= net => (Locality::Cluster, None),
            Locality::Rack => (Locality::Rack, Some(net)),
            _ if waited >= rack => (Locality::Rack, Some(net)),
            _ => (Locality::Machine, Some(rack)),
        }
    }

    /// The tuner (for inspection).
    pub fn tuner_mut(&mut self) -> &mut Tuner {
        &mut self.tuner
    }
}

impl Dally {
    /// Dally's ranking key: the Tiresias queue of the network-weighted
    /// attained service, then arrival.
    pub(crate) fn key(&self) -> impl Fn(&Sched<'_>, u32) -> (f64, f64) {
        let th = self.cfg.thresholds.clone();
        move |s: &Sched<'_>, i: u32| {
            let j = s.job(i);
            let net = if j.status == Status::Running {
                j.net.max(1.0)
            } else {
                1.0
            };
            (queue(&th, s.attained_now(i) * net), j.spec.arrival)
        }
    }

    /// Starts waiting job `i` at the widest level its wait allows, or asks
    /// to decide again when the next level opens.
    pub(crate) fn visit(&mut self, s: &mut Sched<'_>, i: u32) {
        let now = s.now();
        let j = s.job(i);
        let (gpus, since) = (j.spec.gpus, j.wait_since);
        let (level, next) = if now - since >= self.longest {
            (Locality::Cluster, None)
        } else {
            self.allowed(s.spec().tightest_fit(gpus), gpus, now - since)
        };
        match s.try_start(i, level) {
            Some(got) => self.tuner.record(gpus, now - since, got),
            None => {
                if let Some(w) = next {
                    s.wake_at(since + w);
                }
            }
        }
    }
}

impl Policy for Dally {
    fn name(&self) -> &str {
        "dally"
    }

    fn preemptive(&self) -> bool {
        true
    }

    fn schedule(&mut self, s: &mut Sched<'_>) {
        let key = self.key();
        // A job that cannot fit is still visited while it may ask for a
        // wake-up: until it has waited the longest timer.
        let longest = self.longest;
        ranked_round(s, key, Some(longest), |s, i| self.visit(s, i));
    }
}
