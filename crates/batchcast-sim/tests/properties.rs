//! Properties over random traces and clusters, for every policy.

mod common;

use batchcast_sim::{
    by_name, simulate, synthetic, ClusterSpec, DataSharing, JobSpec, SimConfig, Slowdown, Summary,
    SynthConfig,
};
use proptest::prelude::*;

fn arb_job(n: usize) -> impl Strategy<Value = JobSpec> {
    (
        0.0..500.0f64,
        1u32..=8,
        1.0..300.0f64,
        1.0..2.0f64,
        1.0..3.0f64,
        0u8..3,
        0.0..6.0f64,
    )
        .prop_map(move |(t, gpus, secs, m, r, ds, cpu)| JobSpec {
            id: format!("j{n}"),
            arrival: t.floor(),
            gpus,
            iterations: secs.ceil(),
            iter_time: 1.0,
            slowdown: Slowdown {
                cross_slot: 1.0,
                cross_machine: m,
                cross_rack: m.max(r),
            },
            model: "m".into(),
            dataset: format!("d{ds}"),
            cpu,
        })
}

fn arb_trace() -> impl Strategy<Value = Vec<JobSpec>> {
    prop::collection::vec(arb_job(0), 1..25).prop_map(|mut v| {
        for (k, j) in v.iter_mut().enumerate() {
            j.id = format!("j{k}");
        }
        v
    })
}

fn arb_sharing() -> impl Strategy<Value = DataSharing> {
    prop_oneof![
        Just(DataSharing::Off),
        Just(DataSharing::Share),
        Just(DataSharing::SharePlace)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    // Every job finishes, never before its ideal duration; occupancy never
    // exceeds the cluster (each assignment also asserts the GPU was free);
    // each job's held time is its ideal time plus the accounted network,
    // CPU and restart losses (GPU-time conservation).
    #[test]
    fn every_policy_finishes_every_job_and_conserves_gpu_time(
        jobs in arb_trace(),
        lease in 20.0..200.0f64,
        sharing in arb_sharing(),
        slots in prop_oneof![Just(2u32), Just(4u32)],
    ) {
        let spec = ClusterSpec { gpus_per_slot: slots, ..ClusterSpec::new(2, 2, 4, 8.0) };
        let cfg = SimConfig { lease, restart_cost: 5.0, data_sharing: sharing, ..SimConfig::default() };
        for name in batchcast_sim::policy::NAMES {
            let mut p = by_name(name).unwrap();
            let o = simulate(&spec, &cfg, &jobs, p.as_mut(), &mut |_, _| {});
            prop_assert!(o.is_ok(), "{name}: {:?}", o.err());
            let o = o.unwrap();
            for s in &o.timeline {
                prop_assert!(s.busy <= spec.total_gpus());
            }
            prop_assert_eq!(o.timeline.last().map(|s| s.busy), Some(0));
            for j in &o.jobs {
                let f = j.finish;
                prop_assert!(f.is_some(), "{name}: {} never finished", j.spec.id);
                let jct = f.unwrap() - j.spec.arrival;
                let ideal = j.spec.ideal_duration();
                prop_assert!(jct >= ideal - 1e-6, "{name}: {} jct {jct} < ideal {ideal}", j.spec.id);
                let parts = ideal + j.comm + j.cpu_lost + j.stalled;
                prop_assert!((j.held - parts).abs() < 1e-6 * parts.max(1.0),
                    "{name}: {} held {} != {}", j.spec.id, j.held, parts);
                prop_assert!(j.held <= jct + 1e-6);
                prop_assert!(j.gpus.is_empty());
            }
        }
    }

    // The same seed gives the same trace and the same results.
    #[test]
    fn same_seed_same_result(seed in 0u64..1000) {
        let spec = ClusterSpec::new(2, 2, 4, 16.0);
        let sc = SynthConfig { jobs: 60, seed, mean_interarrival: 30.0, median_duration: 300.0, ..SynthConfig::default() };
        let a = synthetic(&sc, 16).unwrap();
        let b = synthetic(&sc, 16).unwrap();
        prop_assert_eq!(&a, &b);
        let cfg = SimConfig { data_sharing: DataSharing::SharePlace, ..SimConfig::default() };
        for name in batchcast_sim::policy::NAMES {
            let r1 = simulate(&spec, &cfg, &a, by_name(name).unwrap().as_mut(), &mut |_, _| {}).unwrap();
            let r2 = simulate(&spec, &cfg, &b, by_name(name).unwrap().as_mut(), &mut |_, _| {}).unwrap();
            prop_assert_eq!(Summary::of(&r1), Summary::of(&r2));
            prop_assert_eq!(batchcast_sim::jobs_csv(&r1), batchcast_sim::jobs_csv(&r2));
        }
    }
}

#[test]
fn a_job_bigger_than_the_cluster_is_refused_by_name() {
    let spec = ClusterSpec::new(1, 1, 4, 8.0);
    let job = JobSpec {
        id: "huge".into(),
        arrival: 0.0,
        gpus: 5,
        iterations: 1.0,
        iter_time: 1.0,
        slowdown: Slowdown::default(),
        model: String::new(),
        dataset: String::new(),
        cpu: 0.0,
    };
    let err = simulate(
        &spec,
        &SimConfig::default(),
        &[job],
        by_name("fifo").unwrap().as_mut(),
        &mut |_, _| {},
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    common::assert_says(&err, "job huge");
    common::assert_says(&err, "5 GPUs");
    assert!(by_name("lottery")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
        .contains("pick from"));
}
