//! `batchcast serve`: run a producer over a dataset (or a synthetic source).

use std::io::IsTerminal;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use batchcast::{IdlePolicy, LagBudget, LagPolicy, Producer, ProducerOptions};
use batchcast_runs::runner::CONSUMERS_ENV;

use crate::out::outln;
use crate::progress::Progress;
use crate::source::{self, args::SourceArgs};

/// Arguments of `batchcast serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Name consumers attach to.
    #[arg(long)]
    pub name: String,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Epochs to serve. 0: serve for as long as any consumer reads (each
    /// trainer looping its own number of epochs), until none has been
    /// attached for --idle-timeout seconds (never without --idle-timeout),
    /// like Python's `Producer.run()` without `epochs=`.
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    /// Slots retained: how far the slowest consumer may fall behind.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// Bytes per slot (default: sized from the first batch, +25 %).
    #[arg(long)]
    pub slot_size: Option<usize>,
    /// How far a consumer may fall behind the others before it holds them
    /// back (or is evicted): bytes ("512MiB", "2GiB") or batches
    /// ("100batches"). Default: the smaller of 1 GiB and 1/8 of the memory
    /// available, reserved only when used.
    #[arg(long)]
    pub max_lag: Option<String>,
    /// Past the lag budget: "wait" (hold the others back) or "evict" (evict
    /// the laggard after --stall-timeout seconds).
    #[arg(long, default_value = "wait")]
    pub lag_policy: String,
    /// Seconds the producer stays blocked by a laggard before it evicts it
    /// (with --lag-policy evict).
    #[arg(long, default_value_t = 10.0)]
    pub stall_timeout: f64,
    /// Publish even with no consumer attached (default: wait for one).
    #[arg(long)]
    pub no_wait: bool,
    /// Wait for this many consumers before the first epoch (so that all of
    /// them see it whole). Under `batchcast run` the workload's number of
    /// trainers (BATCHCAST_CONSUMERS) is waited for too, within
    /// --idle-timeout or 300 s.
    #[arg(long, default_value_t = 0)]
    pub consumers: usize,
    /// Give up after this many seconds with no consumer attached (with
    /// --epochs 0, once a batch was served: finish).
    #[arg(long)]
    pub idle_timeout: Option<f64>,
    /// Print one JSON line per event on stdout (for scripts and tests).
    #[arg(long)]
    pub json: bool,
}

/// How long to wait for the trainers that `batchcast run` announced, when
/// no --idle-timeout is given.
const TRAINERS_WITHIN: Duration = Duration::from_secs(300);

/// The number of trainers `batchcast run` gave the workload (0: none given).
fn trainers_from_env() -> Result<usize> {
    match std::env::var(CONSUMERS_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(0),
        Ok(v) => v.trim().parse().map_err(|_| {
            anyhow::anyhow!(
                "{CONSUMERS_ENV}={v:?} is not a number of consumers; `batchcast run` sets it to \
                 the workload's number of trainers: unset it, or set a whole number"
            )
        }),
        Err(std::env::VarError::NotUnicode(v)) => Err(anyhow::anyhow!(
            "{CONSUMERS_ENV}={v:?} is not a number of consumers; unset it, or set a whole number"
        )),
    }
}

/// Runs `batchcast serve`.
pub fn run(args: ServeArgs) -> Result<()> {
    let trainers = trainers_from_env()?;
    let max_lag = args.max_lag.as_deref().map(LagBudget::parse).transpose()?;
    let lag_policy = LagPolicy::parse(&args.lag_policy, args.stall_timeout)?;
    let source = args.source.open()?;
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install(&stop)?;
    let mut producer = Producer::create(
        &args.name,
        ProducerOptions {
            window: args.window,
            slot_size: args.slot_size,
            samples_per_epoch: Some(source.samples_per_epoch()),
            batch_size: Some(args.source.batch_size),
            idle: if args.no_wait {
                IdlePolicy::Run
            } else {
                IdlePolicy::Wait(args.idle_timeout.map(Duration::from_secs_f64))
            },
            dir: None,
            max_lag,
            lag_policy,
            ..ProducerOptions::default()
        },
    )?;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"event": "listening", "name": args.name,
                "socket": producer.socket_path(), "pid": std::process::id(),
                "samples_per_epoch": source.samples_per_epoch()})
        )?;
    } else {
        let epochs = match (args.epochs, args.idle_timeout) {
            (0, Some(t)) => format!("epochs until no consumer for {t} s"),
            (0, None) => "epochs until stopped".to_string(),
            (n, _) => format!("{n} epochs"),
        };
        eprintln!(
            "serving {:?} on {} ({} samples per epoch, batch {}, {epochs}); Ctrl-C stops",
            args.name,
            producer.socket_path().display(),
            source.samples_per_epoch(),
            args.source.batch_size,
        );
    }
    let want = args.consumers.max(trainers);
    if want > 0 {
        // Wait in short slices, so that Ctrl-C or SIGTERM (from `batchcast
        // run` stopping a workload, say) ends the wait at once.
        let within = match (args.idle_timeout, trainers > args.consumers) {
            (Some(t), _) => Some(Duration::from_secs_f64(t)),
            (None, true) => Some(TRAINERS_WITHIN),
            (None, false) => None,
        };
        let deadline = within.map(|t| std::time::Instant::now() + t);
        while !producer.wait_for_consumers(want, Some(Duration::from_millis(100))) {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                producer.finish(batchcast::ShutdownReason::Interrupted);
                return Ok(());
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                let secs = within.map_or(0.0, |t| t.as_secs_f64());
                if trainers > args.consumers {
                    let msg = format!(
                        "only {} of the workload's {trainers} trainers attached within {secs} s \
                         ({CONSUMERS_ENV}={trainers}, set by `batchcast run`); see the other runs' \
                         output for a trainer that did not start or connects elsewhere, or pass \
                         --idle-timeout to wait longer",
                        producer.consumers()
                    );
                    producer.finish(batchcast::ShutdownReason::Failed(msg.clone()));
                    return Err(anyhow::anyhow!(msg));
                }
                let err = batchcast::Error::NoConsumers { secs };
                producer.finish(batchcast::ShutdownReason::Failed(err.to_string()));
                return Err(err.into());
            }
        }
    }
    let progress = Progress::new(!args.json && std::io::stderr().is_terminal());
    let result = source::serve(
        &mut producer,
        source.as_ref(),
        args.epochs,
        &stop,
        |e, i, n| {
            progress.batch(e, i, n, args.source.batch_size);
        },
    );
    progress.finish();
    producer.finish(source::shutdown_reason(&result));
    let summary = result?;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"event": "finished", "summary": summary})
        )?;
    } else {
        eprintln!(
            "served {} epochs, {} batches, {} samples in {:.1} s ({:.0} samples/s){}",
            summary.epochs,
            summary.batches,
            summary.samples,
            summary.seconds,
            summary.samples as f64 / summary.seconds.max(1e-9),
            if summary.interrupted {
                "; interrupted"
            } else if summary.idle {
                "; no consumer left"
            } else {
                ""
            }
        );
    }
    Ok(())
}
