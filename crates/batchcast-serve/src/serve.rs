//! The loop that publishes a source's batches through a producer.

use std::time::Instant;

use batchcast::{AfterLoanError, Boundary, Producer, ServeUntil, ShutdownReason, TriggerFired};

use crate::error::{Result, ServeError};
use crate::resume::skip_rows;
use crate::source::{Arrived, BatchSource};
use crate::trigger::Trigger;

/// What happened at an epoch boundary: the source took in new samples, a
/// trigger fired.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BoundaryReport {
    /// The epoch that follows the boundary.
    pub epoch: u64,
    /// Its samples (what consumers were told).
    pub samples_per_epoch: u64,
    /// What the source took in, where it grows.
    pub arrived: Option<Arrived>,
    /// The trigger that fired.
    pub trigger: Option<TriggerFired>,
}

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
/// predecessors did not, from the resume point on, its source and trigger
/// brought there first with [`fast_forward`]); `epochs` 0
/// publishes epochs for as long as any consumer reads: until none has been
/// attached for the producer's idle timeout (after at least one batch was
/// served; before that, the timeout is an error), by the core's
/// [`ServeUntil`] rule, as Python's `Producer.run()` without `epochs=`.
/// `interrupt` is called every 100 ms while waiting and after each batch;
/// when it returns true the run stops, interrupted. `on_batch(epoch, i, n)`
/// is called once batch `i` (from 1) of `n` is published.
///
/// Between two epochs (after the first one's last batch, before its end),
/// the source grows ([`BatchSource::grow`]) and `trigger` counts what
/// arrived and decides; when either has news, every consumer is told (the
/// next epoch's size, the firing) and `on_boundary` is called.
pub fn serve(
    producer: &mut Producer,
    source: &mut dyn BatchSource,
    epochs: u64,
    mut trigger: Option<&mut Trigger>,
    interrupt: &mut dyn FnMut() -> bool,
    on_batch: &mut dyn FnMut(u64, u64, u64),
    on_boundary: &mut dyn FnMut(&BoundaryReport),
) -> Result<ServeSummary> {
    let t0 = Instant::now();
    let mut summary = ServeSummary::default();
    let until = ServeUntil::from_epochs(epochs);
    // A resumed stream counts the epochs its predecessors served, and its
    // first epoch begins at the resume point's row.
    let resumed = producer.resumed();
    let mut skip = resumed.map_or(0, |r| r.row);
    let before = resumed.map_or(0, |r| r.epoch);
    // A resumed stream's trigger was started by `fast_forward`.
    if let Some(t) = trigger.as_deref_mut().filter(|_| resumed.is_none()) {
        t.start_clock(source.clock());
    }
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
        if until.wants_epoch(before + summary.epochs + 1) {
            let t = trigger.as_deref_mut();
            if let Some(report) = boundary(producer, source, t, epoch + 1)? {
                on_boundary(&report);
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

/// Brings a source and its trigger to where they stood when the stream
/// resumed at `epoch` began: the boundaries before epochs 1 to `epoch`
/// again, told to no one. A replayed trace whose clock moves by the epoch
/// (by default, or `--replay-per-epoch`) comes back to the same step, with
/// the same samples in the same order, and an `amount=N` or `every-epoch`
/// trigger (or `time=D` on the trace's clock) to the same count of
/// arrivals and firings; what depends on wall time (a `--replay-speedup`
/// clock, `time=D` on wall time) counts from the restart.
///
/// A source on wall time (a watched folder: no [`BatchSource::clock`])
/// takes in what is on disk at the first of these boundaries and is not
/// looked at again at the others (they would find nothing new), so the
/// cost of a late restart is one rescan plus `epoch` trigger steps (none
/// without a trigger).
pub fn fast_forward(
    source: &mut dyn BatchSource,
    mut trigger: Option<&mut Trigger>,
    epoch: u64,
) -> Result<()> {
    if let Some(t) = trigger.as_deref_mut() {
        t.start_clock(source.clock());
    }
    // Once set: what a look at a source on wall time finds from then on.
    let mut nothing_new: Option<Option<Arrived>> = None;
    for next in 1..=epoch {
        let arrived = match &nothing_new {
            Some(arrived) => arrived.clone(),
            None => source.grow()?,
        };
        if nothing_new.is_none() && source.clock().is_none() {
            nothing_new = Some(arrived.as_ref().map(|_| Arrived::default()));
        }
        settle(source, trigger.as_deref_mut(), next, arrived)?;
        if nothing_new.is_some() && trigger.is_none() {
            break; // the other boundaries would change nothing
        }
    }
    Ok(())
}

/// The boundary before `epoch` at the source and the trigger: what the
/// source took in, and the firing.
fn step(
    source: &mut dyn BatchSource,
    trigger: Option<&mut Trigger>,
    epoch: u64,
) -> Result<(Option<Arrived>, Option<TriggerFired>)> {
    let arrived = source.grow()?;
    settle(source, trigger, epoch, arrived)
}

/// The trigger's step at the boundary before `epoch`, given what the
/// source took in there.
fn settle(
    source: &mut dyn BatchSource,
    trigger: Option<&mut Trigger>,
    epoch: u64,
    arrived: Option<Arrived>,
) -> Result<(Option<Arrived>, Option<TriggerFired>)> {
    let fired = trigger.and_then(|t| {
        if let Some(a) = &arrived {
            t.arrived(a.added, a.arrivals);
        }
        t.at_boundary(epoch, source.clock())
    });
    if let Some(t) = &fired {
        source.triggered(t.samples)?;
    }
    Ok((arrived, fired))
}

/// The boundary before `epoch`: grows the source, asks the trigger, and
/// tells the consumers when either has news.
fn boundary(
    producer: &mut Producer,
    source: &mut dyn BatchSource,
    trigger: Option<&mut Trigger>,
    epoch: u64,
) -> Result<Option<BoundaryReport>> {
    let (arrived, fired) = step(source, trigger, epoch)?;
    let grew = arrived.as_ref().is_some_and(|a| a.added > 0);
    if !grew && fired.is_none() {
        return Ok(None);
    }
    let samples = source.samples_per_epoch();
    producer.announce_boundary(&Boundary {
        next_samples: Some(samples),
        trigger: fired.clone(),
    })?;
    Ok(Some(BoundaryReport {
        epoch,
        samples_per_epoch: samples,
        arrived,
        trigger: fired,
    }))
}

/// The reason to give consumers at shutdown.
pub fn shutdown_reason(result: &Result<ServeSummary>) -> ShutdownReason {
    match result {
        Ok(s) if s.interrupted => ShutdownReason::Interrupted,
        Ok(_) => ShutdownReason::Finished,
        Err(e) => ShutdownReason::Failed(e.chain()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchcast::{LeafSpec, Node};

    /// A source that counts its looks, on its own clock or on wall time.
    struct Looked {
        looks: u64,
        clock: Option<f64>,
    }

    impl BatchSource for Looked {
        fn samples_per_epoch(&self) -> u64 {
            1
        }
        fn batches(&self, _epoch: u64) -> Vec<Vec<u64>> {
            vec![vec![0]]
        }
        fn spec(&self, rows: u64) -> (Node, Vec<LeafSpec>) {
            (
                Node::Leaf(0),
                vec![LeafSpec::array(batchcast::DType::U8, vec![rows])],
            )
        }
        fn fill(&self, _: u64, indices: &[u64], _: Vec<&mut [u8]>) -> Result<u64> {
            Ok(indices.len() as u64)
        }
        fn grow(&mut self) -> Result<Option<Arrived>> {
            self.looks += 1;
            self.clock = self.clock.map(|t| t + 1.0);
            Ok(Some(Arrived {
                added: u64::from(self.looks == 1),
                ..Arrived::default()
            }))
        }
        fn clock(&self) -> Option<f64> {
            self.clock
        }
    }

    #[test]
    fn a_late_restart_on_wall_time_looks_at_the_source_once_and_counts_every_firing() {
        let mut source = Looked {
            looks: 0,
            clock: None,
        };
        let mut trigger = Trigger::new("every-epoch".parse().unwrap());
        let t0 = Instant::now();
        fast_forward(&mut source, Some(&mut trigger), 10_000).unwrap();
        assert!(t0.elapsed().as_secs() < 5, "{:?}", t0.elapsed());
        assert_eq!(source.looks, 1);
        let next = trigger.at_boundary(10_001, None).unwrap();
        assert_eq!((next.seq, next.samples), (10_001, 0));

        let mut traced = Looked {
            looks: 0,
            clock: Some(0.0),
        };
        fast_forward(&mut traced, None, 50).unwrap();
        assert_eq!(traced.looks, 50, "a trace's clock moves at every boundary");

        let mut untriggered = Looked {
            looks: 0,
            clock: None,
        };
        fast_forward(&mut untriggered, None, u64::MAX).unwrap();
        assert_eq!(
            untriggered.looks, 1,
            "any epoch, from a state file, at once"
        );
    }
}
