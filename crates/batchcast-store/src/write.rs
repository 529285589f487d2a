//! Writing: what a runner, its listeners and the MLflow endpoint record.

use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use crate::error::{Result, StoreError};
use crate::{
    ExperimentId, LogStream, MetricPoint, NewRun, Orphan, ParamSource, RunId, RunStatus, Store,
    WorkloadId,
};

/// Longest chunk of output stored in one row; longer writes are split.
const LOG_CHUNK: usize = 64 * 1024;

impl Store {
    /// A transaction that holds the write lock from its start (`BEGIN
    /// IMMEDIATE`, waiting up to the busy timeout for it). A deferred one
    /// that reads before it writes could find its snapshot outdated by
    /// another writer's commit when it comes to write, which SQLite refuses
    /// at once with "database is locked", whatever the busy timeout.
    fn write_transaction(&mut self) -> Result<Transaction<'_>> {
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::sqlite(&self.path))
    }

    /// The experiment of this name, created when new.
    pub fn experiment(&self, name: &str) -> Result<ExperimentId> {
        self.conn
            .execute(
                "INSERT INTO experiments (name, created_ms) VALUES (?1, ?2) ON CONFLICT(name) DO NOTHING",
                params![name, super::now_ms()],
            )
            .map_err(self.err())?;
        self.conn
            .query_row("SELECT id FROM experiments WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .map_err(self.err())
    }

    /// The workload of this name in `experiment`, created when new; its
    /// shared pipeline and plan position are updated to the given ones.
    pub fn workload(
        &self,
        experiment: ExperimentId,
        name: &str,
        data: Option<&str>,
        position: i64,
    ) -> Result<WorkloadId> {
        self.conn
            .execute(
                "INSERT INTO workloads (experiment_id, name, data, position) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(experiment_id, name) DO UPDATE SET data = excluded.data, position = excluded.position",
                params![experiment, name, data, position],
            )
            .map_err(self.err())?;
        self.conn
            .query_row(
                "SELECT id FROM workloads WHERE experiment_id = ?1 AND name = ?2",
                params![experiment, name],
                |r| r.get(0),
            )
            .map_err(self.err())
    }

    /// The run of this name in `workload`, created PENDING when new. An
    /// existing run keeps its status and history (that is what makes a plan
    /// resumable); its command, devices and plan parameters are updated.
    pub fn add_run(&mut self, workload: WorkloadId, run: &NewRun) -> Result<(RunId, RunStatus)> {
        let json = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
        let path = self.path.clone();
        let tx = self.write_transaction()?;
        tx.execute(
            "INSERT INTO runs (workload_id, name, status, command, devices, collocation, listeners, host, plan_file, plan_row)
             VALUES (?1, ?2, 'PENDING', ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT(workload_id, name) DO UPDATE SET command = excluded.command, devices = excluded.devices,
                collocation = excluded.collocation, listeners = excluded.listeners,
                plan_file = excluded.plan_file, plan_row = excluded.plan_row",
            params![
                workload,
                run.name,
                json(&run.command),
                json(&run.devices),
                run.collocation,
                json(&run.listeners),
                run.host,
                run.plan_file,
                run.plan_row
            ],
        )
        .map_err(StoreError::sqlite(&path))?;
        let (id, status): (RunId, String) = tx
            .query_row(
                "SELECT id, status FROM runs WHERE workload_id = ?1 AND name = ?2",
                params![workload, run.name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(StoreError::sqlite(&path))?;
        tx.execute(
            "DELETE FROM params WHERE run_id = ?1 AND source = 'plan'",
            [id],
        )
        .map_err(StoreError::sqlite(&path))?;
        for (k, v) in &run.params {
            tx.execute(
                "INSERT INTO params (run_id, key, value, source) VALUES (?1, ?2, ?3, 'plan')
                 ON CONFLICT(run_id, key) DO UPDATE SET value = excluded.value, source = 'plan'",
                params![id, k, v],
            )
            .map_err(StoreError::sqlite(&path))?;
        }
        tx.commit().map_err(StoreError::sqlite(&path))?;
        Ok((id, status.parse()?))
    }

    /// Claims a run for this runner and marks it RUNNING. Returns `false`
    /// (and changes nothing) when another live runner holds it already.
    pub fn claim_run(
        &self,
        run: RunId,
        runner_pid: i64,
        runner_start: i64,
        env: &serde_json::Value,
    ) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "UPDATE runs SET status = 'RUNNING', runner_pid = ?2, runner_start = ?3, start_ms = ?4,
                    end_ms = NULL, exit_code = NULL, message = NULL, pid = NULL, pid_start = NULL, env = ?5
                 WHERE id = ?1 AND status != 'RUNNING'",
                params![run, runner_pid, runner_start, super::now_ms(), env.to_string()],
            )
            .map_err(self.err())?;
        Ok(n == 1)
    }

    /// Records the process id of a run's job once it is started, with its
    /// start time (clock ticks since boot; `None` when unknown), by which a
    /// later runner tells the job from a process that reused its pid.
    pub fn set_pid(&self, run: RunId, pid: i64, start: Option<i64>) -> Result<()> {
        self.conn
            .execute(
                "UPDATE runs SET pid = ?2, pid_start = ?3 WHERE id = ?1",
                params![run, pid, start],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// The runs of `host` left RUNNING by a runner that is no longer alive
    /// (`runner_alive(pid, start)` says whether it is), with their jobs'
    /// recorded pids and start times: what [`Store::repair_orphans`] will
    /// mark KILLED, and whose jobs may still be running.
    pub fn orphans(
        &self,
        host: &str,
        runner_alive: impl Fn(i64, i64) -> bool,
    ) -> Result<Vec<Orphan>> {
        let all = self.all(
            "SELECT id, name, runner_pid, runner_start, pid, pid_start FROM runs
             WHERE status = 'RUNNING' AND host = ?1 ORDER BY id",
            [host],
            |r| {
                Ok((
                    Orphan {
                        run: r.get(0)?,
                        name: r.get(1)?,
                        runner_pid: r.get(2)?,
                        pid: r.get(4)?,
                        pid_start: r.get(5)?,
                    },
                    r.get::<_, Option<i64>>(3)?,
                ))
            },
        )?;
        Ok(all
            .into_iter()
            .filter(|(o, start)| {
                !matches!((o.runner_pid, start), (Some(p), Some(s)) if runner_alive(p, *s))
            })
            .map(|(o, _)| o)
            .collect())
    }

    /// Records how a run ended.
    pub fn finish_run(
        &self,
        run: RunId,
        status: RunStatus,
        exit_code: Option<i64>,
        message: Option<&str>,
    ) -> Result<()> {
        self.conn
            .execute(
                "UPDATE runs SET status = ?2, exit_code = ?3, message = ?4, end_ms = ?5 WHERE id = ?1",
                params![run, status.as_str(), exit_code, message, super::now_ms()],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Marks KILLED every run of `host` left RUNNING by a runner that is no
    /// longer alive (`runner_alive(pid, start)` says whether it is), e.g.
    /// one killed with SIGKILL. Returns the runs it repaired.
    pub fn repair_orphans(
        &mut self,
        host: &str,
        runner_alive: impl Fn(i64, i64) -> bool,
    ) -> Result<Vec<RunId>> {
        let path = self.path.clone();
        let tx = self.write_transaction()?;
        let running: Vec<(RunId, Option<i64>, Option<i64>)> = {
            let mut st = tx
                .prepare("SELECT id, runner_pid, runner_start FROM runs WHERE status = 'RUNNING' AND host = ?1")
                .map_err(StoreError::sqlite(&path))?;
            let rows = st
                .query_map([host], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(StoreError::sqlite(&path))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(StoreError::sqlite(&path))?
        };
        let mut repaired = Vec::new();
        for (id, pid, start) in running {
            let alive = matches!((pid, start), (Some(p), Some(s)) if runner_alive(p, s));
            if !alive {
                let msg = format!(
                    "its runner (pid {}) ended without recording an end; repaired by a later `batchcast run`",
                    pid.map_or("?".to_string(), |p| p.to_string())
                );
                tx.execute(
                    "UPDATE runs SET status = 'KILLED', message = ?2, end_ms = coalesce(end_ms, ?3) WHERE id = ?1",
                    params![id, msg, super::now_ms()],
                )
                .map_err(StoreError::sqlite(&path))?;
                repaired.push(id);
            }
        }
        tx.commit().map_err(StoreError::sqlite(&path))?;
        Ok(repaired)
    }

    /// Records a parameter the script logged (or the plan gave).
    pub fn log_param(&self, run: RunId, key: &str, value: &str, source: ParamSource) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO params (run_id, key, value, source) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(run_id, key) DO UPDATE SET value = excluded.value, source = excluded.source",
                params![run, key, value, source.as_str()],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Stores metric points in one transaction. NaN is not a number the
    /// store keeps (SQLite would make it NULL): such points are left out,
    /// and the first of each run and key is returned so that the caller
    /// can tell the run's reader once. Infinities are kept.
    pub fn insert_metrics(&mut self, points: &[MetricPoint]) -> Result<Vec<MetricPoint>> {
        let path = self.path.clone();
        let mut nans: Vec<MetricPoint> = Vec::new();
        let tx = self.write_transaction()?;
        {
            let mut st = tx
                .prepare_cached("INSERT INTO metrics (run_id, key, step, ts_ms, value) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(StoreError::sqlite(&path))?;
            for p in points {
                if p.value.is_nan() {
                    if !nans.iter().any(|n| n.run_id == p.run_id && n.key == p.key) {
                        nans.push(p.clone());
                    }
                    continue;
                }
                st.execute(params![p.run_id, p.key, p.step, p.ts_ms, p.value])
                    .map_err(StoreError::sqlite(&path))?;
            }
        }
        tx.commit().map_err(StoreError::sqlite(&path))?;
        Ok(nans)
    }

    /// Appends output of a job to its stored log; returns the chunks it
    /// stored, `(seq, length)` each.
    pub fn append_log(
        &mut self,
        run: RunId,
        stream: LogStream,
        ts_ms: i64,
        bytes: &[u8],
    ) -> Result<Vec<(i64, usize)>> {
        let path = self.path.clone();
        let tx = self.write_transaction()?;
        let first: i64 = tx
            .query_row(
                "SELECT coalesce(max(seq), -1) + 1 FROM logs WHERE run_id = ?1 AND stream = ?2",
                params![run, stream.as_str()],
                |r| r.get(0),
            )
            .map_err(StoreError::sqlite(&path))?;
        let mut stored = Vec::new();
        for (seq, chunk) in (first..).zip(bytes.chunks(LOG_CHUNK)) {
            tx.execute(
                "INSERT INTO logs (run_id, stream, seq, ts_ms, data) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run, stream.as_str(), seq, ts_ms, chunk],
            )
            .map_err(StoreError::sqlite(&path))?;
            stored.push((seq, chunk.len()));
        }
        tx.commit().map_err(StoreError::sqlite(&path))?;
        Ok(stored)
    }

    /// Drops the stored chunks `seqs` of a run's log, and writes (or
    /// rewrites) the chunk `note = (seq, ts_ms, text)`: a log cut to its
    /// head and tail says in its middle what was dropped.
    pub fn cut_log(
        &mut self,
        run: RunId,
        stream: LogStream,
        seqs: &[i64],
        note: (i64, i64, &str),
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write_transaction()?;
        {
            let mut del = tx
                .prepare_cached("DELETE FROM logs WHERE run_id = ?1 AND stream = ?2 AND seq = ?3")
                .map_err(StoreError::sqlite(&path))?;
            for seq in seqs {
                del.execute(params![run, stream.as_str(), seq])
                    .map_err(StoreError::sqlite(&path))?;
            }
        }
        let (seq, ts_ms, text) = note;
        tx.execute(
            "INSERT INTO logs (run_id, stream, seq, ts_ms, data) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(run_id, stream, seq) DO UPDATE SET data = excluded.data",
            params![run, stream.as_str(), seq, ts_ms, text.as_bytes()],
        )
        .map_err(StoreError::sqlite(&path))?;
        tx.commit().map_err(StoreError::sqlite(&path))
    }

    /// Records something a reader of the run should know, once.
    pub fn add_event(&self, run: RunId, source: &str, message: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO events (run_id, ts_ms, source, message) VALUES (?1, ?2, ?3, ?4)",
                params![run, super::now_ms(), source, message],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// The id of the run `name` in `workload` of `experiment`, if any.
    pub fn find_run(&self, experiment: &str, workload: &str, name: &str) -> Result<Option<RunId>> {
        self.conn
            .query_row(
                "SELECT r.id FROM runs r JOIN workloads w ON r.workload_id = w.id JOIN experiments e ON w.experiment_id = e.id
                 WHERE e.name = ?1 AND w.name = ?2 AND r.name = ?3",
                params![experiment, workload, name],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())
    }
}
