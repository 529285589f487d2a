//! `--model bidding --policy dally`: the published Dally (cluster-sim at
//! 4cd660e) on hand-worked cases read from files in its format. Every case:
//! chunks of one iteration, 1 s per iteration on one GPU, jobs in groups of
//! their own, no restart cost, consolidated (a job takes all its GPUs at
//! once). Machine 1 comes before machine 0 in the order Dally visits them.

mod common;

use batchcast_sim::trace::parse_cluster;
use batchcast_sim::{simulate_bidding, Bidder, BiddingRun, DallySetup, Outcome};
use common::published::{cluster_file, parsed, published_cfg, record, regroup};

/// Jobs (id, arrival, GPUs, iterations) in groups of their own on one rack
/// of `machines` machines of `per_machine` GPUs, lease 100 s, Dally's rack
/// and network waits `waits` (leases).
fn run(
    machines: u32,
    per_machine: u32,
    jobs: &[(u32, &str, u32, u32)],
    waits: (f64, f64),
) -> Outcome {
    let recs: Vec<String> = jobs
        .iter()
        .map(|&(id, at, gpus, iters)| {
            regroup(
                record(id, &format!(r#""start_time": "{at}""#), gpus, iters, "1"),
                id,
            )
        })
        .collect();
    let t = parsed(&recs);
    let c = parse_cluster(
        "c.json",
        &cluster_file(1, machines, 1, per_machine, "100.0"),
        64.0,
    )
    .unwrap();
    let run = BiddingRun {
        origin: t.origin,
        granularity: 1,
        published_default_cluster: false,
        dally: DallySetup {
            consolidate: true,
            rack_wait: waits.0,
            network_wait: waits.1,
            history: 0,
        },
    };
    simulate_bidding(&c.spec, &published_cfg(100.0), &t.jobs, &run, Bidder::Dally).unwrap()
}

#[test]
fn a_job_spans_machines_only_once_it_has_waited_its_rack_delay() {
    // Two machines of 3 GPUs, lease 100 s. At 0 jobs 1 and 2 (2 GPUs, 200
    // iterations: a chunk runs one iteration on each GPU, 1 s, so 100 s)
    // take machine 1, then machine 0; job 3 (2 GPUs, 20 iterations) finds
    // one free GPU on each machine and waits. Job 4 (1 GPU, 10 iterations)
    // arrives at 60 and GPUs are offered: job 3, bidding first (progress
    // rate 0 against the running jobs' 1; the longer wait), has waited 60 s.
    let jobs = [
        (1, "0", 2, 200),
        (2, "0", 2, 200),
        (3, "0", 2, 20),
        (4, "60", 1, 10),
    ];
    // Rack delay 0.5 leases (50 s): it takes both, across machines at 0.7
    // of the throughput: 10 chunks of 1 / 0.7 s, done at 74.29; job 4 then
    // takes one of them, done at 84.29.
    let o = run(2, 3, &jobs, (0.5, 1.0));
    let across = 10.0 / 0.7;
    assert_jcts!(o, "1" => 100.0, "2" => 100.0, "3" => 60.0 + across, "4" => across + 10.0);
    // Rack delay 1 lease (100 s): job 3 keeps waiting, job 4 takes a GPU at
    // once; at 100 jobs 1 and 2 end and job 3 takes machine 1: 10 s.
    let o = run(2, 3, &jobs, (1.0, 2.0));
    assert_jcts!(o, "1" => 100.0, "2" => 100.0, "3" => 110.0, "4" => 10.0);
}

#[test]
fn a_running_job_bids_too_and_holds_what_it_wins_unused_until_it_ends() {
    // One machine of 4 GPUs. Jobs 1 (40 iterations: 20 s) and 2 (20
    // iterations: 10 s) take 2 GPUs each. When job 2 ends at 10, job 1,
    // running, has no GPUs for its next chunk yet and bids: it wins the 2
    // free GPUs, which its next chunk does not use. Job 3, arriving at
    // 10.5, waits for them until job 1 ends at 20: done at 25.
    let jobs = [(1, "0", 2, 40), (2, "0", 2, 20), (3, "10.5", 2, 10)];
    let o = run(1, 4, &jobs, (1.0, 2.0));
    assert_jcts!(o, "1" => 20.0, "2" => 10.0, "3" => 14.5);
}

#[test]
fn a_job_larger_than_the_cluster_is_refused_naming_the_sizes() {
    let recs = vec![regroup(record(1, r#""start_time": "0""#, 8, 10, "1"), 1)];
    let t = parsed(&recs);
    let c = parse_cluster("c.json", &cluster_file(1, 1, 1, 4, "100.0"), 64.0).unwrap();
    let run = BiddingRun {
        origin: 0.0,
        granularity: 1,
        published_default_cluster: false,
        dally: DallySetup::default(),
    };
    let e = simulate_bidding(&c.spec, &published_cfg(100.0), &t.jobs, &run, Bidder::Dally)
        .unwrap_err()
        .to_string();
    common::assert_says(&e, "asks for 8 GPUs and the cluster has 4");
}
