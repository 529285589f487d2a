//! What a consumer hands out: the [`Event`]s of
//! [`Consumer::next_event`](super::Consumer::next_event), the
//! [`EpochInfo`] of each epoch it follows, and its own figures
//! ([`ConsumerStats`]).

use super::batch::Batch;
use crate::wire::{ShutdownReason, TriggerFired};

/// An epoch as this consumer will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochInfo {
    /// The epoch number.
    pub epoch: u64,
    /// Rows this consumer will receive, when the producer knows.
    pub samples: Option<u64>,
    /// Batches this consumer will receive, when the producer knows.
    pub batches: Option<u64>,
    /// This consumer's batch size.
    pub batch_size: u64,
    /// True when joined mid-epoch.
    pub partial: bool,
    /// The position in the epoch of the first row this consumer receives
    /// (more than 0 when it joined mid-epoch or was restored there).
    pub first_row: u64,
}

/// What [`Consumer::next_event`](super::Consumer::next_event) returns.
pub enum Event {
    /// An epoch begins.
    EpochStart(EpochInfo),
    /// A batch.
    Batch(Batch),
    /// The epoch ended after its last batch.
    EpochEnd {
        /// The epoch.
        epoch: u64,
        /// Rows received in it.
        samples: u64,
    },
    /// The producer shut down cleanly; repeated on every later call.
    Finished(ShutdownReason),
    /// A trigger fired at an epoch boundary: after the ending epoch's last
    /// batch, before its [`Event::EpochEnd`] (so a loop over the epoch
    /// sees it), or between epochs when none was being read.
    Trigger(TriggerFired),
}

/// A consumer's own figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerStats {
    /// Batches handed out.
    pub batches: u64,
    /// Seconds spent waiting for data.
    pub wait_secs: f64,
    /// Batches received and ready but not yet handed out.
    pub lag: u64,
    /// Batches of the epoch being read that the producer has published and
    /// this consumer has not read yet: how far the producer is ahead (at
    /// most its window; 0 between epochs).
    pub behind: u64,
}
