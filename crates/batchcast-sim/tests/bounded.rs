//! Work bounded by the trace, not by simulated time: idle or uncontended
//! stretches cost no events, however long.

mod common;

use batchcast_sim::{validate, ClusterSpec, JobSpec, Outcome, SimConfig};

/// Simulates `jobs` on `spec` under each of `policies` (default config) and
/// checks that job `id` has JCT `jct` after fewer than `max_events` events.
#[track_caller]
fn assert_cheap(
    policies: &[&str],
    spec: ClusterSpec,
    jobs: &[JobSpec],
    (id, jct): (&str, f64),
    max_events: u64,
) {
    for name in policies {
        let o = common::run_policy(name, spec, &SimConfig::default(), jobs);
        assert!(common::close(common::jct(&o, id), jct), "{name}");
        assert!(o.events < max_events, "{name}: {} events", o.events);
    }
}

#[test]
fn one_very_long_job_costs_a_handful_of_events_under_preemptive_policies() {
    // 1e15 s with a 360 s lease was 2.8e12 lease rounds: hours of CPU.
    let spec = ClusterSpec::new(1, 1, 8, 64.0);
    let jobs = [common::job("long", 0.0, 4, 1e15)];
    let policies = ["dally", "tiresias", "srsf", "sjf", "gandiva", "fifo"];
    assert_cheap(&policies, spec, &jobs, ("long", 1e15), 10);
}

#[test]
fn an_arrival_far_in_the_future_costs_no_rounds_in_between() {
    // A Helios submit_time of 9999-12-31 is ~2.5e11 s after the others.
    let spec = ClusterSpec::new(1, 1, 8, 64.0);
    let jobs = [
        common::job("a", 0.0, 8, 1000.0),
        common::job("b", 10.0, 8, 100.0),
        common::job("late", 2.5e11, 8, 50.0),
    ];
    assert_cheap(
        &["dally", "tiresias", "srsf"],
        spec,
        &jobs,
        ("late", 50.0),
        100,
    );
}

#[test]
fn lease_rounds_still_preempt_at_multiples_of_the_lease() {
    // SRSF, lease 100 s, one 8-GPU machine: "a" (8 GPUs, 1000 s) runs from
    // 0; "b" (8 GPUs, 100 s) arrives at 150 and has less remaining service,
    // so "a" is preempted at the boundary 200 (restart cost 0): b runs
    // 200-300, a resumes at 300 with 800 s left and ends at 1100.
    let spec = ClusterSpec::new(1, 1, 8, 64.0);
    let cfg = SimConfig {
        lease: 100.0,
        restart_cost: 0.0,
        ..SimConfig::default()
    };
    let jobs = [
        common::job("a", 0.0, 8, 1000.0),
        common::job("b", 150.0, 8, 100.0),
    ];
    let o = common::run_policy("srsf", spec, &cfg, &jobs);
    assert_jcts!(o, "a" => 1100.0, "b" => 150.0);
}

#[test]
fn a_job_wider_than_the_cluster_is_told_the_range_it_may_take() {
    let spec = ClusterSpec::new(1, 1, 8, 64.0);
    let e = validate(&spec, &[common::job("wide", 0.0, 9, 10.0)]).unwrap_err();
    let msg = e.to_string();
    common::assert_says(&msg, "needs 9 GPUs; the cluster has 8 (give it 1 to 8)");
}

/// One 8-GPU machine: "a" (6 GPUs, 100 s) from 0, then at 1, in this
/// order, "w" (4 GPUs, 10 s), "n2" (1 GPU, 60 s) and "n" (2 GPUs, 50 s),
/// simulated under `policy`.
fn backfill_under(policy: &str) -> Outcome {
    let spec = ClusterSpec::new(1, 1, 8, 64.0);
    let jobs = [
        common::job("a", 0.0, 6, 100.0),
        common::job("w", 1.0, 4, 10.0),
        common::job("n2", 1.0, 1, 60.0),
        common::job("n", 1.0, 2, 50.0),
    ];
    common::run_policy(policy, spec, &SimConfig::default(), &jobs)
}

#[test]
fn sjf_backfills_past_wider_shorter_jobs_in_duration_order() {
    // 8 GPUs. "a" (6 GPUs, 100 s) runs from 0. At 1: "w" (4 GPUs, 10 s,
    // the shortest) cannot fit; "n" (2 GPUs, 50 s) backfills at 1; "n2"
    // (1 GPU, 60 s) waits for n, runs 51-111; w runs when a ends, 100-110.
    let o = backfill_under("sjf");
    assert_jcts!(o, "a" => 100.0, "n" => 50.0, "n2" => 110.0, "w" => 109.0);
}

#[test]
fn gandiva_backfills_in_arrival_order_past_jobs_that_cannot_fit() {
    // 8 GPUs. "a" (6 GPUs, 100 s) runs from 0. At 1, in this order: "w"
    // (4 GPUs) cannot fit; "n2" (1 GPU, 60 s) backfills at 1; "n" (2 GPUs,
    // 50 s) waits for n2, runs 61-111; w runs when a ends, 100-110.
    let o = backfill_under("gandiva");
    assert_jcts!(o, "a" => 100.0, "n2" => 60.0, "n" => 110.0, "w" => 109.0);
}
