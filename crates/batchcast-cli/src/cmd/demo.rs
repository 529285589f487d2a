//! `batchcast demo`: what batchcast is for, in one command.
//!
//! N emulated trainers (processes, each with a fixed accelerator step time)
//! train twice on the same data: first each with its own loading pipeline,
//! as N independent jobs would, then all from one shared producer. The
//! pipeline is the native JPEG pipeline (decode, RandomResizedCrop, flip) on
//! a dataset the demo generates once into a cache directory, so on a
//! machine with few cores the independent runs starve each other and the
//! shared run does not. Prints per-trainer throughput and data-wait share,
//! and totals with CPU cost. `--synthetic` swaps in a synthetic workload.

use std::io::{BufRead, BufReader, IsTerminal};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use batchcast_proc::{Options, Output, Process};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{json, Value};

use crate::out::outln;
use batchcast_serve::{default_workers, SourceArgs};

/// Arguments of `batchcast demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Trainer processes.
    #[arg(long, default_value_t = 3)]
    pub trainers: usize,
    /// Epochs per trainer.
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    /// Emulated accelerator step per batch, in milliseconds.
    #[arg(long, default_value_t = 20.0)]
    pub step_ms: f64,
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Images in the generated demo dataset (when no --data is given).
    #[arg(long, default_value_t = 2000)]
    pub images: usize,
    /// Where the generated dataset is kept between runs.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// One trainer's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TrainerFigures {
    /// Samples trained on.
    pub samples: u64,
    /// Samples per second.
    pub samples_per_sec: f64,
    /// Share of its time spent waiting for data.
    pub data_wait_share: f64,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    /// Per trainer.
    pub trainers: Vec<TrainerFigures>,
    /// All trainers' samples over the run's wall time.
    pub aggregate_samples_per_sec: f64,
    /// CPU seconds of every process of the run per 1000 samples trained.
    pub cpu_secs_per_1000_samples: f64,
    /// Wall seconds.
    pub wall_secs: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Independent,
    Shared,
}

/// Runs `batchcast demo`.
pub fn run(mut args: DemoArgs) -> Result<()> {
    if args.trainers == 0 {
        bail!("--trainers must be at least 1");
    }
    if args.source.synthetic {
        if args.source.synth.iters_per_us.is_none() {
            // Measure once, before anything else runs, so every process does
            // the same real work per sample.
            args.source.synth.iters_per_us = Some(batchcast_serve::calibrate());
        }
    } else if args.source.data.is_none() {
        args.source.data = Some(demo_dataset(&args)?);
    }
    let samples = args.source.open()?.samples_per_epoch(); // validates, before spawning
    let s = &args.source;
    let pipeline = if s.synthetic {
        format!("synthetic, ~{} us of CPU per sample", s.synth.work_us)
    } else {
        format!(
            "JPEG decode + {} transform to {}x{} from {}",
            s.images.transform,
            s.images.image_size,
            s.images.image_size,
            s.data
                .as_ref()
                .map_or(String::new(), |d| d.display().to_string())
        )
    };
    if !args.json {
        outln!(
            "batchcast demo: {} trainers x {} epoch(s) of {samples} samples, batch {}, emulated \
             accelerator step {} ms;\npipeline: {pipeline}, {} worker thread(s) per pipeline, {} \
             core(s) here\n",
            args.trainers,
            args.epochs,
            s.batch_size,
            args.step_ms,
            s.workers,
            default_workers()
        )?;
    }
    let independent = run_once(&args, Mode::Independent, samples)?;
    if !args.json {
        print_run(
            "independent: each trainer runs its own pipeline",
            &independent,
        )?;
    }
    let shared = run_once(&args, Mode::Shared, samples)?;
    if !args.json {
        print_run(
            "shared: one batchcast producer, every trainer a consumer",
            &shared,
        )?;
    }
    let speedup =
        shared.aggregate_samples_per_sec / independent.aggregate_samples_per_sec.max(1e-9);
    let cpu_ratio =
        independent.cpu_secs_per_1000_samples / shared.cpu_secs_per_1000_samples.max(1e-9);
    if args.json {
        let out = json!({
            "config": {"trainers": args.trainers, "epochs": args.epochs, "step_ms": args.step_ms,
                        "samples": samples, "batch_size": s.batch_size, "workers": s.workers,
                        "pipeline": pipeline},
            "independent": independent, "shared": shared,
            "speedup": speedup, "cpu_reduction": cpu_ratio,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
    } else {
        outln!(
            "speedup: {speedup:.2}x aggregate throughput; {cpu_ratio:.2}x less CPU per sample \
             with one shared pipeline"
        )?;
    }
    Ok(())
}

fn print_run(title: &str, r: &RunFigures) -> Result<()> {
    outln!("{title}")?;
    outln!("  {:>7} {:>11} {:>10}", "trainer", "samples/s", "data wait")?;
    for (i, t) in r.trainers.iter().enumerate() {
        outln!(
            "  {:>7} {:>11.0} {:>9.0}%",
            i + 1,
            t.samples_per_sec,
            t.data_wait_share * 100.0
        )?;
    }
    outln!(
        "  total: {:.0} samples/s aggregate, {:.2} CPU s per 1000 samples, {:.1} s wall\n",
        r.aggregate_samples_per_sec,
        r.cpu_secs_per_1000_samples,
        r.wall_secs
    )?;
    Ok(())
}

/// Generates (once) or reuses the demo's JPEG dataset.
fn demo_dataset(args: &DemoArgs) -> Result<PathBuf> {
    use batchcast_pipeline::{generate_jpeg_dataset, GenerateConfig};
    let cache = match &args.cache_dir {
        Some(d) => d.clone(),
        None => default_cache_dir(),
    };
    let classes = 10;
    let config = GenerateConfig {
        classes,
        images_per_class: args.images.div_ceil(classes).max(1),
        ..GenerateConfig::default()
    };
    let dir = cache.join(format!("demo-jpeg-{}", config.total()));
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(config.total() as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "  generating the demo dataset [{bar:30}] {pos}/{len} JPEGs {per_sec}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    });
    let progress = |done: usize, _total: usize| {
        if let Some(bar) = &bar {
            bar.set_position(done as u64);
        }
    };
    std::fs::create_dir_all(&cache)
        .with_context(|| format!("cannot create the cache directory {}", cache.display()))?;
    let made = generate_jpeg_dataset(&dir, &config, &progress)
        .with_context(|| format!("cannot generate the demo dataset in {}", dir.display()))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if !made.reused && !args.json {
        eprintln!(
            "generated {} JPEGs in {} (reused from now on)",
            made.images,
            dir.display()
        );
    }
    Ok(made.path)
}

/// `$XDG_CACHE_HOME/batchcast`, else `~/.cache/batchcast`, else a temp dir.
fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("batchcast");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache").join("batchcast");
    }
    std::env::temp_dir().join("batchcast-cache")
}

fn run_once(args: &DemoArgs, mode: Mode, samples_per_epoch: u64) -> Result<RunFigures> {
    let exe = std::env::current_exe().context("cannot find the batchcast executable")?;
    let name = format!("demo-{}", std::process::id());
    let t0 = Instant::now();
    let mut producer: Option<Process> = None;
    if mode == Mode::Shared {
        let mut cmd = Command::new(&exe);
        cmd.args(["serve", "--name", &name, "--json", "--epochs"])
            .arg(args.epochs.to_string())
            .arg("--consumers")
            .arg(args.trainers.to_string())
            .args(args.source.to_flags());
        let mut child = supervised(cmd).context("cannot start the demo producer")?;
        // Its first line says it listens; no line means it failed to start.
        let out = child.take_stdout().context("producer stdout")?;
        let mut lines = BufReader::new(out).lines();
        if !matches!(lines.next(), Some(Ok(l)) if l.contains("listening")) {
            let status = child.wait()?;
            bail!("the demo producer failed to start ({status}); see its error above");
        }
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        producer = Some(child);
    }
    let mode_name = if mode == Mode::Shared {
        "shared"
    } else {
        "independent"
    };
    let (tx, rx) = mpsc::channel::<(usize, Value)>();
    let mut trainers = Vec::new();
    for i in 0..args.trainers {
        let mut cmd = Command::new(&exe);
        cmd.args(["demo-trainer", "--mode", mode_name, "--name", &name])
            .arg("--epochs")
            .arg(args.epochs.to_string())
            .arg("--step-ms")
            .arg(args.step_ms.to_string())
            .args(args.source.to_flags());
        let mut child = supervised(cmd).context("cannot start a demo trainer")?;
        let out = child.take_stdout().context("trainer stdout")?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send((i, v));
                }
            }
        });
        trainers.push(child);
    }
    drop(tx);
    let total = args.trainers as u64 * samples_per_epoch * args.epochs;
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("  {prefix:>11} [{bar:30}] {pos}/{len} samples {per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(mode_name);
        bar
    });
    let mut progress = vec![0u64; args.trainers];
    let mut done: Vec<Option<Value>> = vec![None; args.trainers];
    for (i, v) in rx {
        match v["event"].as_str() {
            Some("progress") => {
                progress[i] = v["samples"].as_u64().unwrap_or(0);
                if let Some(bar) = &bar {
                    bar.set_position(progress.iter().sum());
                }
            }
            Some("done") => done[i] = Some(v),
            _ => {}
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let mut cpu = 0.0;
    for t in trainers.iter_mut() {
        let status = t.wait()?;
        cpu += t.usage().map_or(0.0, |u| u.cpu_seconds);
        if !status.success() {
            if let Some(mut p) = producer.take() {
                p.kill();
            }
            bail!("a {mode_name} trainer failed ({status}); see its error above");
        }
    }
    if let Some(mut p) = producer {
        let status = p.wait()?;
        cpu += p.usage().map_or(0.0, |u| u.cpu_seconds);
        if !status.success() {
            bail!("the demo producer failed ({status}); see its error above");
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let mut figures = Vec::new();
    let mut samples = 0;
    for d in done {
        let d = d.context("a trainer ended without its figures")?;
        let n = d["samples"].as_u64().unwrap_or(0);
        let secs = d["seconds"].as_f64().unwrap_or(1.0).max(1e-9);
        samples += n;
        figures.push(TrainerFigures {
            samples: n,
            samples_per_sec: n as f64 / secs,
            data_wait_share: d["wait_secs"].as_f64().unwrap_or(0.0) / secs,
        });
    }
    Ok(RunFigures {
        trainers: figures,
        aggregate_samples_per_sec: samples as f64 / wall,
        cpu_secs_per_1000_samples: cpu / (samples as f64 / 1000.0).max(1e-9),
        wall_secs: wall,
    })
}

/// Starts one of the demo's processes: its stdout piped to the demo, its
/// stderr the demo's, killed with its group if the demo dies.
fn supervised(cmd: Command) -> std::io::Result<Process> {
    let options = Options {
        stdout: Output::Pipe,
        stderr: Output::Inherit,
        watcher: true,
        ..Options::default()
    };
    Process::start(cmd, options)
}
