//! Processes, as batchcast runs and measures them.
//!
//! This part holds the one `/proc` sampler of the project, used by the run
//! listeners, the CLI's `demo` and `bench`, and (through the Python
//! binding) the stalls modes and the collocated benchmark:
//! - [`ProcessTree`] samples one process tree (CPU, RSS, PSS, threads,
//!   I/O) from a [`snapshot`] of every process's `/proc/PID/stat`;
//! - [`usage`] and [`cpu_secs`] read what the kernel accounts
//!   (`getrusage`); [`tree_cpu_seconds`] is this process's whole tree;
//! - [`procfs`] is the bounded reading of `/proc` files under them all.
//!
//! Invariants:
//! - Every `/proc` file is read into a bounded buffer; a process that ends
//!   mid-read is skipped, never an error.
//! - A tree's CPU total never goes back: members that ended keep the time
//!   last seen.
//! - No dependency beyond libc and rustix: the Python extension links it.

#![deny(missing_docs)]

pub mod procfs;
mod tree;
mod usage;

pub use tree::{descendants, snapshot, ticks_per_second, ProcessTree, Rates, TreeSample};
pub use usage::{cpu_secs, machine_busy_seconds, tree_cpu_seconds, usage, Usage, Who};
