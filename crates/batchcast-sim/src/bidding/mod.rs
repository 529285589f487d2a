//! The published simulator's model (github aakash-sharma/cluster-sim at
//! 2953d56), for comparing like with like: GPUs are auctioned one at a
//! time, so a job runs on 1 to `gpus` GPUs and grows or shrinks between
//! chunks; it runs in chunks of `granularity` iterations at
//! `time_per_iteration / (n s)` each, `n` GPUs spanning a level of
//! throughput fraction `s`; a GPU is leased for `lease` seconds and a chunk
//! starts only on GPUs whose lease outlasts one iteration, but once started
//! runs to its end. Whenever GPUs come free every free GPU, in cluster
//! order (rack, machine, slot, GPU), goes to the best bid among the jobs
//! with fewer GPUs than they ask for (see `bids`). Events at one instant run
//! in the published order: arrivals, chunk ends, chunk starts, then
//! auctions, each kind first come first served. Released GPUs are auctioned
//! `restart_cost` seconds per GPU later.
//!
//! Dally is not in the code at 2953d56: it runs with the chunk rules of
//! 4cd660e, the newest commit, where it is (see `dally`).
//!
//! It is as slow as the published code: one event per chunk. batchcast's
//! own model (`simulate`) gang-schedules and moves progress continuously.

mod bids;
mod dally;
mod events;
mod hashed;
mod layout;
mod record;
mod sim;

pub use bids::Bidder;
pub use dally::DallySetup;
use events::Kind;
use layout::Layout;
use record::arrival_order;
use sim::Sim;

use crate::cluster::ClusterSpec;
use crate::config::SimConfig;
use crate::engine::Outcome;
use crate::error::SimError;
use crate::job::JobSpec;

/// Most chunks one run may take (it costs a few events each).
const MAX_CHUNKS: f64 = 1e8;

/// How a run of the published model is set up beyond the cluster shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BiddingRun {
    /// The trace's first arrival ([`Parsed::origin`](crate::trace::Parsed)):
    /// the clock runs on the trace's own times, as the published code's
    /// does, so that its rounding and its ties are the same; times are
    /// reported from the first arrival, as `simulate` reports them.
    pub origin: f64,
    /// Iterations per chunk (the cluster file's `iteration_granularity`).
    pub granularity: u64,
    /// The cluster file's `should_use_config` is not "true": the published
    /// code (2953d56) then ignores the shape and builds, per rack, 6
    /// machines of 2 slots x 2 GPUs, 3 of 2 GPUs and 2 of 1 GPU.
    pub published_default_cluster: bool,
    /// Dally's settings (used by [`Bidder::Dally`] only).
    pub dally: DallySetup,
}

/// Runs `jobs` on `spec` under the published simulator's model with
/// `bidder`'s bids, `cfg.lease` and `cfg.restart_cost` seconds per released
/// GPU (congestion, CPU and data sharing are not part of that model and are
/// ignored).
pub fn simulate_bidding(
    spec: &ClusterSpec,
    cfg: &SimConfig,
    jobs: &[JobSpec],
    run: &BiddingRun,
    bidder: Bidder,
) -> Result<Outcome, SimError> {
    check(spec, cfg, jobs, run)?;
    // Dally's commit builds the shape given whatever the file says.
    let layout = if run.published_default_cluster && bidder != Bidder::Dally {
        Layout::published_default(spec.racks)
    } else {
        Layout::of(spec)
    };
    if bidder == Bidder::Dally {
        let (rack, network) = (run.dally.rack_wait, run.dally.network_wait);
        let tuned = rack == -1.0 && network == -1.0;
        if !(tuned || rack.is_finite() && network.is_finite()) {
            return Err(SimError::Config(
                "Dally's waits must be numbers of leases (both -1: tuned)".into(),
            ));
        }
        return dally::simulate(&layout, spec, cfg, run, jobs);
    }
    let mut sim = Sim::new(layout, cfg, run, bidder, jobs);
    for j in arrival_order(jobs) {
        sim.push(jobs[j].arrival + run.origin, Kind::Arrive, j);
    }
    while let Some((t, kind, j)) = sim.ev.pop() {
        sim.now = t;
        match kind {
            Kind::Arrive => sim.arrive(j),
            Kind::End => sim.end(j),
            Kind::Start => sim.start(j),
            Kind::Auction => sim.auction(),
        }
        sim.sample();
    }
    if let Some(j) = sim.out.iter().find(|j| j.finish.is_none()) {
        return Err(SimError::Config(format!(
            "job {:?} never ran: no GPU was ever free for it",
            j.spec.id
        )));
    }
    Ok(Outcome {
        policy: bidder.name().to_string(),
        jobs: sim.out,
        timeline: sim.timeline,
        total_gpus: sim.gpus.len() as u64,
        events: sim.ev.taken,
    })
}

/// Refuses a run the published model cannot take: a bad origin, shape,
/// lease or granularity, more than [`MAX_CHUNKS`] chunks, or a job without
/// an arrival, iterations, a time per iteration or GPUs.
fn check(
    spec: &ClusterSpec,
    cfg: &SimConfig,
    jobs: &[JobSpec],
    run: &BiddingRun,
) -> Result<(), SimError> {
    let (origin, granularity) = (run.origin, run.granularity);
    if !(origin.is_finite() && origin >= 0.0) {
        return Err(SimError::Config(format!(
            "origin {origin}: the trace's first arrival must be a time >= 0"
        )));
    }
    spec.validate()?;
    if !(cfg.lease.is_finite() && cfg.lease > 0.0 && cfg.restart_cost >= 0.0) {
        return Err(SimError::Config(
            "lease must be > 0 and restart cost >= 0 seconds".into(),
        ));
    }
    if granularity == 0 || granularity > i64::MAX as u64 {
        return Err(SimError::Config(
            "iteration granularity must be a whole number >= 1".into(),
        ));
    }
    let chunks: f64 = jobs
        .iter()
        .map(|j| (j.iterations / granularity as f64).ceil())
        .sum();
    if chunks > MAX_CHUNKS {
        return Err(SimError::Config(format!(
            "the published model runs one event per chunk and this trace has {chunks:.3e} \
             chunks of {granularity} iterations; raise iteration_granularity to at most \
             {MAX_CHUNKS:.0e} chunks in all"
        )));
    }
    for j in jobs {
        let ok = j.arrival.is_finite()
            && j.arrival >= 0.0
            && j.iterations >= 1.0
            && j.iterations < 9e18
            && j.iter_time > 0.0
            && j.gpus >= 1;
        if !ok {
            return Err(SimError::Config(format!(
                "job {:?}: needs an arrival >= 0, iterations >= 1, a time per iteration > 0 \
                 and GPUs >= 1",
                j.id
            )));
        }
    }
    Ok(())
}
