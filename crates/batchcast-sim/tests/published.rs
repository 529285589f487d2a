//! The published delay-scheduling simulator's files (github
//! aakash-sharma/cluster-sim, `configuration/jobs` and
//! `configuration/cluster`) read as its Java code reads them, and the run
//! times its `IntraJobScheduler` gives, on hand-worked traces.
//!
//! That repository carries no licence, so no file of it is copied here: the
//! samples below are written by the test in its exact format (every value a
//! JSON string, `"key": "value", ` layout, the fields its traces carry).

mod common;

use batchcast_sim::trace::{parse, parse_cluster, Format};
use batchcast_sim::SimError;
use common::published::{cluster_file, parsed, published_cfg, record, regroup, trace};

#[test]
fn slowdowns_are_throughput_fractions_and_time_per_iteration_is_one_gpus() {
    // IntraJobScheduler: n GPUs do n iterations per time_per_iteration / s,
    // so 1000 iterations x 1 s on 4 GPUs take 1000 / (4 s) seconds.
    let jobs = parsed(&[record(1, r#""start_time": "0""#, 4, 1000, "1")]);
    let j = &jobs.jobs[0];
    assert!(common::close(j.slowdown.cross_slot, 1.0 / 0.8));
    assert!(common::close(j.slowdown.cross_machine, 1.0 / 0.7));
    assert!(common::close(j.slowdown.cross_rack, 1.0 / 0.6));
    for ((racks, machines, slots, per_slot), want) in [
        ((1, 1, 1, 4), 250.0),
        ((1, 1, 2, 2), 312.5),
        ((1, 2, 1, 2), 1000.0 / (4.0 * 0.7)),
        ((2, 1, 1, 2), 1000.0 / (4.0 * 0.6)),
    ] {
        let c = parse_cluster(
            "c.json",
            &cluster_file(racks, machines, slots, per_slot, "20.0"),
            64.0,
        )
        .unwrap();
        assert!(c.published);
        let o = common::run_policy("fifo", c.spec, &published_cfg(20.0), &jobs.jobs);
        let got = common::jct(&o, "1");
        assert!(
            common::close(got, want),
            "{racks}x{machines}x{slots}x{per_slot}: {got} s, expected {want} s"
        );
    }
}

#[test]
fn arrival_time_before_start_time_and_zero_iteration_records_skipped() {
    // One 4-GPU slot. Job 1: 400 iterations x 1 s / 4 GPUs = 100 s from 0.
    // Job 2 arrives at 10 (its start_time 0 is not its arrival), 200 x 2 s
    // / 4 = 100 s, waits for job 1: runs 100-200, JCT 190. Job 3 has no
    // iterations and is skipped, counted.
    let jobs = parsed(&[
        record(1, r#""start_time": "0""#, 4, 400, "1"),
        record(3, r#""start_time": "5""#, 2, 0, "1"),
        record(2, r#""arrival_time": "10", "start_time": "0""#, 4, 200, "2"),
    ]);
    assert_eq!((jobs.jobs.len(), jobs.skipped), (2, 1));
    let c = parse_cluster("c.json", &cluster_file(1, 1, 1, 4, "20.0"), 64.0).unwrap();
    assert_eq!(c.lease, Some(20.0));
    for name in ["fifo", "sjf", "tiresias", "gandiva", "dally"] {
        let o = common::run_policy(name, c.spec, &published_cfg(20.0), &jobs.jobs);
        assert_jcts!(o, "1" => 100.0, "2" => 190.0);
    }
}

#[test]
fn a_file_in_the_wrong_dialect_names_the_right_one() {
    let published = trace(&[record(1, r#""start_time": "0""#, 4, 10, "1")]);
    let e = parse("p.json", &published, Format::Batchcast).unwrap_err();
    let msg = e.to_string();
    common::assert_says(&msg, "field `cross_slot_slowdown`");
    common::assert_says(&msg, "--format dally");
    let own = r#"[{"job_id": 1, "arrival_time": 0, "total_iterations": 5, "time_per_iteration": 1,
        "max_parallelism": 2, "cross_machine_slowdown": 1.5}]"#;
    let msg = parse("own.json", own, Format::Dally)
        .unwrap_err()
        .to_string();
    common::assert_says(&msg, "own.json: record 1: field `cross_machine_slowdown`");
    common::assert_says(&msg, "--format batchcast");
    let zero = r#"[{"job_id": 1, "arrival_time": 0, "total_iterations": 5, "time_per_iteration": 1,
        "max_parallelism": 2, "cross_slot_slowdown": "0"}]"#;
    assert!(matches!(
        parse("z.json", zero, Format::Dally),
        Err(SimError::Parse { ref field, .. }) if field == "cross_slot_slowdown"
    ));
}

#[test]
fn published_cluster_files_are_read_and_bad_ones_refused_naming_the_field() {
    // synthetic_dally_small_consolidate.json's shape: 2 racks x 2 machines x
    // 2 slots x 2 GPUs, lease 20 s.
    let c = parse_cluster("c.json", &cluster_file(2, 2, 2, 2, "20.0"), 32.0).unwrap();
    assert_eq!(
        (
            c.spec.racks,
            c.spec.machines_per_rack,
            c.spec.gpus_per_machine,
            c.spec.slot_size(),
            c.spec.cpu_cores
        ),
        (2, 2, 4, 2, 32.0)
    );
    assert_eq!(
        (
            c.lease,
            c.policy.as_deref(),
            c.iteration_granularity,
            c.consolidate
        ),
        (Some(20.0), Some("Tiresias"), Some(500), Some(true))
    );
    // The smallest files carry only the shape, the lease and the policy.
    let min = r#"{"lease_time" : "5", "racks_in_cluster" : "1", "machines_per_rack" : "1",
        "slots_per_machine" : "1", "gpus_per_slot" : "4", "cluster_policy" : "Themis",
        "fairness_threshold" : "0.0", "epsilon" : "1", "should_use_config" : "False"}"#;
    let c = parse_cluster("min.json", min, 64.0).unwrap();
    assert_eq!((c.spec.total_gpus(), c.lease), (4, Some(5.0)));
    // batchcast's own cluster files keep working.
    let own = r#"{"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 4, "gpus_per_slot": 2, "cpu_cores": 16}"#;
    let c = parse_cluster("own.json", own, 64.0).unwrap();
    assert_eq!(
        (c.published, c.spec.cpu_cores, c.lease),
        (false, 16.0, None)
    );

    for (text, needle) in [
        (
            min.replace(r#""slots_per_machine" : "1","#, ""),
            "field `slots_per_machine` is missing",
        ),
        (
            min.replace(r#""gpus_per_slot" : "4""#, r#""gpus_per_slot" : "four""#),
            "field `gpus_per_slot`: \"four\" is not a whole number",
        ),
        (
            min.replace(r#""lease_time" : "5""#, r#""lease_time" : "-1""#),
            "field `lease_time`",
        ),
        (
            min.replace(r#""epsilon""#, r#""epsilom""#),
            "unknown field `epsilom`",
        ),
    ] {
        let msg = parse_cluster("bad.json", &text, 64.0)
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("bad.json: ") && msg.contains(needle),
            "{msg}"
        );
    }
}

#[test]
fn las_ranks_by_service_received_as_the_published_srsf_does() {
    // One 8-GPU machine, lease 100 s, no restart cost. "a" (8 GPUs, 1000 s)
    // from 0; "b" (8 GPUs, 300 s) at 150. At 200 b has received nothing,
    // a 1600 GPU-s: a is preempted. At 400 both have 1600: the earlier
    // arrival, a, runs 400-500; then b (1600 < 2400) runs 500-600 and
    // ends; a resumes with 700 s left and ends at 1300.
    let spec = batchcast_sim::ClusterSpec::new(1, 1, 8, 64.0);
    let cfg = published_cfg(100.0);
    let jobs = [
        common::job("a", 0.0, 8, 1000.0),
        common::job("b", 150.0, 8, 300.0),
    ];
    let o = common::run_policy("las", spec, &cfg, &jobs);
    assert_jcts!(o, "a" => 1300.0, "b" => 450.0);
    // batchcast's srsf ranks by service remaining: b (300) beats a (800 at
    // 200) and runs to its end, 200-500.
    let o = common::run_policy("srsf", spec, &cfg, &jobs);
    assert_jcts!(o, "a" => 1300.0, "b" => 350.0);
}

/// A published-format one-GPU record of job group `group`.
fn grouped(id: u32, group: u32, start: u32, iters: u32) -> String {
    regroup(
        record(id, &format!(r#""start_time": "{start}""#), 1, iters, "1"),
        group,
    )
}

#[test]
fn job_groups_arriving_together_are_cut_in_halving_steps() {
    // JobGroupEvaluationEvent: group 1's five jobs at t = 0, sorted by
    // iterations: 2 (100), 3 (600), 1 (800), 4 (900), 5 (1000). n = 5:
    // floor(log2 5) = 2 steps of 1000 / 2 = 500. The first 5/2 = 2 jobs to
    // <= 500 (job 3: 600 -> 500), the next (5-2)/2 = 1 to <= 1000 (job 1
    // keeps 800), the next (5-3)/2 = 1 to <= 1500 (job 4 keeps 900); job
    // 5, the last, keeps 1000. Job 6 of group 1 arrives later and keeps
    // its 1000; job 7 is alone in group 2.
    let text = trace(&[
        grouped(1, 1, 0, 800),
        grouped(2, 1, 0, 100),
        grouped(3, 1, 0, 600),
        grouped(4, 1, 0, 900),
        grouped(5, 1, 0, 1000),
        grouped(6, 1, 50, 1000),
        grouped(7, 2, 0, 700),
    ]);
    let t = parse("t.json", &text, Format::Dally).unwrap();
    let iters: Vec<f64> = t.jobs.iter().map(|j| j.iterations).collect();
    assert_eq!(iters, [800.0, 100.0, 500.0, 900.0, 1000.0, 1000.0, 700.0]);
    assert_eq!(t.halved, 1);
    // On one GPU each (1 s per iteration) job 3 ends at 500, not 600; job
    // 6 runs its 1000 from 50.
    let spec = batchcast_sim::ClusterSpec::new(1, 1, 8, 64.0);
    let o = common::run_policy("fifo", spec, &published_cfg(20.0), &t.jobs);
    assert_jcts!(o, "3" => 500.0, "6" => 1000.0);
    // batchcast's own format has no such rule.
    let own = text
        .replace("\"0.6\"", "\"1.6\"")
        .replace("\"0.7\"", "\"1.4\"")
        .replace("\"0.8\"", "\"1.2\"");
    let t = parse("own.json", &own, Format::Batchcast).unwrap();
    assert_eq!((t.jobs[2].iterations, t.halved), (600.0, 0));
}

#[test]
fn iterations_run_in_whole_chunks_of_the_iteration_granularity() {
    // IntraJobScheduler runs iteration_granularity iterations per chunk and
    // takes it off the remaining count, stopping at zero: 400 iterations at
    // granularity 500 run 500, 1000 run 1000. On 4 GPUs in one slot, 1 s
    // per iteration: 125 s and 250 s.
    let c = parse_cluster("c.json", &cluster_file(1, 1, 1, 4, "20.0"), 64.0).unwrap();
    let mut t = parsed(&[
        record(1, r#""start_time": "0""#, 4, 400, "1"),
        regroup(record(2, r#""start_time": "0""#, 4, 1000, "1"), 2),
    ]);
    assert_eq!(c.whole_chunks(&mut t.jobs), 1);
    assert_eq!(
        (t.jobs[0].iterations, t.jobs[1].iterations),
        (500.0, 1000.0)
    );
    let o = common::run_policy("fifo", c.spec, &published_cfg(20.0), &t.jobs);
    assert_jcts!(o, "1" => 125.0, "2" => 375.0);
    // A cluster in batchcast's own terms has no granularity.
    let own = batchcast_sim::trace::ClusterFile::from(c.spec);
    assert_eq!(own.whole_chunks(&mut t.jobs), 0);
}

#[test]
fn should_use_config_is_reported_as_java_reads_it() {
    // Boolean.parseBoolean: "true" in any case; absent or "False" means the
    // published simulator builds its own heterogeneous cluster.
    let base = cluster_file(1, 1, 1, 4, "5");
    assert!(!parse_cluster("c.json", &base, 64.0).unwrap().shape_used);
    for (v, used) in [("True", true), ("true", true), ("False", false)] {
        let text = base.replace(
            r#""consolidate": "true","#,
            &format!(r#""consolidate": "true", "should_use_config": "{v}","#),
        );
        assert_eq!(
            parse_cluster("c.json", &text, 64.0).unwrap().shape_used,
            used,
            "{v}"
        );
    }
}
