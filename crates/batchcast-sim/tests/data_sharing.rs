//! The data-loading CPU model on machines where CPU is the bottleneck.

mod common;

use batchcast_sim::policy::Gandiva;
use batchcast_sim::{ClusterSpec, DataSharing, JobSpec, Outcome, SimConfig, Summary};
use common::{job, run};

fn loader(id: &str, t: f64, secs: f64, dataset: &str) -> JobSpec {
    JobSpec {
        dataset: dataset.into(),
        cpu: 8.0,
        ..job(id, t, 1, secs)
    }
}

/// Two 1-GPU loaders of 100 s from 0: "a" on imagenet, "b" on `dataset_b`.
fn two_loaders(dataset_b: &str) -> [JobSpec; 2] {
    [
        loader("a", 0.0, 100.0, "imagenet"),
        loader("b", 0.0, 100.0, dataset_b),
    ]
}

/// Simulates `jobs` on `spec` under Gandiva, without leases, sharing data
/// pipelines as `d` says.
fn under_gandiva(spec: ClusterSpec, d: DataSharing, jobs: &[JobSpec]) -> Outcome {
    let cfg = SimConfig {
        lease: 1e9,
        data_sharing: d,
        ..SimConfig::default()
    };
    run(spec, &cfg, jobs, &mut Gandiva::default())
}

// One machine with 8 cores; two 1-GPU jobs each needing 8 cores of loading.
// Separate pipelines: 16 / 8 → 2x slower (200 s). One shared pipeline for
// the same dataset: 8 / 8 → full speed (100 s). Different datasets cannot
// share: 200 s again.
#[test]
fn a_shared_pipeline_unstarves_a_cpu_bound_machine() {
    let spec = ClusterSpec::new(1, 1, 4, 8.0);
    let same = two_loaders("imagenet");
    let o = under_gandiva(spec, DataSharing::Off, &same);
    assert_jcts!(o, "a" => 200.0, "b" => 200.0);
    assert!(common::close(o.jobs[0].cpu_lost, 100.0));
    let o = under_gandiva(spec, DataSharing::Share, &same);
    assert_jcts!(o, "a" => 100.0, "b" => 100.0);
    let diff = two_loaders("coco");
    let o = under_gandiva(spec, DataSharing::Share, &diff);
    assert_jcts!(o, "a" => 200.0, "b" => 200.0);
}

// Two 2-GPU machines with 8 cores. A(x) and B(y) share machine 0 (best
// fit), C(x) takes machine 1. A runs 2x slow (16 cores wanted): done at
// 200. E(x, 100 s) arrives at 500 with one GPU free on each machine.
// Without the placement preference it takes machine 0 (lowest index) next
// to B(y): 2x → JCT 200. With it, it joins C(x) on machine 1 and shares
// C's pipeline: JCT 100.
#[test]
fn dataset_aware_placement_puts_same_dataset_jobs_together() {
    let spec = ClusterSpec::new(1, 2, 2, 8.0);
    let jobs = [
        loader("A", 0.0, 100.0, "x"),
        loader("B", 0.0, 10_000.0, "y"),
        loader("C", 0.0, 10_000.0, "x"),
        loader("E", 500.0, 100.0, "x"),
    ];
    let o = under_gandiva(spec, DataSharing::Share, &jobs);
    assert_jcts!(o, "A" => 200.0, "E" => 200.0);
    let o = under_gandiva(spec, DataSharing::SharePlace, &jobs);
    assert_jcts!(o, "A" => 200.0, "E" => 100.0);
}

// The CPU cost of loading: the same two 1-GPU jobs of 8 cores each on one
// 8-core machine. Separate pipelines get 4 cores each (8 / 16 of their
// demand) for 200 s: 1,600 core-seconds. One shared pipeline of 8 cores,
// half attributed to each, for 100 s: 800. Different datasets: 1,600.
#[test]
fn a_shared_pipeline_halves_the_loading_core_seconds() {
    let spec = ClusterSpec::new(1, 1, 4, 8.0);
    let same = two_loaders("imagenet");
    let diff = two_loaders("coco");
    let cost =
        |d, jobs: &[JobSpec]| Summary::of(&under_gandiva(spec, d, jobs)).loading_core_seconds;
    assert!(common::close(cost(DataSharing::Off, &same), 1600.0));
    assert!(common::close(cost(DataSharing::Share, &same), 800.0));
    assert!(common::close(cost(DataSharing::SharePlace, &same), 800.0));
    assert!(common::close(cost(DataSharing::Share, &diff), 1600.0));
    let o = under_gandiva(spec, DataSharing::Share, &same);
    assert!(common::close(o.jobs[0].loading, 400.0));
    assert!(common::close(o.jobs[1].loading, 400.0));
}
