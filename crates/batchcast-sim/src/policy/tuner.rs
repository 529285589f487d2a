//! Dally's delay-timer auto-tuner: per GPU demand, the waits of the last
//! `window` jobs that started, split by the level they got; a timer is the
//! mean plus two standard deviations of those waits, clamped to bounds.
//! Both timers of a demand are computed when it records a start and read
//! from there, so asking for them costs a look-up.

use std::collections::{HashMap, VecDeque};

use crate::job::Locality;

/// Recent waits per demand size.
#[derive(Clone, Debug)]
pub struct Tuner {
    window: usize,
    bounds: (f64, f64),
    history: HashMap<u32, VecDeque<(f64, Locality)>>,
    /// Per demand, (rack, network) timers of its current history.
    timers: HashMap<u32, (Option<f64>, Option<f64>)>,
}

impl Tuner {
    /// A tuner remembering `window` starts per demand, timers within `bounds`.
    pub fn new(window: usize, bounds: (f64, f64)) -> Self {
        Tuner {
            window: window.max(1),
            bounds,
            history: HashMap::new(),
            timers: HashMap::new(),
        }
    }

    /// Records that a job of `gpus` GPUs started at `level` after `wait` s.
    pub fn record(&mut self, gpus: u32, wait: f64, level: Locality) {
        let h = self.history.entry(gpus).or_default();
        if h.len() == self.window {
            h.pop_front();
        }
        h.push_back((wait, level));
        let rack = self.timer(gpus, |l| l <= Locality::Machine);
        let net = self.timer(gpus, |l| l == Locality::Rack);
        self.timers.insert(gpus, (rack, net));
    }

    /// The tuned timer for jobs of `gpus` GPUs from waits of starts at
    /// levels `levels`, or `None` without such history.
    fn timer(&self, gpus: u32, levels: impl Fn(Locality) -> bool) -> Option<f64> {
        let waits: Vec<f64> = self
            .history
            .get(&gpus)?
            .iter()
            .filter(|(_, l)| levels(*l))
            .map(|(w, _)| *w)
            .collect();
        if waits.is_empty() {
            return None;
        }
        let n = waits.len() as f64;
        let mean = waits.iter().sum::<f64>() / n;
        let var = waits.iter().map(|w| (w - mean) * (w - mean)).sum::<f64>() / n;
        Some((mean + 2.0 * var.sqrt()).clamp(self.bounds.0, self.bounds.1))
    }

    /// Rack timer: from waits of jobs that got one machine.
    pub fn rack_timer(&self, gpus: u32) -> Option<f64> {
        self.timers.get(&gpus).and_then(|t| t.0)
    }

    /// Network timer: from waits of jobs that got one rack.
    pub fn network_timer(&self, gpus: u32) -> Option<f64> {
        self.timers.get(&gpus).and_then(|t| t.1)
    }
}
