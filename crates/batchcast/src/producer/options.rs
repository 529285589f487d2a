//! What a producer is asked to do: [`ProducerOptions`], given to
//! [`Producer::create`](super::Producer::create), and what it does while
//! no consumer is attached ([`IdlePolicy`]).

use std::path::PathBuf;
use std::time::Duration;

use super::{Durability, LagBudget, LagPolicy};
use crate::mirror::Mirror;
use crate::warn::Warn;

/// What the producer does while no consumer is attached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IdlePolicy {
    /// Wait for a consumer before publishing (optionally only this long,
    /// then fail with [`Error::NoConsumers`](crate::Error::NoConsumers)).
    Wait(Option<Duration>),
    /// Publish anyway; batches nobody reads are overwritten.
    Run,
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// Slots retained: how far the slowest consumer may fall behind.
    pub window: usize,
    /// Bytes per slot; `None` sizes slots from the first batch with
    /// `SLOT_HEADROOM` headroom.
    pub slot_size: Option<usize>,
    /// Rows per epoch, when known: lets consumers know `len()` up front.
    pub samples_per_epoch: Option<u64>,
    /// The nominal batch size; `None`: the first batch's rows.
    pub batch_size: Option<u64>,
    /// What to do with no consumer attached.
    pub idle: IdlePolicy,
    /// Socket directory; `None`: the default (see `crate::endpoint`).
    pub dir: Option<PathBuf>,
    /// How far a consumer may fall behind the others before it holds them
    /// back (or is evicted); `None`: the smaller of [`DEFAULT_LAG_BYTES`](super::DEFAULT_LAG_BYTES)
    /// and an eighth of the memory available, in whole slots. Its memory
    /// is reserved only when used.
    pub max_lag: Option<LagBudget>,
    /// What to do past the lag budget.
    pub lag_policy: LagPolicy,
    /// Where warnings go (lag memory the kernel refused); stderr by default.
    pub warn: Warn,
    /// Keep a state file so that a producer restarted under this name
    /// resumes the stream where this one stopped (see [`Durability`]);
    /// `None`: a restart starts afresh.
    pub durable: Option<Durability>,
    /// Devices that hold a copy of the arena (see [`DeviceMirror`](crate::DeviceMirror)):
    /// each slot is copied into every mirror before it is published, and
    /// consumers receive each mirror's fd in their welcome. Each mirror
    /// allocates the arena's whole length on its device: the window's
    /// slots and the lag slots ([`max_lag`](Self::max_lag), by default up
    /// to [`DEFAULT_LAG_BYTES`](super::DEFAULT_LAG_BYTES)), so device
    /// memory is bounded by `window` and the lag budget; the lag slots'
    /// host memory is reserved only when used, a mirror's is not. At most
    /// [`MAX_MIRRORS`](crate::MAX_MIRRORS), each device named once; empty
    /// by default (no device copy).
    pub mirrors: Vec<Mirror>,
}

/// Headroom of auto-sized slots over the first batch (25 %).
pub const SLOT_HEADROOM: f64 = 1.25;

impl Default for ProducerOptions {
    fn default() -> Self {
        ProducerOptions {
            window: 8,
            slot_size: None,
            samples_per_epoch: None,
            batch_size: None,
            idle: IdlePolicy::Wait(None),
            dir: None,
            max_lag: None,
            lag_policy: LagPolicy::Wait,
            warn: Warn::default(),
            durable: None,
            mirrors: Vec::new(),
        }
    }
}
