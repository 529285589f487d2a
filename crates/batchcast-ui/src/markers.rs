//! The events a chart marks on its timeline: each charted run's own
//! events (the runner's, a listener's, a consumer's, whatever their
//! source), and, for a run that reads a workload's shared producer, the
//! events of that producer's run ([`keys::DATA_RUN`]: its triggers, the
//! dataset growing, a resumed stream). Every source is treated alike.

use std::collections::BTreeSet;

use batchcast_store::{keys, Event, RunId, RunRow, Store, WorkloadId};
use serde::Serialize;

use crate::error::UiError;

/// Markers sent for one chart, at most; the rest are counted.
pub(crate) const MAX_MARKERS: usize = 2_000;
/// Characters of an event's source and of its message sent, at most.
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
/// the second value counts those left off. A shared producer's events
/// come once, with the first of its workload's runs in `runs` (the page
/// draws each once, on the first of those runs where it has a place). No
/// more events are read than can be sent: each source's first ones,
/// counted on the index first.
pub(crate) fn markers(store: &Store, runs: &[RunRow]) -> Result<(Vec<Marker>, usize), UiError> {
    let mut workloads: BTreeSet<WorkloadId> = BTreeSet::new();
    let mut out = Vec::new();
    let mut left_off = 0;
    for r in runs {
        let room = MAX_MARKERS - out.len();
        let mut sources = vec![Source::read(store, r.run.id, room)?];
        if r.run.name != keys::DATA_RUN && workloads.insert(r.run.workload_id) {
            if let Some(data) = producer_run(store, r.run.workload_id)? {
                sources.push(Source::read(store, data, room)?);
            }
        }
        let total: usize = sources.iter().map(|s| s.count).sum();
        // Stable: at one time, the run's own events before its producer's.
        let mut mine: Vec<(RunId, &Event)> = sources
            .iter()
            .flat_map(|s| s.events.iter().map(|e| (s.run, e)))
            .collect();
        mine.sort_by_key(|(_, e)| e.ts_ms);
        mine.truncate(room);
        left_off += total.saturating_sub(mine.len());
        out.extend(mine.into_iter().map(|(from, e)| Marker {
            run: r.run.id,
            from,
            ts_ms: e.ts_ms,
            elapsed: r.run.start_ms.map(|s| (e.ts_ms - s) as f64 / 1000.0),
            source: e.source.clone(),
            message: e.message.clone(),
        }));
    }
    Ok((out, left_off))
}

/// The first events of one run, cut to [`MAX_MESSAGE`], and how many it has.
struct Source {
    run: RunId,
    count: usize,
    events: Vec<Event>,
}

impl Source {
    /// At most `limit` of `run`'s events.
    fn read(store: &Store, run: RunId, limit: usize) -> Result<Source, UiError> {
        let count = store.event_count(run)?;
        let events = if limit == 0 || count == 0 {
            Vec::new()
        } else {
            store.events_head(run, limit, MAX_MESSAGE)?
        };
        // Events recorded between the count and the read are counted too.
        let count = count.max(events.len());
        Ok(Source { run, count, events })
    }
}
