//! Names of the metrics that batchcast itself records.
//!
//! Every writer (listeners, the runner) and every reader (`runs compare`,
//! the dashboard) uses these names, so they live in one place. Metrics a
//! training script logs keep the names it gives them. Names are
//! `/`-separated paths: `proc/…` for a job's process tree, `sys/…` for the
//! machine, `gpu/<index>/…` for a GPU, `batchcast/…` for the shared
//! pipeline as a consumer sees it. Units are in the name's last part where
//! it has one (`_bytes`, `_percent`, `_per_s`, `_w`, `_mhz`).

/// CPU use of the job's process tree, in percent of one core.
pub const PROC_CPU_PERCENT: &str = "proc/cpu_percent";
/// CPU seconds used by the job's process tree since it started (user + system).
pub const PROC_CPU_SECONDS: &str = "proc/cpu_seconds";
/// CPU seconds of the job and of the children it waited for, as the
/// kernel counted them when it ended (wait4, user + system): one point,
/// exact where [`PROC_CPU_SECONDS`], sampled, misses the last interval.
pub const PROC_EXIT_CPU_SECONDS: &str = "proc/exit_cpu_seconds";
/// Resident memory of the job's process tree.
pub const PROC_RSS_BYTES: &str = "proc/rss_bytes";
/// Proportional set size of the job's process tree (shared pages divided
/// among the processes that map them: the fair share of a shared arena).
pub const PROC_PSS_BYTES: &str = "proc/pss_bytes";
/// Bytes read from storage by the process tree, per second.
pub const PROC_READ_BYTES_PER_S: &str = "proc/read_bytes_per_s";
/// Bytes written to storage by the process tree, per second.
pub const PROC_WRITE_BYTES_PER_S: &str = "proc/write_bytes_per_s";
/// Threads of the process tree.
pub const PROC_THREADS: &str = "proc/threads";
/// Processes in the tree (the script and its DataLoader workers).
pub const PROC_PROCESSES: &str = "proc/processes";

/// Machine CPU use, percent of all cores (100 = every core busy).
pub const SYS_CPU_PERCENT: &str = "sys/cpu_percent";
/// Machine memory in use.
pub const SYS_MEM_USED_BYTES: &str = "sys/mem_used_bytes";

/// Samples per second the job's consumers received.
pub const BATCHCAST_SAMPLES_PER_S: &str = "batchcast/samples_per_s";
/// Samples the job's consumers received since it started.
pub const BATCHCAST_SAMPLES: &str = "batchcast/samples";
/// Share of wall time the job's consumers waited for data (0..1).
pub const BATCHCAST_DATA_WAIT_SHARE: &str = "batchcast/data_wait_share";
/// How many batches the job's slowest consumer is behind the producer.
pub const BATCHCAST_LAG_BATCHES: &str = "batchcast/lag_batches";

/// Cumulative samples trained, as logged by a script that does not read
/// through a batchcast consumer (independent loaders). `runs compare`
/// uses it when a run has no [`BATCHCAST_SAMPLES`].
pub const SCRIPT_SAMPLES: &str = "samples";

/// The name of the run that stands for a workload's shared producer (its
/// `Data`): its process tree is watched like a job's, so the pipeline's CPU
/// counts in the workload's cost.
pub const DATA_RUN: &str = "data";

/// DCGM-named activity metric of GPU `index` (`DCGM_FI_PROF_SM_ACTIVE`,
/// `DCGM_FI_PROF_SM_OCCUPANCY`, `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`,
/// `DCGM_FI_PROF_DRAM_ACTIVE`), as a fraction 0..1.
pub fn gpu(index: u32, field: &str) -> String {
    format!("gpu/{index}/{field}")
}

/// The DCGM field that says how busy a GPU's SMs really are; the
/// collocation summary reports it as "GPU activity".
pub const DCGM_SM_ACTIVE: &str = "DCGM_FI_PROF_SM_ACTIVE";

/// `batchcast stalls` records its analysis as one run whose metrics are
/// `stalls/<mode>/<figure>` (mode: synthetic, cold, warm, ddp, loader, timeshared; figure: one
/// of [`STALLS_MODE_FIGURES`]), `stalls/<stall>/per_step_s` and
/// `stalls/<stall>/share` (stall: fetch, prep, fetch+prep, communication)
/// and `stalls/jobs_<N>/<predicted|measured>_<independent|shared>_samples_per_s`.
pub const STALLS_PREFIX: &str = "stalls";
/// The figures of one mode, in the JSON analysis's own field names.
pub const STALLS_MODE_FIGURES: [&str; 7] = [
    "steps_per_s",
    "samples_per_s",
    "step_s",
    "wait_mean",
    "wait_p50",
    "wait_p95",
    "cpu_per_1000",
];

/// What a job reports about itself through the runner's figures file
/// (`BATCHCAST_FIGURES`) is recorded as `figure/<name>`, once, when it ends.
pub const FIGURE_PREFIX: &str = "figure";

/// The metric name of the job's own figure `name`.
pub fn figure(name: &str) -> String {
    format!("{FIGURE_PREFIX}/{name}")
}
