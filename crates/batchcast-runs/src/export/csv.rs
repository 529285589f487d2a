//! Metrics as CSV: one row per point, long format.

use std::io::Write;

use crate::error::{Result, StoreError};
use crate::store::{RunId, Store};

/// Writes every point of `keys` (all of each run's metrics when empty) of
/// `runs` as CSV: `run_id, experiment, workload, run, key, step, ts_ms,
/// elapsed_s, value`, where `elapsed_s` counts from the run's start so
/// that runs line up. Returns the rows written.
pub fn metrics_csv(store: &Store, runs: &[RunId], keys: &[String], out: impl Write) -> Result<u64> {
    let io = |e: std::io::Error| StoreError::Export(e.to_string());
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "run_id",
        "experiment",
        "workload",
        "run",
        "key",
        "step",
        "ts_ms",
        "elapsed_s",
        "value",
    ])
    .map_err(|e| io(e.into()))?;
    let mut rows = 0;
    for &id in runs {
        let row = store.run(id)?;
        let start = row.run.start_ms;
        let run_keys = if keys.is_empty() {
            store.metric_keys(id)?
        } else {
            keys.to_vec()
        };
        for key in &run_keys {
            store.for_each_point(id, key, |step, ts_ms, value| {
                let elapsed = start
                    .map(|s| format!("{:.3}", (ts_ms - s) as f64 / 1000.0))
                    .unwrap_or_default();
                w.write_record([
                    id.to_string(),
                    row.experiment.clone(),
                    row.workload.clone(),
                    row.run.name.clone(),
                    key.clone(),
                    step.to_string(),
                    ts_ms.to_string(),
                    elapsed,
                    value.to_string(),
                ])
                .map_err(|e| io(e.into()))?;
                rows += 1;
                Ok::<(), StoreError>(())
            })?;
        }
    }
    w.flush().map_err(io)?;
    Ok(rows)
}
