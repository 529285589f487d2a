//! The control-plane messages: hellos, the producer's and the consumer's
//! messages, and what they carry.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::mirror::MirrorSpec;
use crate::status::StatusReport;
use crate::stream::StreamSpec;

/// How a consumer that connects mid-run joins the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum JoinPolicy {
    /// Replay the current epoch's retained batches if its start is still
    /// retained, else start at the next epoch.
    #[default]
    CatchUp,
    /// Start at the next epoch.
    NextEpoch,
    /// Start with the next batch, mid-epoch (a partial first epoch).
    Now,
}

impl JoinPolicy {
    /// Parses `catch-up`, `next-epoch` or `now`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "catch-up" | "catchup" | "catch_up" => Ok(JoinPolicy::CatchUp),
            "next-epoch" | "next_epoch" => Ok(JoinPolicy::NextEpoch),
            "now" => Ok(JoinPolicy::Now),
            _ => Err(Error::InvalidArgument(format!(
                "unknown join policy {s:?}; use \"catch-up\", \"next-epoch\" or \"now\""
            ))),
        }
    }

    /// The name [`JoinPolicy::parse`] accepts.
    pub fn name(self) -> &'static str {
        match self {
            JoinPolicy::CatchUp => "catch-up",
            JoinPolicy::NextEpoch => "next-epoch",
            JoinPolicy::Now => "now",
        }
    }
}

/// First message of every connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Must be [`MAGIC`].
    pub magic: [u8; 4],
    /// The sender's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// What the connection is for.
    pub role: Role,
}

/// What a connection is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Role {
    /// A consumer of batches.
    Consumer(ConsumerHello),
    /// A one-shot status query (`batchcast status`).
    Status,
}

/// A consumer's wishes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerHello {
    /// Rows per consumer batch; `None`: the producer's batch size.
    pub batch_size: Option<u64>,
    /// Drop each epoch's last, smaller batch.
    pub drop_last: bool,
    /// How to join mid-run.
    pub join: JoinPolicy,
    /// Free text shown by `batchcast status` (e.g. the script name).
    pub label: String,
    /// What the producer does if it evicts this consumer for falling behind.
    pub on_evict: OnEvict,
    /// Where a consumer restored from a saved state wants to start: the
    /// producer starts it at the retained batch holding that row when the
    /// position lies in its current epoch, else at the next epoch. Last, so
    /// that a hello without it still decodes where it is ignored.
    pub start: Option<Position>,
    /// Place this consumer per its join policy but send it nothing until
    /// its [`ToProducer::Start`], which may place it again at a saved
    /// position; placed at the next epoch, it holds the current epoch's
    /// retained batches meanwhile (a consumer whose saved position is not
    /// known yet when it connects).
    pub deferred: bool,
}

/// A position in the stream: a row of an epoch, rows counted from the
/// epoch's start in the epoch's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The epoch, from 0.
    pub epoch: u64,
    /// Rows of the epoch before this one.
    pub row: u64,
}

/// What an evicted consumer wants (see `ProducerOptions::lag_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum OnEvict {
    /// Its next read fails with `Error::FellBehind`; it gets no more batches.
    #[default]
    Error,
    /// Its current epoch ends short and it rejoins at the next epoch.
    Rejoin,
}

impl OnEvict {
    /// Parses `error` or `rejoin`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "error" => Ok(OnEvict::Error),
            "rejoin" => Ok(OnEvict::Rejoin),
            _ => Err(Error::InvalidArgument(format!(
                "unknown on_evict {s:?}; use \"error\" or \"rejoin\""
            ))),
        }
    }
}

/// Messages a consumer sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToProducer {
    /// Opens the connection.
    Hello(Hello),
    /// The consumer released a batch in its ledger while the board said the
    /// producer waits for a slot, or began to read the batch the board
    /// said it waits to see read: a wake-up, with no content.
    Released,
    /// The consumer was closed while batches it handed out are still alive:
    /// send it nothing more and count it gone; it keeps the slots of those
    /// batches until it releases them or its connection closes.
    Leaving,
    /// A deferred consumer (`ConsumerHello::deferred`) starts: at this
    /// position if given (as `ConsumerHello::start`), else per its join
    /// policy. Sent once, before it reads anything.
    Start(Option<Position>),
}

/// Messages a producer sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToConsumer {
    /// Accepts a consumer; the arena, board, ledger and holder-count fds
    /// are attached, in that order, then one per device mirror.
    Welcome(Welcome),
    /// Refuses a consumer.
    Refused(String),
    /// An epoch begins for this consumer.
    EpochStart(EpochStart),
    /// The epoch's last batch has been published.
    EpochEnd {
        /// The epoch.
        epoch: u64,
        /// Rows published to this consumer in this epoch.
        samples: u64,
        /// The epoch's batches end before this sequence number.
        end_seq: u64,
    },
    /// The producer evicted this consumer for falling behind (its ledger's
    /// eviction generation is now `generation`).
    Evicted {
        /// The epoch it was evicted from.
        epoch: u64,
        /// Batches it was behind the most advanced consumer.
        behind: u64,
        /// The lag budget, in batches.
        budget: u64,
        /// The eviction generation this message is about.
        generation: u64,
    },
    /// The producer stops; no more batches follow.
    Shutdown(ShutdownReason),
    /// Reply to a status query.
    Status(StatusReport),
    /// Answers a deferred consumer's `Start`: what the producer held back
    /// for it while it was parked comes before this, and what follows is
    /// sent as it happens.
    Started,
    /// An epoch boundary: the size of the epochs to come and the trigger
    /// that fired there, if any. Sent after the ending epoch's last batch
    /// (before its `EpochEnd`) or between epochs; the consumer hands the
    /// trigger out after the epoch's last batch, before its end.
    Boundary(Boundary),
}

/// Longest trigger id, in bytes.
pub const MAX_TRIGGER_ID: usize = 256;

/// An epoch boundary (see [`ToConsumer::Boundary`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Boundary {
    /// Rows of each epoch from the next one on, when known (a dataset that
    /// grew says so here, before its next epoch begins).
    pub next_samples: Option<u64>,
    /// The trigger that fired at this boundary.
    pub trigger: Option<TriggerFired>,
}

/// A trigger fired at an epoch boundary, once for every consumer: the data
/// that arrived since its last firing is in the epochs from `epoch` on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerFired {
    /// The trigger, as the producer was given it (`amount=400`); at most
    /// [`MAX_TRIGGER_ID`] bytes.
    pub id: String,
    /// Its firings so far, this one included (1 for the first).
    pub seq: u64,
    /// The first epoch that holds the new data.
    pub epoch: u64,
    /// Samples that arrived since the last firing (or since the start).
    pub samples: u64,
    /// The earliest and latest arrival time among them, in seconds since
    /// the Unix epoch (None when no sample arrived).
    pub arrivals: Option<(f64, f64)>,
}

/// Sent once, with the arena fd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The producer's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The producer's pid.
    pub producer_pid: u32,
    /// Bytes per slot.
    pub slot_size: u64,
    /// Number of slots (the window and the lag slots).
    pub slots: u32,
    /// Slots of the window (the first `window` of them).
    pub window: u32,
    /// Rows per epoch, when the producer knows it.
    pub samples_per_epoch: Option<u64>,
    /// The producer's nominal batch size, when known.
    pub batch_size: Option<u64>,
    /// The id `batchcast status` shows for this consumer.
    pub consumer_id: u64,
    /// What the producer sends (see `crate::stream`).
    pub stream: StreamSpec,
    /// True when this consumer's first epoch is the rest of an epoch in
    /// progress (`JoinPolicy::Now` joining mid-epoch).
    pub first_epoch_partial: bool,
    /// Rows of that partial first epoch, when the producer knows them.
    pub first_epoch_samples: Option<u64>,
    /// True when the producer keeps a state file and a producer restarted
    /// under its name resumes its stream: a consumer that loses it waits
    /// for the restart (`ConsumerOptions::reconnect_timeout`) instead of
    /// failing at once.
    pub resumable: bool,
    /// What identifies the stream of such a producer (its dataset, seed
    /// and the options that change the samples, as `key=value` lines, at
    /// most `MAX_IDENTITY` bytes): a consumer's saved state carries it, and
    /// one loaded into a consumer of another stream is refused.
    pub identity: Option<String>,
    /// The devices holding a copy of the arena (at most
    /// [`MAX_MIRRORS`](crate::MAX_MIRRORS)); their fds follow the four
    /// fixed ones, in this order. A batch on the board is in every one.
    pub mirrors: Vec<MirrorSpec>,
}

/// An epoch begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochStart {
    /// Epoch number, from 0.
    pub epoch: u64,
    /// Rows this consumer will receive in this epoch, when known.
    pub samples: Option<u64>,
    /// The producer's nominal batch size.
    pub batch_size: u64,
    /// True when the consumer joined mid-epoch (`JoinPolicy::Now`).
    pub partial: bool,
    /// This consumer's first batch of the epoch; it reads every batch the
    /// board publishes from here to the epoch's end.
    pub first_seq: u64,
    /// The position in the epoch (rows from its start, in the epoch's
    /// order) of the first row of batch `first_seq`: more than 0 when the
    /// consumer joins mid-epoch or a restarted producer resumes the epoch
    /// there. A consumer that reattaches skips the rows it already has.
    pub first_row: u64,
}

/// Why a producer stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShutdownReason {
    /// It ran all its epochs.
    Finished,
    /// It was interrupted (Ctrl-C, SIGTERM) and stopped cleanly.
    Interrupted,
    /// Its source failed; the text says how.
    Failed(String),
}
