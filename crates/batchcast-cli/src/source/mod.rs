//! Where `batchcast serve` gets its batches, and the loop that publishes them.

pub mod args;
pub mod images;
pub mod synthetic;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use batchcast::{Error, LeafSpec, Node, Producer, ShutdownReason};

/// A source of batches for one producer.
pub trait BatchSource: Send {
    /// Rows in one epoch (what the consumers' `len()` is computed from).
    fn samples_per_epoch(&self) -> u64;
    /// The sample indices of each batch of `epoch`, in order.
    fn batches(&self, epoch: u64) -> Vec<Vec<u64>>;
    /// The structure of a batch of `rows` rows.
    fn spec(&self, rows: u64) -> (Node, Vec<LeafSpec>);
    /// Fills the leaves of a batch of `indices` (laid out as `spec` says);
    /// returns the rows actually written (fewer when bad samples were
    /// skipped: the written rows come first).
    fn fill(&self, epoch: u64, indices: &[u64], leaves: Vec<&mut [u8]>) -> Result<u64>;
}

/// Figures of a finished `serve` run.
#[derive(Debug, Default, serde::Serialize)]
pub struct ServeSummary {
    /// Epochs completed.
    pub epochs: u64,
    /// Batches published.
    pub batches: u64,
    /// Samples published.
    pub samples: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// True when stopped by a signal.
    pub interrupted: bool,
    /// True when it ended because no consumer was attached for the idle
    /// timeout (with `epochs` 0, after serving at least one batch).
    pub idle: bool,
}

/// Publishes `epochs` epochs of `source` through `producer`; `epochs` 0
/// publishes epochs for as long as any consumer reads: until none has been
/// attached for the producer's idle timeout (after at least one batch was
/// served; before that, the timeout is an error), as Python's `run()`
/// without `epochs=` does. `stop` is set by SIGINT/SIGTERM.
pub fn serve(
    producer: &mut Producer,
    source: &dyn BatchSource,
    epochs: u64,
    stop: &AtomicBool,
    mut on_batch: impl FnMut(u64, u64, u64),
) -> Result<ServeSummary> {
    let t0 = Instant::now();
    let mut summary = ServeSummary::default();
    let mut interrupt = || stop.load(Ordering::Relaxed);
    let until_idle = epochs == 0;
    'epochs: while until_idle || summary.epochs < epochs {
        let epoch = producer.begin_epoch()?;
        let plan = source.batches(epoch);
        let total = plan.len() as u64;
        for (i, indices) in plan.iter().enumerate() {
            let (tree, leaves) = source.spec(indices.len() as u64);
            let mut slot = match producer.loan(tree, &leaves, &mut interrupt) {
                Ok(slot) => slot,
                Err(Error::Interrupted) => {
                    summary.interrupted = true;
                    break 'epochs;
                }
                Err(Error::NoConsumers { .. }) if until_idle && summary.batches > 0 => {
                    summary.idle = true;
                    break 'epochs;
                }
                Err(e) => return Err(e.into()),
            };
            let rows = source
                .fill(epoch, indices, slot.leaves_mut())
                .with_context(|| format!("epoch {epoch}, batch {i}"))?;
            if rows == 0 {
                continue; // every sample of this batch was skipped
            }
            slot.truncate_rows(rows)?;
            slot.publish()?;
            summary.batches += 1;
            summary.samples += rows;
            on_batch(epoch, i as u64 + 1, total);
            if stop.load(Ordering::Relaxed) {
                summary.interrupted = true;
                break 'epochs;
            }
        }
        producer.end_epoch()?;
        summary.epochs += 1;
    }
    summary.seconds = t0.elapsed().as_secs_f64();
    Ok(summary)
}

/// The reason to give consumers at shutdown.
pub fn shutdown_reason(result: &Result<ServeSummary>) -> ShutdownReason {
    match result {
        Ok(s) if s.interrupted => ShutdownReason::Interrupted,
        Ok(_) => ShutdownReason::Finished,
        Err(e) => ShutdownReason::Failed(format!("{e:#}")),
    }
}

/// Checks a batch size option.
pub fn check_batch_size(bs: u64) -> Result<()> {
    if bs == 0 {
        bail!("--batch-size must be at least 1");
    }
    Ok(())
}
