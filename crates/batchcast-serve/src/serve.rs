//! The loop that publishes a source's batches through a producer.

use std::time::Instant;

use batchcast::{AfterLoanError, Producer, ServeUntil, ShutdownReason};

use crate::error::{Result, ServeError};
use crate::resume::skip_rows;
use crate::source::BatchSource;

/// Figures of a finished `serve` run.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct ServeSummary {
    /// Epochs completed.
    pub epochs: u64,
    /// Batches published.
    pub batches: u64,
    /// Samples published.
    pub samples: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Samples decoded in each completed epoch, where the source decodes
    /// (an image dataset): with `--select`, the selection's size.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decoded_per_epoch: Vec<u64>,
    /// True when stopped by an interrupt (a signal).
    pub interrupted: bool,
    /// True when it ended because no consumer was attached for the idle
    /// timeout (with `epochs` 0, after serving at least one batch).
    pub idle: bool,
}

/// Publishes `epochs` epochs of `source` through `producer` (a producer
/// that resumed a stream, [`Producer::resumed`], publishes those its
/// predecessors did not, from the resume point on); `epochs` 0
/// publishes epochs for as long as any consumer reads: until none has been
/// attached for the producer's idle timeout (after at least one batch was
/// served; before that, the timeout is an error), by the core's
/// [`ServeUntil`] rule, as Python's `Producer.run()` without `epochs=`.
/// `interrupt` is called every 100 ms while waiting and after each batch;
/// when it returns true the run stops, interrupted. `on_batch(epoch, i, n)`
/// is called once batch `i` (from 1) of `n` is published.
pub fn serve(
    producer: &mut Producer,
    source: &dyn BatchSource,
    epochs: u64,
    interrupt: &mut dyn FnMut() -> bool,
    on_batch: &mut dyn FnMut(u64, u64, u64),
) -> Result<ServeSummary> {
    let t0 = Instant::now();
    let mut summary = ServeSummary::default();
    let until = ServeUntil::from_epochs(epochs);
    // A resumed stream counts the epochs its predecessors served, and its
    // first epoch begins at the resume point's row.
    let resumed = producer.resumed();
    let mut skip = resumed.map_or(0, |r| r.row);
    let before = resumed.map_or(0, |r| r.epoch);
    'epochs: while until.wants_epoch(before + summary.epochs) {
        let epoch = producer.begin_epoch()?;
        let decoded_before = source.decoded();
        let plan = skip_rows(source.batches(epoch), std::mem::take(&mut skip));
        let total = plan.len() as u64;
        for (i, indices) in plan.iter().enumerate() {
            let (tree, leaves) = source.spec(indices.len() as u64);
            let mut slot = loop {
                match producer.loan(tree.clone(), &leaves, interrupt) {
                    Ok(slot) => break slot,
                    Err(e) => match until.after_loan_error(e, summary.batches) {
                        AfterLoanError::Retry => continue,
                        AfterLoanError::EndInterrupted => {
                            summary.interrupted = true;
                            break 'epochs;
                        }
                        AfterLoanError::EndIdle => {
                            summary.idle = true;
                            break 'epochs;
                        }
                        AfterLoanError::Fail(e) => return Err(e.into()),
                    },
                }
            };
            let rows = source
                .fill(epoch, indices, slot.leaves_mut())
                .map_err(|e| ServeError::Batch {
                    epoch,
                    batch: i as u64,
                    error: Box::new(e),
                })?;
            if rows == 0 {
                continue; // every sample of this batch was skipped
            }
            slot.truncate_rows(rows)?;
            slot.publish()?;
            summary.batches += 1;
            summary.samples += rows;
            on_batch(epoch, i as u64 + 1, total);
            if interrupt() {
                summary.interrupted = true;
                break 'epochs;
            }
        }
        producer.end_epoch()?;
        summary.epochs += 1;
        if let (Some(before), Some(after)) = (decoded_before, source.decoded()) {
            summary.decoded_per_epoch.push(after - before);
        }
    }
    summary.seconds = t0.elapsed().as_secs_f64();
    Ok(summary)
}

/// The reason to give consumers at shutdown.
pub fn shutdown_reason(result: &Result<ServeSummary>) -> ShutdownReason {
    match result {
        Ok(s) if s.interrupted => ShutdownReason::Interrupted,
        Ok(_) => ShutdownReason::Finished,
        Err(e) => ShutdownReason::Failed(e.chain()),
    }
}
