//! batchcast-sim: a trace-driven, event-driven GPU-cluster scheduling
//! simulator.
//!
//! A cluster is racks x machines x GPUs (optionally slots inside a
//! machine) with CPU cores per machine. Jobs (from a trace or the seeded
//! generator) arrive, wait, are placed by a `Policy` (FIFO, SJF, SRSF, LAS,
//! Tiresias, Gandiva-style packing, Dally) and run at an iteration time set
//! by the network model (widest span level and link congestion) and the CPU
//! model (data loading per machine, optionally shared by same-dataset jobs
//! as batchcast does); see `network`. Preemptive policies decide at lease
//! boundaries and preempted jobs pay a restart cost. `simulate_bidding`
//! runs the published cluster-sim's model instead (per-GPU auctions, leases,
//! chunks of iterations; its Dally, with delay timers, from its newest
//! commit), to compare like with like. `apply_standin`
//! replaces a trace's placeholder slowdowns with the stand-in network
//! model's (per model and level, from the published link figures).
//!
//! Invariants: no GPU is held by two jobs (asserted on every assignment);
//! time only moves forward between events, never by ticking; every job
//! finishes or `simulate` returns an error; results depend only on the
//! inputs (no clocks, hash-order or thread effects; the published Dally's
//! visiting order of a Java hash map is computed, not inherited).
//!
//! The core does no I/O: `trace` reads trace files (bounded in size),
//! `chart` renders SVG into strings.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod bidding;
mod chart;
mod cluster;
mod config;
mod engine;
mod error;
mod job;
mod network;
mod placement;
pub mod policy;
mod report;
mod sched;
mod standin;
mod state;
mod synth;
pub mod trace;
mod validate;

pub use bidding::{simulate_bidding, Bidder, BiddingRun, DallySetup};
pub use chart::{jct_cdf_svg, queue_svg, utilisation_svg};
pub use cluster::{Cluster, ClusterSpec, MAX_GPUS};
pub use config::{DataSharing, SimConfig};
pub use engine::{simulate, validate, Outcome, Sample};
pub use error::SimError;
pub use job::{JobSpec, Locality, Slowdown};
pub use network::{multipliers, Running};
pub use policy::{by_name, Policy};
pub use report::{comparison_table, jobs_csv, Summary};
pub use sched::Sched;
pub use standin::{
    allreduce_time, apply as apply_standin, model as standin_model, slowdown as standin_slowdown,
    ModelComm, StandinReport,
};
pub use state::{JobState, Status};
pub use synth::{synthetic, SynthConfig};
