//! Samples in the published delay-scheduling simulator's formats (github
//! aakash-sharma/cluster-sim), written here in its exact layout: that
//! repository carries no licence, so no file of it is copied.

use batchcast_sim::trace::{parse, Format, Parsed};
use batchcast_sim::SimConfig;

/// A published-format record.
pub fn record(id: u32, when: &str, gpus: u32, iters: u32, tpi: &str) -> String {
    format!(
        r#"  {{
    "time_per_iteration": "{tpi}", 
    "random_seed": "18", 
    "job_id": "{id}", 
    "max_parallelism": "{gpus}", 
    {when}, 
    "loss_function_type": "sublinear", 
    "cross_rack_slowdown": "0.6", 
    "cross_machine_slowdown": "0.7", 
    "job_group_id": "1", 
    "total_iterations": "{iters}", 
    "cross_slot_slowdown": "0.8"
  }}"#
    )
}

/// `record` moved to job group `group` (every sample starts in group 1).
pub fn regroup(record: String, group: u32) -> String {
    record.replace(
        r#""job_group_id": "1""#,
        &format!(r#""job_group_id": "{group}""#),
    )
}

pub fn trace(records: &[String]) -> String {
    format!("[\n{}\n]\n", records.join(", \n"))
}

/// `records` as one published-format trace file, read as the published
/// code reads it.
pub fn parsed(records: &[String]) -> Parsed {
    parse("t.json", &trace(records), Format::Dally).expect("a published-format trace")
}

/// A published-format cluster file.
pub fn cluster_file(racks: u32, machines: u32, slots: u32, per_slot: u32, lease: &str) -> String {
    format!(
        r#"{{
  "lease_time": "{lease}", 
  "racks_in_cluster": "{racks}", 
  "machines_per_rack": "{machines}", 
  "epsilon": "1.0", 
  "gpus_per_slot": "{per_slot}", 
  "fairness_threshold": "0.0", 
  "slots_per_machine": "{slots}", 
  "cluster_policy": "Tiresias",
  "iteration_granularity": "500",
  "consolidate": "true",
  "astra_sim_path": "/path/to/astra-sim",
  "astra_sim_bin_path": "/path/to/AnalyticalAstra"
}}"#
    )
}

/// The published model: no congestion, no restart cost, the file's lease.
pub fn published_cfg(lease: f64) -> SimConfig {
    SimConfig {
        lease,
        restart_cost: 0.0,
        rack_congestion: 0.0,
        core_congestion: 0.0,
        ..SimConfig::default()
    }
}
