//! The events a chart marks on its timeline: each charted run's own
//! events (the runner's, a listener's, a consumer's, whatever their
//! source), and, for a run that reads a workload's shared producer, the
//! events of that producer's run ([`keys::DATA_RUN`]: its triggers, the
//! dataset growing, a resumed stream). Every source is treated alike.

use std::collections::BTreeMap;

use batchcast_store::{keys, RunId, RunRow, Store, WorkloadId};
use serde::Serialize;

use crate::error::UiError;

/// Markers sent for one chart, at most; the rest are counted.
pub(crate) const MAX_MARKERS: usize = 2_000;
/// Characters of an event's message sent, at most.
const MAX_MESSAGE: usize = 300;

/// One event to mark on the charts of `run`.
#[derive(Serialize)]
pub(crate) struct Marker {
    /// The charted run the marker belongs to.
    pub(crate) run: RunId,
    /// The run the event was recorded for: `run` itself, or its
    /// workload's producer run.
    pub(crate) from: RunId,
    pub(crate) ts_ms: i64,
    /// Seconds since `run` started (negative: before it).
    pub(crate) elapsed: Option<f64>,
    pub(crate) source: String,
    pub(crate) message: String,
}

/// The run of `workload`'s shared producer ([`keys::DATA_RUN`]), if it has one.
pub(crate) fn producer_run(store: &Store, workload: WorkloadId) -> Result<Option<RunId>, UiError> {
    Ok(store
        .workload_runs(workload)?
        .into_iter()
        .find(|w| w.name == keys::DATA_RUN)
        .map(|w| w.id))
}

/// The markers of `runs`, oldest first per run, at most [`MAX_MARKERS`];
/// the second value counts those left off.
pub(crate) fn markers(store: &Store, runs: &[RunRow]) -> Result<(Vec<Marker>, usize), UiError> {
    let mut producers: BTreeMap<WorkloadId, Option<RunId>> = BTreeMap::new();
    let mut out = Vec::new();
    let mut left_off = 0;
    for r in runs {
        let mut from = vec![r.run.id];
        if r.run.name != keys::DATA_RUN {
            let data = match producers.get(&r.run.workload_id) {
                Some(d) => *d,
                None => {
                    let d = producer_run(store, r.run.workload_id)?;
                    producers.insert(r.run.workload_id, d);
                    d
                }
            };
            from.extend(data);
        }
        let mut mine = Vec::new();
        for id in from {
            for e in store.events(id)? {
                mine.push(Marker {
                    run: r.run.id,
                    from: id,
                    ts_ms: e.ts_ms,
                    elapsed: r.run.start_ms.map(|s| (e.ts_ms - s) as f64 / 1000.0),
                    source: e.source,
                    message: e.message.chars().take(MAX_MESSAGE).collect(),
                });
            }
        }
        mine.sort_by_key(|m| m.ts_ms);
        let room = MAX_MARKERS - out.len();
        left_off += mine.len().saturating_sub(room);
        out.extend(mine.into_iter().take(room));
    }
    Ok((out, left_off))
}
