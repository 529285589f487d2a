//! The data-loading CPU model on machines where CPU is the bottleneck.

mod common;

use batchcast_sim::policy::Gandiva;
use batchcast_sim::{ClusterSpec, DataSharing, JobSpec, Outcome, SimConfig};
use common::{job, run};

fn loader(id: &str, t: f64, secs: f64, dataset: &str) -> JobSpec {
    JobSpec {
        dataset: dataset.into(),
        cpu: 8.0,
        ..job(id, t, 1, secs)
    }
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
    let same = [
        loader("a", 0.0, 100.0, "imagenet"),
        loader("b", 0.0, 100.0, "imagenet"),
    ];
    let o = under_gandiva(spec, DataSharing::Off, &same);
    assert_jcts!(o, "a" => 200.0, "b" => 200.0);
    assert!(common::close(o.jobs[0].cpu_lost, 100.0));
    let o = under_gandiva(spec, DataSharing::Share, &same);
    assert_jcts!(o, "a" => 100.0, "b" => 100.0);
    let diff = [
        loader("a", 0.0, 100.0, "imagenet"),
        loader("b", 0.0, 100.0, "coco"),
    ];
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
