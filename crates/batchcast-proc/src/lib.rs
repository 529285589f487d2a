//! Processes, as batchcast runs and measures them.
//!
//! This part holds the one process supervisor and the one `/proc` sampler
//! of the project, used by the run
//! listeners, the CLI's `demo` and `bench`, and (through the Python
//! binding) the stalls modes and the collocated benchmark:
//! - [`Process`] starts a command in a process group of its own, watches
//!   it, stops it as a group (grace, then SIGKILL: [`stop_all`]), captures
//!   its output with a bounded tail and reports its exit and [`Usage`];
//! - [`ProcessTree`] samples one process tree (CPU, RSS, PSS, threads,
//!   I/O) from a [`snapshot`] of every process's `/proc/PID/stat`;
//! - [`usage`] and [`cpu_secs`] read what the kernel accounts
//!   (`getrusage`); [`tree_cpu_seconds`] is this process's whole tree;
//! - [`procfs`] is the bounded reading of `/proc` files under them all.
//!
//! Invariants:
//! - A supervised process leads its own process group; stopping it signals
//!   the group, so its workers go with it; a dropped [`Process`] is killed
//!   and reaped.
//! - Captured output costs at most [`Options::tail_bytes`] kept, however
//!   much the process writes.
//! - Every `/proc` file is read into a bounded buffer; a process that ends
//!   mid-read is skipped, never an error.
//! - A tree's CPU total never goes back: members that ended keep the time
//!   last seen.
//! - No dependency beyond libc and rustix: the Python extension links it.

#![deny(missing_docs)]

pub mod procfs;
mod supervise;
mod tree;
mod usage;

pub use rustix::process::Signal;
pub use supervise::{stop_all, Options, Output, Process, Sink, OUTPUT_AFTER_EXIT};
pub use tree::{descendants, snapshot, ticks_per_second, ProcessTree, Rates, TreeSample};
pub use usage::{cpu_secs, machine_busy_seconds, tree_cpu_seconds, usage, Usage, Who};
