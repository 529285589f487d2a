//! batchcast-serve: the serve loop as a library. A [`BatchSource`] (an
//! image dataset through the native pipeline, or synthetic samples) is
//! published through a core [`batchcast::Producer`] for a number of epochs,
//! or for as long as any consumer reads.
//!
//! - [`serve`] is the loop: per epoch, each batch of the source is loaned a
//!   slot, filled in place and published; it ends as [`batchcast::ServeUntil`]
//!   (the core's rule, which Python's `Producer.run` follows too) says.
//! - [`SourceArgs`] describes a source as command-line flags and opens it
//!   ([`Images`], [`Synthetic`]).
//! - At each epoch boundary a growing source ([`BatchSource::grow`],
//!   `--watch`, `--replay`) takes in what arrived, and a [`Trigger`] (`--trigger`)
//!   decides whether to tell every consumer (a `Boundary` message, in
//!   order with the batches).
//! - [`ServeArgs`] and [`run`] are the whole `batchcast serve` command: the
//!   flags, the wait for the first consumers, the lines it prints and the
//!   loop. The `batchcast` binary and the Python binding
//!   (`batchcast._native.serve`, `python -m batchcast.serve`) are faces
//!   over it: they parse the same flags and pass a [`Face`] (interrupts,
//!   where event lines go, progress).
//! - [`StartWait`] is the wait for the first consumers: the producer's own
//!   count and the trainers `batchcast run` announces in [`CONSUMERS_ENV`].
//!   Python's `Producer` waits with it too; too few in time is
//!   [`TooFewConsumers`], whose message both faces print.
//! - Under `batchcast run`, the events that matter to a sweep (resumed,
//!   grew, trigger) are also appended, bounded, to the file the runner
//!   names in [`EVENTS_ENV`], which it records in its run store.
//!
//! # Invariants
//! - Every sample of an epoch (with `--select`, of the epoch's selection,
//!   the same for every consumer) is published once, in the source's order;
//!   a batch whose samples were all skipped (undecodable files) is not
//!   published. What a source takes in at a boundary is served from the
//!   next epoch on, never in the epoch in progress.
//! - A producer restarted under the same name, with the same dataset,
//!   seed and options ([`identity`]), resumes the stream at the state
//!   file's resume point: the epoch, and in it the row every consumer has
//!   received ([`skip_rows`]); another identity is refused. A growing
//!   source and its trigger are first brought to that epoch
//!   ([`fast_forward`]): the identity of a growing dataset leaves out its
//!   size, which growing changes.
//! - The consumers are told why the stream ended: finished, interrupted,
//!   or the error that ended it ([`shutdown_reason`]).
//! - The arrows run one way: this crate depends on the core and the
//!   pipeline, never on a face.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod args;
mod command;
mod error;
mod images;
mod replay;
mod resume;
mod serve;
mod source;
mod start;
mod synthetic;
mod trigger;

pub use args::{default_workers, SourceArgs, SyntheticArgs};
pub use batchcast::{EVENTS_ENV, MAX_EVENTS};
pub use command::{run, Face, ServeArgs};
pub use error::{Result, ServeError};
pub use images::{ImageArgs, Images};
pub use replay::ReplayArgs;
pub use resume::{identity, skip_rows};
pub use serve::{fast_forward, serve, shutdown_reason, BoundaryReport, ServeSummary};
pub use source::{check_batch_size, Arrived, BatchSource};
pub use start::{trainers_from_env, ConsumersEnvError, StartWait, TooFewConsumers, CONSUMERS_ENV};
pub use synthetic::{calibrate, expected_byte, Synthetic};
pub use trigger::{Trigger, TriggerSpec, TRIGGER_FORMS};
