//! The demo as a plan the runner runs: workload `independent` (N trainers,
//! each with its own pipeline) and workload `shared` (the same N trainers
//! reading one `batchcast serve`, the workload's Data), one experiment per
//! demo in the run store. The figures the demo prints are read back from
//! the store: each trainer's own (`figure/samples`, `figure/seconds`,
//! `figure/wait_secs`, written through `BATCHCAST_FIGURES`), the CPU the
//! kernel counted for every process at its end, and the trainers' runs'
//! start and end.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use batchcast_runs::plan::Plan;
use batchcast_runs::runner::{run_plan, RunOptions};
use batchcast_runs::{keys, LogStream, Run, RunFilter, RunId, RunStatus, Store};
use indicatif::ProgressBar;

use super::{DemoArgs, RunFigures, TrainerFigures};

/// The two workloads, in the order they run.
pub(super) const INDEPENDENT: &str = "independent";
pub(super) const SHARED: &str = "shared";
/// What the runner samples of each trainer.
const LISTENERS: [&str; 3] = ["process", "system", "batchcast"];
/// How often the bar follows the trainers.
const REPORT_EVERY: Duration = Duration::from_millis(250);
/// Time a trainer gets between SIGTERM and SIGKILL when the demo is stopped.
const GRACE: Duration = Duration::from_secs(5);

/// One demo: its plan, where it is recorded and what stops it.
pub(super) struct Engine {
    plan: Plan,
    store: PathBuf,
    experiment: String,
    exe: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Engine {
    /// The demo's plan for `args`, recorded in `store` as a new experiment.
    pub(super) fn new(args: &DemoArgs, store: PathBuf) -> Result<Engine> {
        let exe = std::env::current_exe().context("cannot find the batchcast executable")?;
        // The pid tells apart two demos started in one millisecond.
        let experiment = format!("demo-{}-{}", batchcast_runs::now_ms(), std::process::id());
        let producer = format!("demo-{}", std::process::id());
        let flags = args.source.to_flags();
        let dir = std::env::current_dir().context("cannot read the current directory")?;
        let mut plan = Plan::builder("<batchcast demo>", &dir);
        for mode in [INDEPENDENT, SHARED] {
            let mut trainer: Vec<String> = vec![exe.display().to_string()];
            trainer.extend(
                [
                    "demo-trainer",
                    "--mode",
                    mode,
                    "--name",
                    &producer,
                    "--epochs",
                    &args.epochs.to_string(),
                    // One word: a negative number is no flag.
                    &format!("--step-ms={}", args.step_ms),
                ]
                .map(String::from),
            );
            trainer.extend(flags.iter().cloned());
            for i in 1..=args.trainers {
                let row = plan.run(&experiment, mode, &format!("trainer-{i}"), &trainer);
                row.listeners = LISTENERS.map(String::from).to_vec();
            }
        }
        let mut serve: Vec<String> = [
            "batchcast",
            "serve",
            "--name",
            &producer,
            "--json",
            "--epochs",
            &args.epochs.to_string(),
            "--consumers",
            &args.trainers.to_string(),
        ]
        .map(String::from)
        .to_vec();
        serve.extend(flags);
        plan.data(&experiment, SHARED, &serve);
        let stop = Arc::new(AtomicBool::new(false));
        crate::signals::install(&stop)?;
        Ok(Engine {
            plan: plan.build()?,
            store,
            experiment,
            exe,
            stop,
        })
    }

    /// The run store it records into.
    pub(super) fn store(&self) -> &Path {
        &self.store
    }

    /// Runs `workload`, with a progress bar on a terminal unless `quiet`,
    /// and reads its figures back from the store.
    pub(super) fn run(&self, workload: &str, total: u64, quiet: bool) -> Result<RunFigures> {
        let plan = Plan {
            rows: self
                .plan
                .rows
                .iter()
                .filter(|r| r.workload == workload)
                .cloned()
                .collect(),
            ..self.plan.clone()
        };
        let bar =
            (!quiet && std::io::stderr().is_terminal()).then(|| progress_bar(workload, total));
        let mut opts = RunOptions {
            store: self.store.clone(),
            interval: Duration::from_secs(1),
            rerun_failed: false,
            gpus: Arc::from(batchcast_runs::gpu::system()),
            stop: self.stop.clone(),
            exe: self.exe.clone(),
            python: "python3".into(),
            grace: GRACE,
            log_cap: batchcast_runs::DEFAULT_LOG_CAP,
            report_every: REPORT_EVERY,
            progress: progress(bar.clone()),
        };
        let outcome = run_plan(&plan, &mut opts)?;
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        if outcome.interrupted {
            bail!(
                "the demo was stopped; what ran is recorded in {}",
                self.store.display()
            );
        }
        self.figures(workload)
    }

    /// The figures of `workload`, from the store.
    fn figures(&self, workload: &str) -> Result<RunFigures> {
        let store = Store::open_read_only(&self.store)?;
        let filter = RunFilter {
            experiment: Some(self.experiment.clone()),
            workload: Some(workload.into()),
            ..RunFilter::default()
        };
        let mut runs: Vec<Run> = store.runs(&filter)?.into_iter().map(|r| r.run).collect();
        runs.sort_by_key(|r| (r.plan_row.unwrap_or(i64::MAX), r.id));
        let (mut cpu, mut samples, mut trainers) = (0.0, 0u64, Vec::new());
        for r in &runs {
            if r.status != RunStatus::Finished {
                bail!(
                    "the {workload} demo's {} ended {}{}{}\nits output: batchcast runs show {} --store {}",
                    r.name,
                    r.status,
                    r.message
                        .as_deref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default(),
                    stderr_tail(&store, r.id)?,
                    r.id,
                    shell_word(&self.store)
                );
            }
            cpu += store.run_cpu_seconds(r.id)?.unwrap_or(0.0);
            if r.name == keys::DATA_RUN {
                continue;
            }
            let figure = |name: &str| -> Result<f64> {
                store
                    .last_metric(r.id, &keys::figure(name))?
                    .with_context(|| {
                        format!(
                            "the {workload} demo's {} ended without its figures (run {} in {})",
                            r.name,
                            r.id,
                            self.store.display()
                        )
                    })
            };
            let n = figure("samples")?.max(0.0) as u64;
            let secs = figure("seconds")?.max(1e-9);
            samples += n;
            trainers.push(TrainerFigures {
                samples: n,
                samples_per_sec: n as f64 / secs,
                data_wait_share: figure("wait_secs")? / secs,
            });
        }
        // The trainers' own span: the shared producer's start and stop, and
        // the runner's work before and after them, are no training time.
        let training = || runs.iter().filter(|r| r.name != keys::DATA_RUN);
        let start = training().filter_map(|r| r.start_ms).min();
        let end = training().filter_map(|r| r.end_ms).max();
        let wall = match start.zip(end) {
            Some((s, e)) => (e - s).max(1) as f64 / 1000.0,
            None => bail!("the {workload} demo recorded no start or end"),
        };
        Ok(RunFigures {
            trainers,
            aggregate_samples_per_sec: samples as f64 / wall,
            cpu_secs_per_1000_samples: cpu / (samples as f64 / 1000.0).max(1e-9),
            wall_secs: wall,
        })
    }
}

/// How much of a failed run's stderr the demo shows.
const STDERR_TAIL: usize = 2048;

/// The end of run `id`'s stderr, indented under a line saying what it is,
/// or nothing when it wrote none.
fn stderr_tail(store: &Store, id: RunId) -> Result<String> {
    let (tail, cut) = store.log(id, LogStream::Stderr, Some(STDERR_TAIL))?;
    let text = String::from_utf8_lossy(&tail);
    if text.trim().is_empty() {
        return Ok(String::new());
    }
    let mut out = String::from(if cut {
        "; the end of its stderr:"
    } else {
        "; its stderr:"
    });
    for line in text.trim_end().lines() {
        out.push_str("\n    ");
        out.push_str(line);
    }
    Ok(out)
}

/// `path` as one word of a shell command.
pub(super) fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    shlex::try_quote(&text).map_or(text.clone(), |q| q.into_owned())
}

fn progress_bar(workload: &str, total: u64) -> ProgressBar {
    let bar = crate::progress::bar(
        total,
        "  {prefix:>11} [{bar:30}] {pos}/{len} samples {per_sec}",
    );
    bar.set_prefix(workload.to_string());
    bar
}

/// What the runner reports, for the demo: the trainers' last `progress`
/// lines move the bar; warnings and failures go to stderr; the rest (runs
/// starting and finishing) is the store's to keep.
fn progress(bar: Option<ProgressBar>) -> Box<dyn FnMut(&str) + Send> {
    let mut samples: HashMap<String, u64> = HashMap::new();
    Box::new(move |report: &str| {
        for line in report.lines() {
            if let Some((name, last)) = line.strip_prefix("  ").and_then(|l| l.split_once(": ")) {
                let v: serde_json::Value = serde_json::from_str(last).unwrap_or_default();
                if v["event"] == "progress" {
                    if let Some(n) = v["samples"].as_u64() {
                        samples.insert(name.to_string(), n);
                    }
                }
            } else if line.starts_with("warning") || line.contains("FAILED") {
                match &bar {
                    Some(bar) => bar.suspend(|| eprintln!("{line}")),
                    None => eprintln!("{line}"),
                }
            }
        }
        if let Some(bar) = &bar {
            bar.set_position(samples.values().sum());
        }
    })
}
