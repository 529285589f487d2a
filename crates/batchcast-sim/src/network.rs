//! The iteration-time model: network span and congestion, and CPU-starved
//! data loading.
//!
//! A running job's iteration takes `iter_time * net * cpu`:
//! - `net = slowdown(level) * congestion`, where `level` is the widest level
//!   its GPUs span (1 inside one slot), and congestion is
//!   `1 + rack_congestion * (k - 1)` for a job spanning machines of a rack
//!   shared by `k` such jobs, `1 + core_congestion * (k - 1)` for a job
//!   spanning racks when `k` jobs span racks, and 1 otherwise.
//! - `cpu = max over the job's machines of max(1, demand / cores)`. A job
//!   puts `cpu * gpus_on_machine / gpus` cores of demand on each machine;
//!   with data sharing, jobs of one dataset on one machine count once (the
//!   largest of their demands: one pipeline feeds them all).
//! - The cores a job's loading uses: its demand on each machine (with
//!   sharing, its part of the pipeline's demand in proportion to its own),
//!   times `min(1, cores / demand)` of that machine, summed over machines.

use std::collections::BTreeMap;

use crate::cluster::ClusterSpec;
use crate::config::{DataSharing, SimConfig};
use crate::job::{JobSpec, Locality};

/// What the model needs of one running job.
pub struct Running<'a> {
    /// The job.
    pub spec: &'a JobSpec,
    /// Interned dataset id.
    pub dataset: u32,
    /// Its level.
    pub level: Locality,
    /// (machine, GPUs there).
    pub machines: &'a [(usize, u32)],
}

/// Network and CPU multipliers for each of `jobs`, in order.
pub fn multipliers(spec: &ClusterSpec, cfg: &SimConfig, jobs: &[Running<'_>]) -> Vec<(f64, f64)> {
    rates(spec, cfg, jobs)
        .into_iter()
        .map(|(net, cpu, _)| (net, cpu))
        .collect()
}

/// Network and CPU multipliers and data-loading cores for each of `jobs`,
/// in order.
pub fn rates(spec: &ClusterSpec, cfg: &SimConfig, jobs: &[Running<'_>]) -> Vec<(f64, f64, f64)> {
    let mut rack_k = vec![0u32; spec.racks as usize];
    let mut core_k = 0u32;
    for j in jobs {
        match j.level {
            Locality::Rack => rack_k[spec.rack_of(j.machines[0].0)] += 1,
            Locality::Cluster => core_k += 1,
            _ => {}
        }
    }
    // CPU demand per machine, by dataset when shared: (largest, sum) of the
    // sharers' demands.
    let mut demand = vec![0.0f64; spec.machines()];
    let mut shared: BTreeMap<(usize, u32), (f64, f64)> = BTreeMap::new();
    let own = |j: &Running<'_>, n: u32| j.spec.cpu * n as f64 / j.spec.gpus as f64;
    for j in jobs {
        for &(m, n) in j.machines {
            let d = own(j, n);
            match cfg.data_sharing {
                DataSharing::Off => demand[m] += d,
                _ => {
                    let e = shared.entry((m, j.dataset)).or_insert((0.0, 0.0));
                    e.0 = e.0.max(d);
                    e.1 += d;
                }
            }
        }
    }
    for (&(m, _), &(d, _)) in &shared {
        demand[m] += d;
    }
    jobs.iter()
        .map(|j| {
            let cong = match j.level {
                Locality::Rack => {
                    let k = rack_k[spec.rack_of(j.machines[0].0)];
                    1.0 + cfg.rack_congestion * (k.saturating_sub(1)) as f64
                }
                Locality::Cluster => 1.0 + cfg.core_congestion * (core_k.saturating_sub(1)) as f64,
                _ => 1.0,
            };
            let net = j.spec.slowdown.at(j.level).max(1.0) * cong;
            let cpu = j
                .machines
                .iter()
                .map(|&(m, _)| (demand[m] / spec.cpu_cores).max(1.0))
                .fold(1.0, f64::max);
            let cores = j
                .machines
                .iter()
                .map(|&(m, n)| {
                    let d = own(j, n);
                    let part = match shared.get(&(m, j.dataset)) {
                        Some(&(largest, sum)) if sum > 0.0 => largest * d / sum,
                        _ => d,
                    };
                    part * (spec.cpu_cores / demand[m]).min(1.0)
                })
                .sum();
            (net, cpu, cores)
        })
        .collect()
}
