//! The batchcast dashboard: a local web view of the run store.
//!
//! `batchcast ui` serves pages over the SQLite file that `batchcast run`
//! writes: experiments, then workloads, then runs; charts of any metric of
//! any set of runs (drawn in the browser as SVG by this crate's own small
//! script, from JSON endpoints), with the runs' events (and those of their
//! workload's shared producer: triggers, new data) marked on the x axis,
//! and an experiment's workloads compared one line each; the collocation
//! table of `batchcast runs compare`; and a page per run with its output.
//!
//! Invariants:
//! - Read-only. Every request opens its own read-only connection
//!   ([`batchcast_store::Store::open_read_only`]), so runners may write the
//!   store meanwhile, and a store that disappears or is replaced by a
//!   foreign file gives an error page, never a crash.
//! - Nobody else gets in: every request needs a random token ([`Ui::token`],
//!   in the printed address, then an HttpOnly SameSite cookie), unless
//!   `--no-token` on loopback. Bound to 127.0.0.1 by default, and there
//!   requests whose `Host` (or `Origin`) is not this machine are refused
//!   (against DNS rebinding), by the rules of `batchcast_store::access`.
//! - Every input from a request is bounded before use: ids are integers,
//!   run lists and text are capped, metric names must be ones the store
//!   holds for the runs asked, point counts are capped. SQL is only the
//!   parameterised queries of `batchcast-store`.
//! - Nothing third-party is served: the script and style sheet are this
//!   crate's own files, embedded at build time.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod api;
mod assets;
mod error;
mod guard;
mod html;
mod markers;
mod pages;
mod query;
mod server;
mod state;

pub use error::UiError;
pub use server::{Ui, UiConfig, HEADER_TIMEOUT, MAX_CONNECTIONS};
