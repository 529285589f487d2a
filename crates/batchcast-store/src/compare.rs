//! What `batchcast runs compare` and the dashboard's collocation view show:
//! per-run summaries of chosen metrics, and per workload what collocation
//! gave (aggregate throughput, data wait, CPU cost, GPU activity, memory),
//! independent and shared workloads side by side.
//!
//! Definitions (also in the README):
//! - a run's samples: the `samples` figure the job reported at its end
//!   (`figure/samples`), else its last `batchcast/samples` (sampled, so
//!   short of the end by up to one interval), else its last `samples`
//!   (logged by a script with its own loader); its rate: samples / wall
//!   time;
//! - a workload's aggregate samples/s: the sum of its training runs' rates;
//! - CPU per 1000 samples: CPU seconds of every run of the workload (the
//!   shared producer's run [`keys::DATA_RUN`] included: the kernel's count
//!   at its end, else the last sample) per 1000 samples;
//! - GPU activity: the mean of `gpu/*/DCGM_FI_PROF_SM_ACTIVE` (else SM
//!   utilisation / 100) over the workload's runs;
//! - memory: the sum over runs of peak PSS (RSS where PSS is missing), so
//!   a shared arena counts once, not once per consumer;
//! - speedup of sharing: a shared workload's aggregate samples/s over that
//!   of an independent workload of the same experiment with the same number
//!   of training runs.

use serde::Serialize;

use crate::error::{Result, StoreError};
use crate::keys;
use crate::model::Summarizer;
use crate::{MetricSummary, Run, RunId, RunRow, Store};

/// Values of one metric held to take its percentiles, at most (a day at
/// 1 Hz is 86,400); longer metrics are sampled evenly for them.
const MAX_SAMPLE: usize = 1_000_000;

/// One run's summaries of the asked metrics.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// The run, with its workload and experiment.
    pub run: RunRow,
    /// `(key, summary)`; `None` when the run has no value of it.
    pub metrics: Vec<(String, Option<MetricSummary>)>,
}

/// Summaries of `keys` for each of `runs`.
pub fn summarize_runs(store: &Store, runs: &[RunId], keys: &[String]) -> Result<Vec<RunSummary>> {
    runs.iter()
        .map(|&id| {
            let run = store.run(id)?;
            let metrics = keys
                .iter()
                .map(|k| Ok((k.clone(), summary(store, id, k)?)))
                .collect::<Result<_>>()?;
            Ok(RunSummary { run, metrics })
        })
        .collect()
}

/// What one workload's collocated runs achieved together.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadSummary {
    /// Its experiment's name.
    pub experiment: String,
    /// Its name.
    pub workload: String,
    /// Its id in the store.
    pub workload_id: i64,
    /// Whether its jobs shared a producer (`Data` set).
    pub shared: bool,
    /// Training runs (the producer's run not counted).
    pub runs: usize,
    /// Training runs that FINISHED.
    pub finished: usize,
    /// First start to last end, seconds.
    pub wall_s: Option<f64>,
    /// Samples of all its training runs together.
    pub samples: Option<f64>,
    /// Aggregate samples/s: the sum of its training runs' rates.
    pub samples_per_s: Option<f64>,
    /// Mean over its training runs of the share of time they waited for data.
    pub data_wait_share: Option<f64>,
    /// CPU seconds of all its runs (the producer's included) per 1000 samples.
    pub cpu_s_per_1000_samples: Option<f64>,
    /// Mean GPU activity over its runs (0..1).
    pub gpu_activity: Option<f64>,
    /// Sum over its runs of peak PSS (RSS where PSS is missing), bytes.
    pub memory_bytes: Option<f64>,
}

/// A shared workload against the independent one it is compared with.
#[derive(Clone, Debug, Serialize)]
pub struct Speedup {
    /// The experiment both workloads belong to.
    pub experiment: String,
    /// The independent workload's name.
    pub independent: String,
    /// The shared workload's name.
    pub shared: String,
    /// Shared aggregate samples/s over independent.
    pub throughput: f64,
    /// Independent CPU per sample over shared (how much less CPU sharing needs).
    pub cpu_saving: Option<f64>,
}

/// The collocation summary of every workload (of one experiment when named).
pub fn collocation(store: &Store, experiment: Option<&str>) -> Result<Vec<WorkloadSummary>> {
    let mut out = Vec::new();
    for e in store.experiments()? {
        if experiment.is_some_and(|name| name != e.name) {
            continue;
        }
        for w in store.workloads(e.id)? {
            let runs = store.workload_runs(w.id)?;
            out.push(summarize_workload(
                store,
                &e.name,
                &w.name,
                w.id,
                w.data.is_some(),
                &runs,
            )?);
        }
    }
    Ok(out)
}

fn summarize_workload(
    store: &Store,
    experiment: &str,
    workload: &str,
    workload_id: i64,
    shared: bool,
    runs: &[Run],
) -> Result<WorkloadSummary> {
    let training: Vec<&Run> = runs.iter().filter(|r| r.name != keys::DATA_RUN).collect();
    let now = crate::now_ms();
    let (mut samples, mut rate, mut cpu) = (None::<f64>, None::<f64>, None::<f64>);
    let (mut waits, mut gpu, mut mem) = (Vec::new(), Vec::new(), None::<f64>);
    for r in runs {
        let exit_cpu = last(store, r.id, keys::PROC_EXIT_CPU_SECONDS)?;
        if let Some(c) = exit_cpu.or(last(store, r.id, keys::PROC_CPU_SECONDS)?) {
            *cpu.get_or_insert(0.0) += c;
        }
        let peak = match summary(store, r.id, keys::PROC_PSS_BYTES)? {
            Some(p) => Some(p.max),
            None => summary(store, r.id, keys::PROC_RSS_BYTES)?.map(|s| s.max),
        };
        if let Some(p) = peak {
            *mem.get_or_insert(0.0) += p;
        }
        if let Some(a) = gpu_activity(store, r.id)? {
            gpu.push(a);
        }
    }
    for r in &training {
        let mut n = None;
        for key in [
            keys::figure("samples"),
            keys::BATCHCAST_SAMPLES.to_string(),
            keys::SCRIPT_SAMPLES.to_string(),
        ] {
            if n.is_none() {
                n = last(store, r.id, &key)?;
            }
        }
        if let Some(n) = n {
            *samples.get_or_insert(0.0) += n;
            if let Some(ms) = r.duration_ms(now).filter(|&ms| ms > 0) {
                *rate.get_or_insert(0.0) += n / (ms as f64 / 1000.0);
            }
        }
        if let Some(s) = summary(store, r.id, keys::BATCHCAST_DATA_WAIT_SHARE)? {
            waits.push(s.mean);
        }
    }
    let start = runs.iter().filter_map(|r| r.start_ms).min();
    let end = runs.iter().map(|r| r.end_ms.unwrap_or(now)).max();
    Ok(WorkloadSummary {
        experiment: experiment.into(),
        workload: workload.into(),
        workload_id,
        shared,
        runs: training.len(),
        finished: training
            .iter()
            .filter(|r| r.status == crate::RunStatus::Finished)
            .count(),
        wall_s: start.zip(end).map(|(s, e)| (e - s).max(0) as f64 / 1000.0),
        samples,
        samples_per_s: rate,
        data_wait_share: mean(&waits),
        cpu_s_per_1000_samples: cpu
            .zip(samples)
            .filter(|(_, n)| *n > 0.0)
            .map(|(c, n)| 1000.0 * c / n),
        gpu_activity: mean(&gpu),
        memory_bytes: mem,
    })
}

/// Pairs each shared workload with an independent one of its experiment
/// that has as many training runs.
pub fn speedups(workloads: &[WorkloadSummary]) -> Vec<Speedup> {
    let mut out = Vec::new();
    for s in workloads.iter().filter(|w| w.shared) {
        let Some(i) = workloads
            .iter()
            .find(|w| !w.shared && w.experiment == s.experiment && w.runs == s.runs)
        else {
            continue;
        };
        if let (Some(a), Some(b)) = (s.samples_per_s, i.samples_per_s.filter(|v| *v > 0.0)) {
            out.push(Speedup {
                experiment: s.experiment.clone(),
                independent: i.workload.clone(),
                shared: s.workload.clone(),
                throughput: a / b,
                cpu_saving: i
                    .cpu_s_per_1000_samples
                    .zip(s.cpu_s_per_1000_samples.filter(|v| *v > 0.0))
                    .map(|(x, y)| x / y),
            });
        }
    }
    out
}

/// `key` of `run` summarised in one pass over its values, however many:
/// count, mean, max and last exact, the percentiles from an even sample of
/// at most [`MAX_SAMPLE`] of them.
fn summary(store: &Store, run: RunId, key: &str) -> Result<Option<MetricSummary>> {
    let mut s = Summarizer::new(store.metric_len(run, key, None)?, MAX_SAMPLE);
    store.for_each_point(run, key, |_, _, v| {
        s.push(v);
        Ok::<_, StoreError>(())
    })?;
    Ok(s.finish())
}

fn last(store: &Store, run: RunId, key: &str) -> Result<Option<f64>> {
    store.last_metric(run, key)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Mean SM activity of a run's GPUs (0..1), from DCGM's field, else from
/// NVML's SM utilisation.
fn gpu_activity(store: &Store, run: RunId) -> Result<Option<f64>> {
    let keys = store.metric_keys(run)?;
    let mut per_gpu = Vec::new();
    for k in keys
        .iter()
        .filter(|k| k.starts_with("gpu/") && k.ends_with(keys::DCGM_SM_ACTIVE))
    {
        per_gpu.extend(summary(store, run, k)?.map(|s| s.mean));
    }
    if per_gpu.is_empty() {
        for k in keys
            .iter()
            .filter(|k| k.starts_with("gpu/") && k.ends_with("/util_sm_percent"))
        {
            per_gpu.extend(summary(store, run, k)?.map(|s| s.mean / 100.0));
        }
    }
    Ok(mean(&per_gpu))
}
