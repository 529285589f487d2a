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
//! Both runs are one plan that the runner runs ([`engine`]), recorded in a
//! run store that `batchcast ui` opens.

mod dataset;
mod engine;

use std::path::PathBuf;

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::json;

use crate::out::outln;
use batchcast_serve::{default_workers, SourceArgs};
use dataset::{default_cache_dir, demo_dataset};
use engine::{shell_word, Engine, INDEPENDENT, SHARED};

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
    /// The run store the demo's runs are recorded in (default: runs.db in
    /// the cache directory).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
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

/// Runs `batchcast demo`.
pub fn run(mut args: DemoArgs) -> Result<()> {
    prepare(&mut args)?;
    let samples = args.source.open()?.samples_per_epoch(); // validates, before spawning
    let s = &args.source;
    let pipeline = pipeline_text(s);
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
    let engine = Engine::new(&args, store_path(&args)?)?;
    let total = args.trainers as u64 * samples * args.epochs;
    // Each workload is measured, then printed, before the next starts.
    let measure = |workload: &str, title: &str| -> Result<RunFigures> {
        let run = engine.run(workload, total, args.json)?;
        if !args.json {
            print_run(title, &run)?;
        }
        Ok(run)
    };
    let independent = measure(
        INDEPENDENT,
        "independent: each trainer runs its own pipeline",
    )?;
    let shared = measure(
        SHARED,
        "shared: one batchcast producer, every trainer a consumer",
    )?;
    let config = json!({"trainers": args.trainers, "epochs": args.epochs, "step_ms": args.step_ms,
                        "samples": samples, "batch_size": s.batch_size, "workers": s.workers,
                        "pipeline": pipeline});
    print_comparison(args.json, config, &independent, &shared, engine.store())
}

/// Checks `--trainers`, and fills in what the demo measures or makes once:
/// the synthetic source's calibration, or the demo's image dataset.
fn prepare(args: &mut DemoArgs) -> Result<()> {
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
        args.source.data = Some(demo_dataset(args)?);
    }
    Ok(())
}

/// The pipeline each trainer runs, in words.
fn pipeline_text(s: &SourceArgs) -> String {
    if s.synthetic {
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
    }
}

/// The run store: `--store`, else `runs.db` in the cache folder.
fn store_path(args: &DemoArgs) -> Result<PathBuf> {
    Ok(match &args.store {
        Some(path) => path.clone(),
        None => match &args.cache_dir {
            Some(d) => d.join("runs.db"),
            None => default_cache_dir()?.join("runs.db"),
        },
    })
}

/// Prints the speedup and CPU saving of sharing (with `--json`, the whole
/// result as one JSON document), and where the runs were recorded.
fn print_comparison(
    json: bool,
    config: serde_json::Value,
    independent: &RunFigures,
    shared: &RunFigures,
    store: &std::path::Path,
) -> Result<()> {
    let speedup =
        shared.aggregate_samples_per_sec / independent.aggregate_samples_per_sec.max(1e-9);
    let cpu_ratio =
        independent.cpu_secs_per_1000_samples / shared.cpu_secs_per_1000_samples.max(1e-9);
    if json {
        let out = json!({
            "config": config,
            "independent": independent, "shared": shared,
            "speedup": speedup, "cpu_reduction": cpu_ratio,
            "store": store.to_string_lossy(),
        });
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
    } else {
        outln!(
            "speedup: {speedup:.2}x aggregate throughput; {cpu_ratio:.2}x less CPU per sample \
             with one shared pipeline"
        )?;
        outln!(
            "recorded in {}; open it with: batchcast ui --store {}",
            store.display(),
            shell_word(store)
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
