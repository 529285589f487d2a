//! Metric points as CSV, long format, one row a point: the one writer of
//! `batchcast runs export --csv` and of the dashboard's chart download.

use std::io::Write;

use crate::{Result, RunId, RunRow, Store, StoreError};

/// The columns of every metrics CSV, in order. `elapsed_s` counts from the
/// run's start (empty for a run that has none), so that runs line up.
pub const METRICS_CSV_COLUMNS: [&str; 9] = [
    "run_id",
    "experiment",
    "workload",
    "run",
    "key",
    "step",
    "ts_ms",
    "elapsed_s",
    "value",
];

/// A metrics CSV being written: the header at [`MetricsCsv::new`], a row
/// per [`MetricsCsv::point`].
pub struct MetricsCsv<W: Write> {
    out: csv::Writer<W>,
}

fn failed(e: impl Into<std::io::Error>) -> StoreError {
    StoreError::Export(e.into().to_string())
}

impl<W: Write> MetricsCsv<W> {
    /// Starts a CSV on `out` with the header [`METRICS_CSV_COLUMNS`].
    pub fn new(out: W) -> Result<Self> {
        let mut out = csv::Writer::from_writer(out);
        out.write_record(METRICS_CSV_COLUMNS).map_err(failed)?;
        Ok(Self { out })
    }

    /// Writes one point of metric `key` of `run`.
    pub fn point(
        &mut self,
        run: &RunRow,
        key: &str,
        step: i64,
        ts_ms: i64,
        value: f64,
    ) -> Result<()> {
        let elapsed = run
            .run
            .start_ms
            .map(|s| format!("{:.3}", (ts_ms - s) as f64 / 1000.0))
            .unwrap_or_default();
        self.out
            .write_record([
                run.run.id.to_string(),
                run.experiment.clone(),
                run.workload.clone(),
                run.run.name.clone(),
                key.to_string(),
                step.to_string(),
                ts_ms.to_string(),
                elapsed,
                value.to_string(),
            ])
            .map_err(failed)
    }

    /// Flushes what is buffered; returns the writer.
    pub fn finish(self) -> Result<W> {
        self.out.into_inner().map_err(|e| failed(e.into_error()))
    }
}

/// Writes every point of `keys` (all of each run's metrics when empty) of
/// `runs` as a metrics CSV. Returns the rows written.
pub fn metrics_csv(store: &Store, runs: &[RunId], keys: &[String], out: impl Write) -> Result<u64> {
    let mut csv = MetricsCsv::new(out)?;
    let mut rows = 0;
    for &id in runs {
        let row = store.run(id)?;
        let run_keys = if keys.is_empty() {
            store.metric_keys(id)?
        } else {
            keys.to_vec()
        };
        for key in &run_keys {
            store.for_each_point(id, key, |step, ts_ms, value| {
                csv.point(&row, key, step, ts_ms, value)?;
                rows += 1;
                Ok::<(), StoreError>(())
            })?;
        }
    }
    csv.finish()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MetricPoint, NewRun};

    #[test]
    fn rows_quote_names_and_leave_elapsed_empty_before_a_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("runs.db")).unwrap();
        let e = store.experiment("e,1").unwrap();
        let w = store.workload(e, "w \"x\"", None, 0).unwrap();
        let named = |name: &str| NewRun {
            name: name.into(),
            ..NewRun::default()
        };
        let (id, _) = store.add_run(w, &named("a")).unwrap();
        let point = |step, ts_ms, value| MetricPoint {
            run_id: id,
            key: "loss".into(),
            step,
            ts_ms,
            value,
        };
        store
            .insert_metrics(&[point(1, 1_000, 0.5), point(2, 2_500, -0.25)])
            .unwrap();
        let mut out = Vec::new();
        assert_eq!(metrics_csv(&store, &[id], &[], &mut out).unwrap(), 2);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            format!(
                "{}\n{id},\"e,1\",\"w \"\"x\"\"\",a,loss,1,1000,,0.5\n\
                 {id},\"e,1\",\"w \"\"x\"\"\",a,loss,2,2500,,-0.25\n",
                METRICS_CSV_COLUMNS.join(",")
            )
        );
    }
}
