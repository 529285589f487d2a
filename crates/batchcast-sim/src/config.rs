//! Simulation options shared by every policy.

use serde::Serialize;

/// How data loading is modelled and whether placement uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DataSharing {
    /// Every job runs its own pipeline (CPU demands add up per machine).
    Off,
    /// Jobs of one dataset on one machine share one pipeline (its demand is
    /// the largest of theirs), but placement ignores datasets.
    Share,
    /// Sharing, and placement prefers machines already serving the dataset.
    SharePlace,
}

/// The network and CPU model's parameters and the scheduler's rounds.
#[derive(Clone, Debug, Serialize)]
pub struct SimConfig {
    /// Lease length, seconds: preemptive policies revisit decisions only at
    /// multiples of it.
    pub lease: f64,
    /// Seconds a preempted job loses when it restarts (checkpoint + restore),
    /// during which it holds its GPUs without progress.
    pub restart_cost: f64,
    /// Extra iteration-time fraction per other job sharing a rack's
    /// cross-machine links (`1 + beta * (k - 1)` for `k` such jobs).
    pub rack_congestion: f64,
    /// Same, for the links between racks (all cross-rack jobs share them).
    pub core_congestion: f64,
    /// The data-loading model.
    pub data_sharing: DataSharing,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            lease: 360.0,
            restart_cost: 30.0,
            rack_congestion: 0.02,
            core_congestion: 0.01,
            data_sharing: DataSharing::Off,
        }
    }
}
