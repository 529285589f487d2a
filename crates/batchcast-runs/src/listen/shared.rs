//! The batchcast listener: for every consumer in a job's process tree,
//! what it received and how long it waited, from its producer's live
//! status (the same figures `batchcast status` shows).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::keys;

/// Producers asked per round, at most.
const MAX_PRODUCERS: usize = 64;
/// How long one producer may take to answer.
const QUERY_TIMEOUT: Duration = Duration::from_millis(250);

/// Every producer's status, asked once per round for all jobs.
pub(crate) fn snapshot() -> Vec<batchcast::StatusReport> {
    let dir = batchcast::default_dir();
    batchcast::list_names(&dir)
        .into_iter()
        .take(MAX_PRODUCERS)
        .filter_map(|name| {
            let ep = batchcast::Endpoint::in_dir(&name, &dir).ok()?;
            batchcast::query_status(&ep, QUERY_TIMEOUT).ok()
        })
        .collect()
}

/// One job's consumers.
#[derive(Default)]
pub(crate) struct Consumers {
    /// (producer pid, consumer id) -> (samples, wait seconds) last seen.
    seen: HashMap<(u32, u64), (f64, f64)>,
    last: Option<(Instant, f64, f64)>,
}

impl Consumers {
    pub(crate) fn sample(
        &mut self,
        reports: &[batchcast::StatusReport],
        tree: &HashSet<i32>,
        out: &mut Vec<(String, f64)>,
    ) {
        let mut lag = None;
        let mut live = 0usize;
        for r in reports {
            for c in r
                .consumers
                .iter()
                .filter(|c| c.pid != 0 && tree.contains(&(c.pid as i32)))
            {
                let rows = c.batch_size.or(r.batch_size).unwrap_or(0) as f64;
                self.seen
                    .insert((r.pid, c.id), (c.delivered as f64 * rows, c.wait_secs));
                lag = Some(lag.unwrap_or(0).max(c.lag));
                live += 1;
            }
        }
        if self.seen.is_empty() {
            return;
        }
        let samples: f64 = self.seen.values().map(|v| v.0).sum();
        let wait: f64 = self.seen.values().map(|v| v.1).sum();
        let now = Instant::now();
        out.push((keys::BATCHCAST_SAMPLES.into(), samples));
        if let Some(l) = lag {
            out.push((keys::BATCHCAST_LAG_BATCHES.into(), l as f64));
        }
        if let Some((then, s0, w0)) = self.last {
            let dt = now.duration_since(then).as_secs_f64();
            if dt > 0.0 {
                out.push((
                    keys::BATCHCAST_SAMPLES_PER_S.into(),
                    (samples - s0).max(0.0) / dt,
                ));
                if live > 0 {
                    let share = ((wait - w0).max(0.0) / dt / live as f64).clamp(0.0, 1.0);
                    out.push((keys::BATCHCAST_DATA_WAIT_SHARE.into(), share));
                }
            }
        }
        self.last = Some((now, samples, wait));
    }
}
