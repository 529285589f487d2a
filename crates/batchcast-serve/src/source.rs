//! What the serve loop publishes: a source of batches.

use batchcast::{LeafSpec, Node};

use crate::error::{Result, ServeError};

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
    /// Samples decoded so far, where the source decodes (read and decoded,
    /// or tried and skipped); None for a source that does not.
    fn decoded(&self) -> Option<u64> {
        None
    }
    /// At an epoch boundary: takes in what was added to the dataset since
    /// the last look (a watched folder), for the epochs to come; None for
    /// a source that does not grow.
    fn grow(&mut self) -> Result<Option<Arrived>> {
        Ok(None)
    }
    /// The source's own clock (a replayed trace's time, seconds since the
    /// Unix epoch) as of its last [`BatchSource::grow`], or its start;
    /// None: the source follows wall time.
    fn clock(&self) -> Option<f64> {
        None
    }
    /// At an epoch boundary: a trigger fired over the last `samples`
    /// samples that arrived (what `--select new-data` serves from now on).
    fn triggered(&mut self, _samples: u64) -> Result<()> {
        Ok(())
    }
}

/// What [`BatchSource::grow`] took in.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Arrived {
    /// Samples added to the dataset.
    pub added: u64,
    /// Earliest and latest arrival time among them (seconds since the
    /// Unix epoch).
    pub arrivals: Option<(f64, f64)>,
    /// Seconds the look took.
    pub seconds: f64,
}

/// Checks a batch size option.
pub fn check_batch_size(bs: u64) -> Result<()> {
    if bs == 0 {
        return Err(ServeError::invalid("--batch-size must be at least 1"));
    }
    Ok(())
}
