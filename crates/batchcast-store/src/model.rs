//! The rows of the store as Rust values.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Row id of an experiment.
pub type ExperimentId = i64;
/// Row id of a workload.
pub type WorkloadId = i64;
/// Row id of a run.
pub type RunId = i64;

/// Where a run stands. Only a runner moves a run forward:
/// PENDING -> RUNNING -> FINISHED | FAILED | KILLED; a rerun moves FAILED
/// and KILLED back to RUNNING.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RunStatus {
    /// Recorded, not started yet.
    Pending,
    /// Its job is running under a live runner.
    Running,
    /// Its job exited with status 0.
    Finished,
    /// Its job failed (a non-zero exit) or could not start.
    Failed,
    /// Stopped before its job ended by itself.
    Killed,
}

impl RunStatus {
    /// The name stored in the `status` column and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "PENDING",
            RunStatus::Running => "RUNNING",
            RunStatus::Finished => "FINISHED",
            RunStatus::Failed => "FAILED",
            RunStatus::Killed => "KILLED",
        }
    }

    /// True for FINISHED, FAILED and KILLED.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Finished | RunStatus::Failed | RunStatus::Killed
        )
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        Ok(match s.trim().to_ascii_uppercase().as_str() {
            "" | "PENDING" => RunStatus::Pending,
            "RUNNING" => RunStatus::Running,
            "FINISHED" => RunStatus::Finished,
            "FAILED" => RunStatus::Failed,
            "KILLED" => RunStatus::Killed,
            _ => {
                return Err(StoreError::Corrupt {
                    field: "runs.status",
                    value: s.to_string(),
                })
            }
        })
    }
}

/// An experiment: a named group of workloads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Experiment {
    /// Its id in the store.
    pub id: ExperimentId,
    /// Its name.
    pub name: String,
    /// When it was first recorded, milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// A workload: the runs of one experiment that run at the same time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workload {
    /// Its id in the store.
    pub id: WorkloadId,
    /// The experiment it belongs to.
    pub experiment_id: ExperimentId,
    /// Its name.
    pub name: String,
    /// The shared pipeline's command; `None` when each job has its own loader.
    pub data: Option<String>,
    /// Order in the plan.
    pub position: i64,
}

/// What a runner knows of a run before it starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewRun {
    /// The run's name.
    pub name: String,
    /// The job's command line, program first.
    pub command: Vec<String>,
    /// Parameters from the plan, in plan order.
    pub params: Vec<(String, String)>,
    /// Devices given to the job (GPU indices, MIG UUIDs).
    pub devices: Vec<String>,
    /// How the job shares its GPUs: `-`, `MPS` or a MIG profile.
    pub collocation: String,
    /// Listeners sampling the run (`cpu`, `gpu`, ...).
    pub listeners: Vec<String>,
    /// The machine it runs on.
    pub host: String,
    /// The plan file it came from, if any.
    pub plan_file: Option<String>,
    /// Its 1-based row in that plan.
    pub plan_row: Option<i64>,
}

/// A run as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Run {
    /// Its id in the store.
    pub id: RunId,
    /// The workload it belongs to.
    pub workload_id: WorkloadId,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub status: RunStatus,
    /// The job's command line, program first.
    pub command: Vec<String>,
    /// Devices given to the job (GPU indices, MIG UUIDs).
    pub devices: Vec<String>,
    /// How the job shares its GPUs: `-`, `MPS` or a MIG profile.
    pub collocation: String,
    /// Listeners sampling the run.
    pub listeners: Vec<String>,
    /// The machine it ran on.
    pub host: String,
    /// The plan file it came from, if any.
    pub plan_file: Option<String>,
    /// Its 1-based row in that plan.
    pub plan_row: Option<i64>,
    /// The job's process id (its group leader), once started.
    pub pid: Option<i64>,
    /// The runner that owns the run while RUNNING.
    pub runner_pid: Option<i64>,
    /// The runner's start time (clock ticks since boot), against pid reuse.
    pub runner_start: Option<i64>,
    /// When the job started, milliseconds since the Unix epoch.
    pub start_ms: Option<i64>,
    /// When it ended, milliseconds since the Unix epoch.
    pub end_ms: Option<i64>,
    /// The job's exit code, once it exited.
    pub exit_code: Option<i64>,
    /// Why it failed or was killed.
    pub message: Option<String>,
    /// Facts about where it ran (host, GPUs, versions), as a JSON object.
    pub env: serde_json::Value,
}

impl Run {
    /// Wall time from start to end (or to `now_ms` while it runs).
    pub fn duration_ms(&self, now_ms: i64) -> Option<i64> {
        let start = self.start_ms?;
        Some(self.end_ms.unwrap_or(now_ms).saturating_sub(start).max(0))
    }
}

/// Where a parameter came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamSource {
    /// The plan's `Params` or sweep.
    Plan,
    /// Logged by the script (`mlflow.log_param`, batchcast's API).
    Logged,
}

impl ParamSource {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ParamSource::Plan => "plan",
            ParamSource::Logged => "logged",
        }
    }
}

/// A parameter of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Param {
    /// Its name.
    pub key: String,
    /// Its value, as text.
    pub value: String,
    /// Where it came from.
    pub source: ParamSource,
}

/// One value of one metric of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricPoint {
    /// The run it belongs to.
    pub run_id: RunId,
    /// The metric's name (see `keys` for batchcast's own).
    pub key: String,
    /// The training step, or 0 for metrics sampled by time (listeners).
    pub step: i64,
    /// When it was taken, milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Its value.
    pub value: f64,
}

/// One of a job's two output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// The job's standard output.
    Stdout,
    /// The job's standard error.
    Stderr,
}

impl LogStream {
    /// The stream's name as stored: `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// Something that happened to a run, worth telling its reader once
/// ("NVML unavailable: ...", "killed by Ctrl-C").
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// When it happened, milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// What told it (`runner`, a listener's name, ...).
    pub source: String,
    /// What happened.
    pub message: String,
}

/// Which runs a query returns.
#[derive(Clone, Debug, Default)]
pub struct RunFilter {
    /// Only runs of the experiment of this name.
    pub experiment: Option<String>,
    /// Only runs of workloads of this name.
    pub workload: Option<String>,
    /// Only runs in this state.
    pub status: Option<RunStatus>,
    /// A substring of the run's name or of any parameter's `key=value`.
    pub search: Option<String>,
    /// At most this many runs (newest first); `None`: all.
    pub limit: Option<usize>,
}

/// A run together with the names of its workload and experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunRow {
    /// Its experiment's name.
    pub experiment: String,
    /// Its workload's name.
    pub workload: String,
    #[serde(flatten)]
    /// The run.
    pub run: Run,
}

/// Summary of one metric over a run (or over several).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricSummary {
    /// Values summarised.
    pub count: usize,
    /// Their mean.
    pub mean: f64,
    /// Their median.
    pub p50: f64,
    /// Their 95th percentile.
    pub p95: f64,
    /// Their largest.
    pub max: f64,
    /// The last in time order.
    pub last: f64,
}

impl MetricSummary {
    /// Summarises values in time order; `None` for no values.
    pub fn of(values: &[f64]) -> Option<MetricSummary> {
        let mut s = Summarizer::new(values.len(), values.len());
        values.iter().for_each(|&v| s.push(v));
        s.finish()
    }
}

/// Summarises `n` values given one at a time in time order, holding at
/// most `max_sample` of them: count, mean, max and last are exact; the
/// percentiles come from an even sample (every k-th value), exact when all
/// of them fit. Non-finite values count only as `last`.
#[derive(Clone, Debug)]
pub(crate) struct Summarizer {
    stride: usize,
    max_sample: usize,
    seen: usize,
    count: usize,
    sum: f64,
    max: f64,
    last: Option<f64>,
    sample: Vec<f64>,
}

impl Summarizer {
    pub(crate) fn new(n: usize, max_sample: usize) -> Summarizer {
        let max_sample = max_sample.max(1);
        Summarizer {
            stride: n.div_ceil(max_sample).max(1),
            max_sample,
            seen: 0,
            count: 0,
            sum: 0.0,
            max: f64::NEG_INFINITY,
            last: None,
            sample: Vec::with_capacity(n.min(max_sample)),
        }
    }

    pub(crate) fn push(&mut self, v: f64) {
        self.last = Some(v);
        let i = self.seen;
        self.seen += 1;
        if !v.is_finite() {
            return;
        }
        self.count += 1;
        self.sum += v;
        self.max = self.max.max(v);
        // More values than counted (a live run): the sample stays bounded.
        if i.is_multiple_of(self.stride) && self.sample.len() < self.max_sample {
            self.sample.push(v);
        }
    }

    /// `None` when no finite value came.
    pub(crate) fn finish(mut self) -> Option<MetricSummary> {
        let last = self.last?;
        if self.count == 0 {
            return None;
        }
        if self.sample.is_empty() {
            self.sample.push(self.max);
        }
        let sorted = &mut self.sample;
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
        Some(MetricSummary {
            count: self.count,
            mean: self.sum / self.count as f64,
            p50: q(0.5),
            p95: q(0.95),
            max: self.max,
            last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{MetricSummary, Summarizer};

    #[test]
    fn a_summary_is_exact_when_every_value_fits() {
        let s = MetricSummary::of(&[3.0, f64::NAN, 1.0, 2.0, 10.0, f64::INFINITY]).unwrap();
        assert_eq!(s.count, 4);
        assert_eq!(s.mean, 4.0);
        assert_eq!((s.p50, s.max), (3.0, 10.0));
        assert!(
            s.last.is_infinite(),
            "last is the last value, finite or not"
        );
        assert_eq!(MetricSummary::of(&[]), None);
        assert_eq!(MetricSummary::of(&[f64::NAN]), None);
    }

    #[test]
    fn a_long_metric_is_summarised_holding_only_its_sample() {
        let n = 1_000_001;
        let mut s = Summarizer::new(n, 1000);
        // A spike in the middle that no even sample of 1000 lands on.
        let value = |i: usize| if i == 500_001 { 1e9 } else { (i % 100) as f64 };
        (0..n).for_each(|i| s.push(value(i)));
        assert!(s.sample.len() <= 1000, "{} held", s.sample.len());
        let s = s.finish().unwrap();
        assert_eq!(s.count, n);
        assert_eq!(s.max, 1e9, "the max is exact, not sampled");
        assert_eq!(s.last, 0.0);
        let exact_mean = (0..n).map(value).sum::<f64>() / n as f64;
        assert!(
            (s.mean - exact_mean).abs() < 1e-6,
            "{} vs {exact_mean}",
            s.mean
        );
        assert!((40.0..=60.0).contains(&s.p50), "p50 {}", s.p50);
    }
}

/// A run left RUNNING by a runner that died, and its job as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The run.
    pub run: RunId,
    /// Its name.
    pub name: String,
    /// The runner that owned it.
    pub runner_pid: Option<i64>,
    /// The job's process (its group leader), once started.
    pub pid: Option<i64>,
    /// Its start time (clock ticks since boot), against pid reuse.
    pub pid_start: Option<i64>,
}
