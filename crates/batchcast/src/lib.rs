//! batchcast core: one producer shares its batches with many consumer
//! processes on the same machine, zero-copy.
//!
//! # Parts
//! Modules are private; this page's re-exports are the whole API.
//! - [`Producer`] owns the arena (a sealed memfd cut into `window` slots
//!   plus lazily reserved lag slots), writes each batch into a free slot
//!   once, and announces it on a shared-memory board; a Unix socket carries
//!   what happens once per consumer or per epoch. A control thread accepts
//!   consumers (bounded: pending connections, handshake frames, descriptors)
//!   and notices their deaths.
//! - [`Consumer`] attaches by name ([`Endpoint`]), maps the arena (read-only,
//!   or private and writable so that in-place writes stay its own), releases
//!   batches in its own ledger, and cuts the producer's batches into batches
//!   of its own size: one inside a producer batch is a view of it, one
//!   spanning several is copied piece by piece as they arrive, so any batch
//!   size works within the window.
//! - A batch is a tree ([`Node`]) of arrays that share the leading row
//!   dimension; [`Layout`] places them in a slot and is validated by the
//!   consumer before any byte is read through it. [`StreamSpec`] describes
//!   the stream to consumers at connection.
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
//! - A consumer learns of its producer's death from its socket closing (or
//!   the producer's pidfd). If the producer keeps a state file
//!   ([`Durability`]: its welcome says it resumes), the consumer waits up
//!   to [`ConsumerOptions::reconnect_timeout`] for a producer restarted
//!   under the name, reattaches, and skips the rows it already has: what
//!   it hands out equals an uninterrupted run's. Otherwise, or once the
//!   timeout passes, its next call fails with [`Error::ProducerGone`].
//! - A state file's resume point never lies past a row some attached
//!   consumer has not taken from the board (a lower one costs only
//!   skipped rows); a damaged file or another stream's is refused, never
//!   reset. Nothing is deserialised but closed, bounded message types.
//! - Shared memory is a region (arena, board, ledger, holder counts) with a
//!   `#[repr(C)]` header (magic, layout version, length, geometry) and
//!   `#[repr(C)]` structs of atomics; a consumer maps nothing it has not
//!   validated (sealed, kind, version, length, geometry against the
//!   welcome), and refuses it with a [`RegionOpenError`] that says what is
//!   wrong.
//! - A slot is published only once every [`DeviceMirror`] holds its
//!   bytes; mirrors have the arena's layout, so a lease covers them too.
//! - This crate knows nothing of Python or CUDA.
#![deny(missing_docs)]

mod arena;
mod board;
mod consumer;
mod dtype;
mod endpoint;
mod error;
mod holds;
mod layout;
mod ledger;
mod mirror;
mod peer;
mod private_pages;
mod producer;
mod region;
mod run_events;
mod serving;
mod status;
mod stream;
mod warn;
mod wire;

pub use consumer::{
    Batch, Consumer, ConsumerOptions, ConsumerStats, EpochInfo, Event, Keepalive, Leaf, Waiter,
    DEFAULT_RECONNECT_TIMEOUT,
};
pub use dtype::DType;
pub use endpoint::{default_dir, list_names, Endpoint};
pub use error::{Error, Result};
pub use layout::{Layout, LeafKind, LeafSpec, Node, MAX_DEPTH, MAX_NDIM};
pub use mirror::{DeviceMirror, Mirror, MirrorSpec, MAX_DEVICE_ID, MAX_IMPORT_INFO, MAX_MIRRORS};
pub use producer::{
    identity_differences, Durability, EpochSummary, IdlePolicy, LagBudget, LagPolicy, Producer,
    ProducerOptions, ResumePoint, SlotMut, DEFAULT_LAG_BYTES, MAX_IDENTITY, MAX_PAYLOAD,
    SLOT_HEADROOM,
};
pub use region::RegionOpenError;
pub use run_events::{RunEvents, CONSUMERS_ENV, EVENTS_ENV, MAX_EVENTS};
pub use serving::{AfterLoanError, ServeUntil};
pub use status::{query as query_status, ConsumerStatus, StatusReport};
pub use stream::{dtype_name, BatchShape, LeafShape, StreamSpec, MAX_METADATA};
pub use warn::Warn;
pub use wire::{
    Boundary, JoinPolicy, OnEvict, Position, ShutdownReason, TriggerFired, Welcome, MAX_TRIGGER_ID,
    PROTOCOL_VERSION,
};

/// Not part of the API: the internals that this repository's fuzz targets,
/// integration tests and benchmarks drive directly. No stability promise.
#[doc(hidden)]
pub mod internals {
    pub use crate::arena::{Arena, ArenaView};
    pub use crate::consumer::rebatch;
    pub use crate::layout::SLOT_HEADER;
    /// The control-plane protocol: messages, framing and fd passing.
    pub mod wire {
        pub use crate::wire::*;
    }
}
