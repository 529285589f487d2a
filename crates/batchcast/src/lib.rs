//! batchcast core: one producer shares its batches with many consumer
//! processes on the same machine, zero-copy.
//!
//! # Parts
//! - [`Producer`] owns an [`arena`] (a sealed memfd cut into `window` equal
//!   slots), writes each batch into a free slot once, and announces it to
//!   every consumer over a Unix socket ([`wire`]). It runs a control thread
//!   that accepts consumers, reads their releases and notices their deaths.
//! - [`Consumer`] attaches by name ([`endpoint`]), maps the arena (read-only,
//!   or private and writable for in-place writes),
//!   and turns the producer's batches into batches of its own size
//!   ([`consumer::rebatch`]): a batch inside one slot is a view of it, one
//!   spanning several slots is copied piece by piece as they arrive.
//! - A batch is a tree ([`Node`]) of arrays that share the leading row
//!   dimension; [`Layout`] places them in a slot and is validated by the
//!   consumer before any byte is read through it.
//!
//! # Invariants
//! - A slot is written only while no consumer holds a lease on it. A
//!   consumer's leases are released when its views are dropped, or all at
//!   once when its socket closes (a consumer killed with SIGKILL included).
//! - The producer blocks only when every slot is leased: the slowest live
//!   consumer is a whole window plus the lag budget behind. Faster consumers
//!   are never paced by slower ones meanwhile; past the budget the
//!   producer's `LagPolicy` waits or evicts the laggard, whose views never
//!   change under it.
//! - Every sample of an epoch reaches every consumer following that epoch
//!   exactly once, in producer order, the epoch's tail included.
//! - A consumer learns of its producer's death from its socket closing, and
//!   its next call fails with [`Error::ProducerGone`]; nothing waits on a
//!   timeout. Nothing is deserialised but closed, bounded message types.
//! - This crate knows nothing of Python or CUDA.
#![deny(missing_docs)]

pub mod arena;
pub mod board;
pub mod consumer;
pub mod dtype;
pub mod endpoint;
mod error;
mod holds;
pub mod layout;
pub mod ledger;
mod peer;
mod private_pages;
pub mod producer;
mod shm;
pub mod status;
pub mod stream;
pub mod wire;

pub use consumer::{Batch, Consumer, ConsumerOptions, ConsumerStats, EpochInfo, Event, Leaf};
pub use dtype::DType;
pub use endpoint::Endpoint;
pub use error::{Error, Result};
pub use layout::{Layout, LeafKind, LeafSpec, Node};
pub use producer::{
    EpochSummary, IdlePolicy, LagBudget, LagPolicy, Producer, ProducerOptions, SlotMut,
};
pub use status::{ConsumerStatus, StatusReport};
pub use stream::StreamSpec;
pub use wire::{JoinPolicy, OnEvict, ShutdownReason};
