//! `--model bidding`: the published simulator's (cluster-sim at 2953d56)
//! per-GPU auctions, leases and chunks of iterations, on hand-worked cases
//! read from files in its format. Every case: one slot of 2 GPUs, jobs of
//! 2 GPUs and 100 iterations of 1 s on one GPU, in groups of their own.

mod common;

use batchcast_sim::trace::parse_cluster;
use batchcast_sim::{simulate_bidding, Bidder, BiddingRun, JobSpec, Outcome, SimConfig};
use common::published::{cluster_file, parsed, published_cfg, record, regroup};

/// Jobs 1..=n, each in its own group, from 0.
fn jobs(n: u32) -> Vec<JobSpec> {
    let recs: Vec<String> = (1..=n)
        .map(|id| regroup(record(id, r#""start_time": "0""#, 2, 100, "1"), id))
        .collect();
    parsed(&recs).jobs
}

/// The shape as written, chunks of `granularity`, the clock from `origin`.
fn chunks(origin: f64, granularity: u64) -> BiddingRun {
    BiddingRun {
        origin,
        granularity,
        published_default_cluster: false,
        dally: Default::default(),
    }
}

fn run(cfg: &SimConfig, jobs: &[JobSpec], granularity: u64, policy: &str) -> Outcome {
    let c = parse_cluster("c.json", &cluster_file(1, 1, 1, 2, "20.0"), 64.0).unwrap();
    simulate_bidding(
        &c.spec,
        cfg,
        jobs,
        &chunks(0.0, granularity),
        Bidder::by_name(policy).unwrap(),
    )
    .unwrap()
}

#[test]
fn tied_bids_spread_the_gpus_one_per_job() {
    // LAS and Tiresias: the first GPU goes to job 1 (equal bids, equal GPUs
    // held, lower id), the second to job 2, which holds fewer. Each runs on
    // one GPU, 1 s per iteration, and keeps it (lease 100 s, each iteration
    // ends by its lease end): both end at 100. Gang-scheduled, one would
    // run on both GPUs and end at 50.
    for p in ["las", "tiresias"] {
        let o = run(&published_cfg(100.0), &jobs(2), 1, p);
        assert_jcts!(o, "1" => 100.0, "2" => 100.0);
    }
    // SJF bids the run time on the GPUs it would hold: for the second GPU
    // job 1 bids -100 x 1 / 2 = -50 against job 2's -100 and takes both.
    let o = run(&published_cfg(100.0), &jobs(2), 1, "sjf");
    assert_jcts!(o, "1" => 50.0, "2" => 100.0);
}

#[test]
fn gandiva_bids_throughput_so_one_job_takes_both_and_leases_rotate_them() {
    // Gandiva bids n x s: job 1 gets GPU 0 (tie, lower id), then bids 2
    // for GPU 1 against job 2's 1. At 0.5 s per iteration it does 40 by
    // its lease end at 20; its GPUs expire, it last got GPUs at 20, job 2
    // never (-1): job 2 wins both, 20-40, then job 1 40-60 (80 done), job 2
    // 60-80 (80 done), job 1 80-90 (done), job 2 90-100.
    let o = run(&published_cfg(20.0), &jobs(2), 1, "gandiva");
    assert_jcts!(o, "1" => 90.0, "2" => 100.0);
    // The clock runs on the trace's own times (here from 100), the
    // results are reported from the first arrival.
    let recs: Vec<String> = (1..=2)
        .map(|id| regroup(record(id, r#""start_time": "100""#, 2, 100, "1"), id))
        .collect();
    let t = parsed(&recs);
    assert_eq!(t.origin, 100.0);
    let c = parse_cluster("c.json", &cluster_file(1, 1, 1, 2, "20.0"), 64.0).unwrap();
    let g = Bidder::by_name("gandiva").unwrap();
    let o = simulate_bidding(
        &c.spec,
        &published_cfg(20.0),
        &t.jobs,
        &chunks(t.origin, 1),
        g,
    )
    .unwrap();
    assert_jcts!(o, "1" => 90.0, "2" => 100.0);
    assert_eq!(o.jobs[0].finish, Some(90.0));
    // With a lease past both, job 1 runs 0-50 and job 2 50-100.
    let o = run(&published_cfg(1000.0), &jobs(2), 1, "gandiva");
    assert_jcts!(o, "1" => 50.0, "2" => 100.0);
}

#[test]
fn chunks_run_whole_and_past_the_lease() {
    // Granularity 30: chunks of 30 iterations, 15 s on 2 GPUs. The chunk
    // that starts at 15 ends at 30, past the lease end at 20; 100
    // iterations take 4 chunks (the last runs 30 for the 10 left): 60 s.
    let o = run(&published_cfg(20.0), &jobs(1), 30, "las");
    assert_jcts!(o, "1" => 60.0);
}

#[test]
fn released_gpus_are_auctioned_after_the_restart_cost_per_gpu() {
    // Restart cost 1 s per GPU: at the lease end (20) the job's 2 GPUs are
    // auctioned at 22; 40 iterations per 20 s lease: 0-20, 22-42, 44-54.
    let cfg = SimConfig {
        restart_cost: 1.0,
        ..published_cfg(20.0)
    };
    let o = run(&cfg, &jobs(1), 1, "las");
    assert_jcts!(o, "1" => 54.0);
}

#[test]
fn policies_outside_the_published_code_are_refused_naming_the_choices() {
    for (name, needle) in [("srsf", "pick las"), ("fifo", "pick sjf, las")] {
        let e = Bidder::by_name(name).unwrap_err().to_string();
        common::assert_says(&e, needle);
    }
}

#[test]
fn a_run_of_too_many_chunks_is_refused_naming_the_fix() {
    // One event per chunk: 1e15 iterations in chunks of 1 would never end;
    // in chunks of 1e12 they are 1000 chunks, done at once.
    let mut big = jobs(1);
    big[0].iterations = 1e15;
    let c = parse_cluster("c.json", &cluster_file(1, 1, 1, 2, "20.0"), 64.0).unwrap();
    let las = Bidder::by_name("las").unwrap();
    let e =
        simulate_bidding(&c.spec, &published_cfg(20.0), &big, &chunks(0.0, 1), las).unwrap_err();
    common::assert_says(&e.to_string(), "raise iteration_granularity");
    let o = simulate_bidding(
        &c.spec,
        &published_cfg(20.0),
        &big,
        &chunks(0.0, 1_000_000_000_000),
        las,
    )
    .unwrap();
    assert_jcts!(o, "1" => 1e15 / 2.0);
}

#[test]
fn without_should_use_config_the_published_default_cluster_is_built() {
    // cluster_file() writes no should_use_config: the published code then
    // builds 32 GPUs a rack whatever the shape says; its first machine has
    // 2 slots of 2 GPUs. A 4-GPU job (100 iterations of 1 s) takes GPUs
    // 0-3 and spans the slots: 100 / (4 x 0.8) = 31.25 s. On the shape as
    // written (one slot of 4): 25 s.
    let c = parse_cluster("c.json", &cluster_file(1, 1, 1, 4, "100.0"), 64.0).unwrap();
    assert!(!c.shape_used);
    let t = parsed(&[record(1, r#""start_time": "0""#, 4, 100, "1")]);
    let las = Bidder::by_name("las").unwrap();
    for (default, gpus, jct) in [(true, 32, 31.25), (false, 4, 25.0)] {
        let run = BiddingRun {
            published_default_cluster: default,
            ..chunks(0.0, 1)
        };
        let o = simulate_bidding(&c.spec, &published_cfg(100.0), &t.jobs, &run, las).unwrap();
        assert_eq!(o.total_gpus, gpus);
        assert_jcts!(o, "1" => jct);
    }
}
