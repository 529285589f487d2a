//! Reading: what `batchcast runs`, the dashboard and the exporters ask.

use rusqlite::{params, OptionalExtension, Row};

use crate::error::{Result, StoreError};
use crate::{
    Event, Experiment, ExperimentId, LogStream, MetricPoint, Param, ParamSource, Run, RunFilter,
    RunId, RunRow, Store, Workload, WorkloadId,
};

const RUN_COLUMNS: &str = "e.name, w.name, r.id, r.workload_id, r.name, r.status, r.command, r.devices, r.collocation,
     r.listeners, r.host, r.plan_file, r.plan_row, r.pid, r.runner_pid, r.runner_start, r.start_ms, r.end_ms,
     r.exit_code, r.message, r.env";
const RUN_FROM: &str =
    "FROM runs r JOIN workloads w ON r.workload_id = w.id JOIN experiments e ON w.experiment_id = e.id";

/// A raw row, before its JSON and status columns are checked.
struct RawRun {
    experiment: String,
    workload: String,
    id: RunId,
    workload_id: WorkloadId,
    name: String,
    status: String,
    command: String,
    devices: String,
    collocation: String,
    listeners: String,
    host: String,
    plan_file: Option<String>,
    plan_row: Option<i64>,
    pid: Option<i64>,
    runner_pid: Option<i64>,
    runner_start: Option<i64>,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    exit_code: Option<i64>,
    message: Option<String>,
    env: String,
}

impl RawRun {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<RawRun> {
        Ok(RawRun {
            experiment: r.get(0)?,
            workload: r.get(1)?,
            id: r.get(2)?,
            workload_id: r.get(3)?,
            name: r.get(4)?,
            status: r.get(5)?,
            command: r.get(6)?,
            devices: r.get(7)?,
            collocation: r.get(8)?,
            listeners: r.get(9)?,
            host: r.get(10)?,
            plan_file: r.get(11)?,
            plan_row: r.get(12)?,
            pid: r.get(13)?,
            runner_pid: r.get(14)?,
            runner_start: r.get(15)?,
            start_ms: r.get(16)?,
            end_ms: r.get(17)?,
            exit_code: r.get(18)?,
            message: r.get(19)?,
            env: r.get(20)?,
        })
    }

    fn check(self) -> Result<RunRow> {
        fn list(field: &'static str, s: &str) -> Result<Vec<String>> {
            serde_json::from_str(s).map_err(|_| StoreError::Corrupt {
                field,
                value: s.to_string(),
            })
        }
        Ok(RunRow {
            experiment: self.experiment,
            workload: self.workload,
            run: Run {
                id: self.id,
                workload_id: self.workload_id,
                name: self.name,
                status: self.status.parse()?,
                command: list("runs.command", &self.command)?,
                devices: list("runs.devices", &self.devices)?,
                collocation: self.collocation,
                listeners: list("runs.listeners", &self.listeners)?,
                host: self.host,
                plan_file: self.plan_file,
                plan_row: self.plan_row,
                pid: self.pid,
                runner_pid: self.runner_pid,
                runner_start: self.runner_start,
                start_ms: self.start_ms,
                end_ms: self.end_ms,
                exit_code: self.exit_code,
                message: self.message,
                env: serde_json::from_str(&self.env).map_err(|_| StoreError::Corrupt {
                    field: "runs.env",
                    value: self.env.clone(),
                })?,
            },
        })
    }
}

impl Store {
    /// Every experiment, oldest first.
    pub fn experiments(&self) -> Result<Vec<Experiment>> {
        self.all(
            "SELECT id, name, created_ms FROM experiments ORDER BY id",
            [],
            |r| {
                Ok(Experiment {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    created_ms: r.get(2)?,
                })
            },
        )
    }

    /// The workloads of an experiment, in plan order.
    pub fn workloads(&self, experiment: ExperimentId) -> Result<Vec<Workload>> {
        self.all(
            "SELECT id, experiment_id, name, data, position FROM workloads WHERE experiment_id = ?1
             ORDER BY position, id",
            [experiment],
            workload_from_row,
        )
    }

    /// One workload.
    pub fn workload_by_id(&self, id: WorkloadId) -> Result<Workload> {
        self.conn
            .query_row(
                "SELECT id, experiment_id, name, data, position FROM workloads WHERE id = ?1",
                [id],
                workload_from_row,
            )
            .optional()
            .map_err(self.err())?
            .ok_or_else(|| StoreError::NotFound {
                what: format!("workload {id}"),
            })
    }

    /// Runs that pass `filter`, newest first.
    pub fn runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>> {
        // The search is a substring: `%`, `_` and the escape itself are
        // the characters, not wildcards.
        let like = filter.search.as_ref().map(|s| {
            let escaped = s
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        let sql = format!(
            "SELECT {RUN_COLUMNS} {RUN_FROM}
             WHERE (?1 IS NULL OR e.name = ?1) AND (?2 IS NULL OR w.name = ?2) AND (?3 IS NULL OR r.status = ?3)
               AND (?4 IS NULL OR r.name LIKE ?4 ESCAPE '\\' OR EXISTS (
                    SELECT 1 FROM params p WHERE p.run_id = r.id AND (p.key || '=' || p.value) LIKE ?4 ESCAPE '\\'))
             ORDER BY r.id DESC LIMIT ?5"
        );
        let limit = filter.limit.map_or(-1, |l| l.min(i64::MAX as usize) as i64);
        let raw = self.all(
            &sql,
            params![
                filter.experiment,
                filter.workload,
                filter.status.map(|s| s.as_str()),
                like,
                limit
            ],
            RawRun::from_row,
        )?;
        raw.into_iter().map(RawRun::check).collect()
    }

    /// The runs of one workload, in the order they were added.
    pub fn workload_runs(&self, workload: WorkloadId) -> Result<Vec<Run>> {
        let sql = format!("SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.workload_id = ?1 ORDER BY r.id");
        let raw = self.all(&sql, [workload], RawRun::from_row)?;
        raw.into_iter()
            .map(|r| r.check().map(|row| row.run))
            .collect()
    }

    /// One run with its workload's and experiment's names.
    pub fn run(&self, id: RunId) -> Result<RunRow> {
        let sql = format!("SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id = ?1");
        self.conn
            .query_row(&sql, [id], RawRun::from_row)
            .optional()
            .map_err(self.err())?
            .ok_or_else(|| StoreError::NotFound {
                what: format!("run {id}"),
            })?
            .check()
    }

    /// Whether the store holds run `id`.
    pub fn run_exists(&self, id: RunId) -> Result<bool> {
        self.conn
            .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")
            .and_then(|mut st| st.exists([id]))
            .map_err(self.err())
    }

    /// A run's parameters, plan ones first.
    pub fn params(&self, run: RunId) -> Result<Vec<Param>> {
        self.all(
            "SELECT key, value, source FROM params WHERE run_id = ?1 ORDER BY source DESC, rowid",
            [run],
            |r| {
                let source: String = r.get(2)?;
                Ok(Param {
                    key: r.get(0)?,
                    value: r.get(1)?,
                    source: if source == "plan" {
                        ParamSource::Plan
                    } else {
                        ParamSource::Logged
                    },
                })
            },
        )
    }

    /// The names of the metrics a run has, sorted.
    pub fn metric_keys(&self, run: RunId) -> Result<Vec<String>> {
        self.all(
            "SELECT DISTINCT key FROM metrics WHERE run_id = ?1 ORDER BY key",
            [run],
            |r| r.get(0),
        )
    }

    /// The values of one metric of a run in time order, those after
    /// `after_ms` only when given (for live updates), at most `limit`.
    pub fn metric(
        &self,
        run: RunId,
        key: &str,
        after_ms: Option<i64>,
        limit: usize,
    ) -> Result<Vec<MetricPoint>> {
        self.points(run, key, after_ms, limit, |_| true)
    }

    /// How many values one metric of a run has after `after_ms` (all when
    /// `None`), counted on the index without reading them: what a reader
    /// checks against its budget before it reads.
    pub fn metric_len(&self, run: RunId, key: &str, after_ms: Option<i64>) -> Result<usize> {
        let n: i64 = self
            .conn
            .prepare_cached(
                "SELECT COUNT(*) FROM metrics WHERE run_id = ?1 AND key = ?2 AND ts_ms > ?3",
            )
            .and_then(|mut st| {
                st.query_row(params![run, key, after_ms.unwrap_or(i64::MIN)], |r| {
                    r.get(0)
                })
            })
            .map_err(self.err())?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// One metric of a run after `after_ms`, thinned evenly to at most
    /// `max` (at least 2) points for a chart: the first value, every k-th
    /// after it and the last. Values are read one by one, so only those kept are held,
    /// however long the run. Values written while it reads are left for
    /// the next call (it reads as many as it counted first).
    pub fn metric_thinned(
        &self,
        run: RunId,
        key: &str,
        after_ms: Option<i64>,
        max: usize,
    ) -> Result<Vec<MetricPoint>> {
        let n = self.metric_len(run, key, after_ms)?;
        let keep = Thinning::new(n, max);
        self.points(run, key, after_ms, n, |i| keep.keeps(i))
    }

    /// The first `limit` values of one metric of a run after `after_ms`, in
    /// time order, those whose index `keep` accepts; read one by one.
    fn points(
        &self,
        run: RunId,
        key: &str,
        after_ms: Option<i64>,
        limit: usize,
        keep: impl Fn(usize) -> bool,
    ) -> Result<Vec<MetricPoint>> {
        let mut points = Vec::new();
        let mut i = 0;
        self.for_each_point_after(run, key, after_ms, limit, |step, ts_ms, value| {
            if keep(i) {
                points.push(MetricPoint {
                    run_id: run,
                    key: key.to_string(),
                    step,
                    ts_ms,
                    value,
                });
            }
            i += 1;
            Ok::<_, StoreError>(())
        })?;
        Ok(points)
    }

    /// Calls `each(step, ts_ms, value)` for every value of one metric of a
    /// run in time order, reading them one by one (exports of long runs
    /// never hold a whole metric in memory). Stops at `each`'s first error.
    pub fn for_each_point<E>(
        &self,
        run: RunId,
        key: &str,
        each: impl FnMut(i64, i64, f64) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<StoreError>,
    {
        self.for_each_point_after(run, key, None, usize::MAX, each)
    }

    /// [`Store::for_each_point`] for the first `limit` values after
    /// `after_ms` (all when `None`): a reader that counted them with
    /// [`Store::metric_len`] reads no more than it counted.
    pub fn for_each_point_after<E>(
        &self,
        run: RunId,
        key: &str,
        after_ms: Option<i64>,
        limit: usize,
        mut each: impl FnMut(i64, i64, f64) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<StoreError>,
    {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT step, ts_ms, value FROM metrics WHERE run_id = ?1 AND key = ?2 AND ts_ms > ?3
                 ORDER BY ts_ms, rowid LIMIT ?4",
            )
            .map_err(self.err())?;
        let mut rows = st
            .query(params![
                run,
                key,
                after_ms.unwrap_or(i64::MIN),
                limit.min(i64::MAX as usize) as i64
            ])
            .map_err(self.err())?;
        while let Some(r) = rows.next().map_err(self.err())? {
            let step: i64 = r.get(0).map_err(self.err())?;
            let ts: i64 = r.get(1).map_err(self.err())?;
            let value: f64 = r.get(2).map_err(self.err())?;
            each(step, ts, value)?;
        }
        Ok(())
    }

    /// The newest value of one metric of a run, if any.
    pub fn last_metric(&self, run: RunId, key: &str) -> Result<Option<f64>> {
        self.conn
            .query_row(
                "SELECT value FROM metrics WHERE run_id = ?1 AND key = ?2 ORDER BY ts_ms DESC, rowid DESC LIMIT 1",
                params![run, key],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())
    }

    /// A run's output on one stream: the last `max_bytes` of it (all when
    /// `None`), and whether earlier output was left out.
    pub fn log(
        &self,
        run: RunId,
        stream: LogStream,
        max_bytes: Option<usize>,
    ) -> Result<(Vec<u8>, bool)> {
        let mut st = self
            .conn
            .prepare("SELECT data FROM logs WHERE run_id = ?1 AND stream = ?2 ORDER BY seq DESC")
            .map_err(self.err())?;
        let mut rows = st
            .query(params![run, stream.as_str()])
            .map_err(self.err())?;
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut total = 0usize;
        let mut cut = false;
        while let Some(row) = rows.next().map_err(self.err())? {
            if max_bytes.is_some_and(|m| total >= m) {
                cut = true;
                break;
            }
            let data: Vec<u8> = row.get(0).map_err(self.err())?;
            total += data.len();
            chunks.push(data);
        }
        let mut out: Vec<u8> = chunks.into_iter().rev().flatten().collect();
        if let Some(m) = max_bytes.filter(|&m| out.len() > m) {
            out.drain(..out.len() - m);
            cut = true;
        }
        Ok((out, cut))
    }

    /// A run's whole output on one stream, handed to `each` a stored chunk
    /// (at most 64 KiB) at a time, in order: a reader holds one chunk, not
    /// the log. It is read a few chunks per query ([`Store::log_chunks`]),
    /// so no read transaction stays open while `each` waits: a log written
    /// meanwhile is read as far as it has come.
    pub fn for_each_log_chunk<E: From<StoreError>>(
        &self,
        run: RunId,
        stream: LogStream,
        mut each: impl FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        const PAGE: usize = 16;
        let mut after = -1i64;
        loop {
            let page = self.log_chunks(run, stream, after, PAGE)?;
            for (seq, data) in &page {
                after = *seq;
                each(data)?;
            }
            if page.len() < PAGE {
                return Ok(());
            }
        }
    }

    /// Up to `limit` stored chunks of a run's output on one stream, in
    /// order, those after the chunk `after` (-1: from the start), each with
    /// its place, which the next page starts after.
    pub fn log_chunks(
        &self,
        run: RunId,
        stream: LogStream,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Vec<u8>)>> {
        self.all(
            "SELECT seq, data FROM logs WHERE run_id = ?1 AND stream = ?2 AND seq > ?3
             ORDER BY seq LIMIT ?4",
            params![
                run,
                stream.as_str(),
                after,
                limit.min(i64::MAX as usize) as i64
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// What happened to a run that its reader should know (listeners that
    /// were unavailable, why it was killed), oldest first.
    pub fn events(&self, run: RunId) -> Result<Vec<Event>> {
        self.all(
            "SELECT ts_ms, source, message FROM events WHERE run_id = ?1 ORDER BY ts_ms, rowid",
            [run],
            |r| {
                Ok(Event {
                    ts_ms: r.get(0)?,
                    source: r.get(1)?,
                    message: r.get(2)?,
                })
            },
        )
    }

    /// How many events a run has, counted on the index without reading
    /// them.
    pub fn event_count(&self, run: RunId) -> Result<usize> {
        let n: i64 = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM events WHERE run_id = ?1")
            .and_then(|mut st| st.query_row([run], |r| r.get(0)))
            .map_err(self.err())?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// A run's first `limit` events, oldest first, their source and
    /// message each cut to `chars` characters by the query: a reader holds
    /// no more than it asked for, whatever the file holds.
    pub fn events_head(&self, run: RunId, limit: usize, chars: usize) -> Result<Vec<Event>> {
        self.all(
            "SELECT ts_ms, substr(source, 1, ?3), substr(message, 1, ?3) FROM events
             WHERE run_id = ?1 ORDER BY ts_ms, rowid LIMIT ?2",
            params![
                run,
                limit.min(i64::MAX as usize) as i64,
                chars.min(i64::MAX as usize) as i64
            ],
            |r| {
                Ok(Event {
                    ts_ms: r.get(0)?,
                    source: r.get(1)?,
                    message: r.get(2)?,
                })
            },
        )
    }
}

fn workload_from_row(r: &Row<'_>) -> rusqlite::Result<Workload> {
    Ok(Workload {
        id: r.get(0)?,
        experiment_id: r.get(1)?,
        name: r.get(2)?,
        data: r.get(3)?,
        position: r.get(4)?,
    })
}

/// Which of `n` values in order a chart of at most `max` points keeps:
/// every `stride`-th from the first, and the last.
#[derive(Clone, Copy, Debug)]
struct Thinning {
    n: usize,
    stride: usize,
}

impl Thinning {
    /// `max` is at least 2 (the two ends).
    fn new(n: usize, max: usize) -> Thinning {
        let max = max.max(2);
        // Multiples of `stride` below `n` number at most `max - 1` whenever
        // the last value is not one of them, so the last one fits.
        let stride = if n <= max {
            1
        } else {
            (n - 1).div_ceil(max - 1)
        };
        Thinning { n, stride }
    }

    fn keeps(self, i: usize) -> bool {
        i.is_multiple_of(self.stride) || i + 1 == self.n
    }
}

#[cfg(test)]
mod tests {
    use super::Thinning;
    use proptest::prelude::*;

    proptest! {
        /// At most `max` kept, the first and the last among them, evenly
        /// spaced; all of them when they fit.
        #[test]
        fn thinning_keeps_at_most_max_with_both_ends(n in 0usize..5000, max in 2usize..300) {
            let t = Thinning::new(n, max);
            let kept: Vec<usize> = (0..n).filter(|&i| t.keeps(i)).collect();
            prop_assert!(kept.len() <= max);
            if n <= max {
                prop_assert_eq!(kept.len(), n);
            }
            if n > 0 {
                prop_assert_eq!(kept[0], 0);
                prop_assert_eq!(*kept.last().unwrap(), n - 1);
            }
            if n > max {
                prop_assert!(kept.len() >= max / 2, "{} of {} kept for max {}", kept.len(), n, max);
            }
        }
    }
}
