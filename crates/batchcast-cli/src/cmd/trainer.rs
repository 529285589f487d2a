//! `batchcast demo-trainer` (hidden): one emulated training process of the
//! demo. It reads batches either from a pipeline of its own (`independent`,
//! like a DataLoader with workers that prefetch two batches) or from a
//! shared producer (`shared`), and "trains" by holding each batch for a
//! fixed step time, as a GPU step would. It prints a `progress` line per
//! batch and a `done` line with its figures, which it also writes where a
//! runner asks (`BATCHCAST_FIGURES`): `samples`, `seconds`, `wait_secs`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use batchcast::{Consumer, ConsumerOptions, Event};
use serde_json::json;

use crate::out::outln;
use batchcast_serve::SourceArgs;

/// Arguments of `batchcast demo-trainer`.
#[derive(Debug, clap::Args)]
pub struct TrainerArgs {
    /// `independent` or `shared`.
    #[arg(long)]
    pub mode: String,
    /// Producer name (shared mode).
    #[arg(long, default_value = "demo")]
    pub name: String,
    /// Epochs to train.
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    /// Emulated accelerator step per batch, in milliseconds.
    #[arg(long, default_value_t = 20.0)]
    pub step_ms: f64,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// Runs one trainer.
pub fn run(args: TrainerArgs) -> Result<()> {
    let step = Duration::from_secs_f64(args.step_ms / 1000.0);
    let t0 = Instant::now();
    let (samples, wait) = match args.mode.as_str() {
        "independent" => independent(&args, step)?,
        "shared" => shared(&args, step)?,
        other => anyhow::bail!("unknown mode {other:?}; use independent or shared"),
    };
    let secs = t0.elapsed().as_secs_f64();
    batchcast_runs::runner::write_for_runner(&[
        ("samples", samples as f64),
        ("seconds", secs),
        ("wait_secs", wait),
    ])
    .with_context(|| {
        format!(
            "cannot write the trainer's figures to ${}",
            batchcast_runs::runner::FIGURES_ENV
        )
    })?;
    outln!(
        "{}",
        json!({"event": "done", "samples": samples, "seconds": secs, "wait_secs": wait,
               "pid": std::process::id()})
    )?;
    Ok(())
}

/// The emulated step: the trainer's accelerator is busy, its CPU is not.
fn train_step(step: Duration) {
    std::thread::sleep(step);
}

fn progress(samples: u64) -> Result<()> {
    outln!("{}", json!({"event": "progress", "samples": samples}))
}

fn independent(args: &TrainerArgs, step: Duration) -> Result<(u64, f64)> {
    let source = args.source.open()?;
    // Two batches of prefetch, as a DataLoader's default prefetch_factor.
    let (tx, rx) = mpsc::sync_channel::<Result<(u64, Vec<Vec<u8>>)>>(2);
    let epochs = args.epochs;
    let loader = std::thread::spawn(move || {
        for epoch in 0..epochs {
            for indices in source.batches(epoch) {
                let (_, specs) = source.spec(indices.len() as u64);
                let mut bufs: Vec<Vec<u8>> = specs
                    .iter()
                    .map(|s| vec![0u8; s.nbytes().unwrap_or(0) as usize])
                    .collect();
                let leaves: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
                let res = source
                    .fill(epoch, &indices, leaves)
                    .map(|rows| (rows, bufs))
                    .map_err(anyhow::Error::from);
                if tx.send(res).is_err() {
                    return;
                }
            }
        }
    });
    let (mut samples, mut wait) = (0u64, 0f64);
    loop {
        let t = Instant::now();
        let Ok(batch) = rx.recv() else { break };
        wait += t.elapsed().as_secs_f64();
        let (rows, _batch) = batch?;
        samples += rows;
        train_step(step);
        progress(samples)?;
    }
    let _ = loader.join();
    Ok((samples, wait))
}

fn shared(args: &TrainerArgs, step: Duration) -> Result<(u64, f64)> {
    let opts = ConsumerOptions {
        connect_timeout: Some(Duration::from_secs(30)),
        label: format!("demo trainer {}", std::process::id()),
        ..Default::default()
    };
    let mut never = || false;
    let mut consumer = Consumer::connect(&args.name, opts, &mut never)
        .context("cannot attach to the demo producer")?;
    let (mut samples, mut epochs) = (0u64, 0u64);
    loop {
        match consumer.next_event(&mut never)? {
            Event::Batch(batch) => {
                samples += batch.rows();
                train_step(step);
                drop(batch);
                progress(samples)?;
            }
            Event::EpochEnd { .. } => {
                epochs += 1;
                if epochs == args.epochs {
                    break;
                }
            }
            Event::EpochStart(_) | Event::Trigger(_) => {}
            Event::Finished(_) => break,
        }
    }
    Ok((samples, consumer.stats().wait_secs))
}
