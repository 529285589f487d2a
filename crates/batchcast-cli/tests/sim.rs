//! `batchcast sim` end to end: a trace file in, a table, CSVs, JSON and
//! SVG charts out; malformed traces refused naming file, record and field.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{assert_says, batchcast, Fail, Succeed};

/// What `batchcast sim FLAG PATH` says as it fails, `path` rewritten to
/// hold `text`.
fn refusal(flag: &str, path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    batchcast().args(["sim", flag]).arg(path).fail()
}

/// Runs `batchcast sim OPTIONS --trace TRACE --out OUT` (`OPTIONS` a line
/// as typed), which must succeed;
/// returns its output and the `fifo.jobs.csv` it wrote.
fn sim_writing(options: &str, trace: &Path, out: &Path) -> (Output, String) {
    let o = batchcast()
        .arg("sim")
        .args(options.split_whitespace())
        .arg("--trace")
        .arg(trace)
        .arg("--out")
        .arg(out)
        .succeed();
    let csv = std::fs::read_to_string(out.join("fifo.jobs.csv")).unwrap();
    (o, csv)
}

/// Checks that the first policy's mean JCT in `sim --json`'s output `o`
/// is `expected` seconds.
fn assert_mean_jct(o: &Output, expected: f64) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let mean = v[0]["mean_jct"].as_f64().unwrap();
    assert!((mean - expected).abs() < 1e-6, "{stdout}");
}

/// Writes `text` to file `name` in `dir`; returns its path.
fn written(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn sim_compares_policies_on_a_trace_and_writes_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let trace = written(
        dir.path(),
        "jobs.json",
        r#"[{"job_id": 1, "arrival_time": 0, "total_iterations": 100, "time_per_iteration": 1, "max_parallelism": 4},
            {"job_id": 2, "arrival_time": 10, "total_iterations": 50, "time_per_iteration": 1, "max_parallelism": 4}]"#,
    );
    let out = dir.path().join("out");
    let (o, csv) = sim_writing(
        "--racks 1 --machines-per-rack 1 --gpus-per-machine 4 \
         --policy fifo,dally --format batchcast",
        &trace,
        &out,
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    // FIFO: job 1 runs 0-100, job 2 100-150 → mean JCT (100 + 140) / 2 s.
    let fifo = stdout.lines().find(|l| l.starts_with("| fifo")).unwrap();
    assert_says(fifo, "| 0.04 | 0.03 |");
    assert_says(&stdout, "| dally");
    for f in [
        "fifo.jobs.csv",
        "dally.jobs.csv",
        "summary.json",
        "jct_cdf.svg",
        "utilisation.svg",
        "queue.svg",
    ] {
        assert!(out.join(f).metadata().unwrap().len() > 0, "{f}");
    }
    assert!(
        csv.lines()
            .nth(2)
            .unwrap()
            .starts_with("2,4,10.000,100.000,150.000,140.000,"),
        "{csv}"
    );

    let err = refusal(
        "--trace",
        &trace,
        r#"[{"job_id": 1, "arrival_time": "soon", "total_iterations": 1, "time_per_iteration": 1, "max_parallelism": 1}]"#,
    );
    assert_says(&err, "jobs.json: record 1: field `arrival_time`");
}

#[test]
fn sim_reads_a_cluster_file_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = written(
        dir.path(),
        "cluster.json",
        r#"{"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 4, "gpus_per_slot": 2, "cpu_cores": 16}"#,
    );
    let o = batchcast()
        .args("sim --jobs 200 --interarrival 60 --policy gandiva --cluster".split_whitespace())
        .arg(&cluster)
        .succeed();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.starts_with("200 jobs on 16 GPUs (2 racks x 2 machines x 4 GPUs, 16 cores each)"),
        "{stdout}"
    );

    let err = refusal(
        "--cluster",
        &cluster,
        r#"{"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 4, "gpus_per_slot": 3, "cpu_cores": 16}"#,
    );
    assert_says(&err, "do not divide");
    let err = batchcast().args(["sim", "--policy", "lottery"]).fail();
    assert_says(&err, "pick from");
}

#[test]
fn sim_reads_the_published_simulators_trace_and_cluster_files() {
    // The format of github aakash-sharma/cluster-sim's configuration/jobs
    // and configuration/cluster (written here: that repository has no
    // licence). One 4-GPU slot, iterations in whole chunks of 500; job 1:
    // 400 (run as 500) iterations x 1 s on one GPU, over 4 GPUs 125 s; job
    // 2 arrives at 10 (arrival_time, not its start_time), 200 (500)
    // iterations x 2 s, runs 125-375: FIFO mean JCT (125 + 365) / 2 = 245 s.
    let dir = tempfile::tempdir().unwrap();
    let rec = |id: u32, when: &str, iters: u32, tpi: &str| {
        format!(
            r#"{{"time_per_iteration": "{tpi}", "job_id": "{id}", "max_parallelism": "4", {when},
            "cross_rack_slowdown": "0.6", "cross_machine_slowdown": "0.7", "job_group_id": "1",
            "total_iterations": "{iters}", "cross_slot_slowdown": "0.8"}}"#
        )
    };
    let trace = written(
        dir.path(),
        "small.json",
        &format!(
            "[{}, {}, {}]",
            rec(1, r#""start_time": "0""#, 400, "1"),
            rec(3, r#""start_time": "0""#, 0, "1"),
            rec(2, r#""arrival_time": "10", "start_time": "0""#, 200, "2"),
        ),
    );
    let cluster = written(
        dir.path(),
        "cluster.json",
        r#"{"lease_time": "20.0", "racks_in_cluster": "1", "machines_per_rack": "1", "epsilon": "1.0",
            "gpus_per_slot": "4", "fairness_threshold": "0.0", "slots_per_machine": "1",
            "cluster_policy": "Tiresias", "iteration_granularity": "500"}"#,
    );
    let o = batchcast()
        .args(["sim", "--policy", "fifo", "--json", "--trace"])
        .arg(&trace)
        .arg("--cluster")
        .arg(&cluster)
        .succeed();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_says(&stderr, "skipped 1 records");
    assert_says(&stderr, "lease 20 s, restart cost 0 s, congestion 0 / 0");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v[0]["jobs"], 2, "{stdout}");
    assert_mean_jct(&o, 245.0);
    assert_says(
        &stderr,
        "2 jobs rounded up to whole chunks of iteration_granularity 500",
    );

    // The same trace as batchcast's own format is refused, naming dally.
    let err = batchcast()
        .args(["sim", "--format", "batchcast", "--trace"])
        .arg(&trace)
        .fail();
    assert_says(&err, "--format dally");
}

#[test]
fn sim_model_bidding_runs_the_published_per_gpu_auctions() {
    // One slot of 2 GPUs, lease 20 s; two 2-GPU jobs of 100 iterations x
    // 1 s on one GPU. Gandiva's bids (n x s) give job 1 both GPUs; the
    // leases then rotate them: job 1 ends at 90, job 2 at 100 (the
    // published simulator's numbers), mean 95. Gang-scheduled FIFO-like
    // packing would give 50 and 100.
    let dir = tempfile::tempdir().unwrap();
    let rec = |id: u32| {
        format!(
            r#"{{"time_per_iteration": "1", "job_id": "{id}", "max_parallelism": "2",
            "start_time": "0", "cross_rack_slowdown": "0.6", "cross_machine_slowdown": "0.7",
            "job_group_id": "{id}", "total_iterations": "100", "cross_slot_slowdown": "0.8"}}"#
        )
    };
    let trace = written(dir.path(), "two.json", &format!("[{}, {}]", rec(1), rec(2)));
    let cluster = written(
        dir.path(),
        "cluster.json",
        r#"{"lease_time": "20.0", "racks_in_cluster": "1", "machines_per_rack": "1",
            "gpus_per_slot": "2", "slots_per_machine": "1", "cluster_policy": "Gandiva",
            "iteration_granularity": "1", "should_use_config": "true"}"#,
    );
    let sim = |policy: &str| {
        let mut c = batchcast();
        c.args(["sim", "--model", "bidding", "--json", "--policy", policy])
            .arg("--trace")
            .arg(&trace)
            .arg("--cluster")
            .arg(&cluster);
        c
    };
    assert_mean_jct(&sim("gandiva").succeed(), 95.0);
    let err = sim("fifo").fail();
    assert_says(&err, "pick sjf, las, tiresias, gandiva or dally");
    // Dally (no `consolidate`: one GPU at a time) bids progress rates:
    // tied, each job takes one GPU (the fewer held wins a tie), loses it
    // when its lease ends at 20, 40, ... and wins it back: both end at 100.
    assert_mean_jct(&sim("dally").succeed(), 100.0);
    // Its delay timers as the published command line gives them.
    let o = sim("dally").args(["--dally-delays", "-1,-1,5"]).succeed();
    assert_mean_jct(&o, 100.0);
    let err = sim("dally").args(["--dally-delays", "1"]).fail();
    assert_says(&err, "give RACK,NETWORK[,HISTORY]");
}

#[test]
fn sim_model_bidding_refuses_the_gang_models_cpu_and_congestion_flags() {
    for (flag, value) in [
        ("--data-sharing", "share"),
        ("--rack-congestion", "0.1"),
        ("--core-congestion", "0.1"),
        ("--cpu-cores", "32"),
    ] {
        let err = batchcast()
            .args(["sim", "--model", "bidding", "--jobs", "10", flag, value])
            .fail();
        assert_says(&err, &format!("{flag} does not apply to --model bidding"));
        assert_says(&err, "no CPU or congestion model");
        assert_says(&err, "--model gang");
    }
    let o = batchcast()
        .args("sim --model bidding --jobs 20 --racks 1 --policy sjf".split_whitespace())
        .succeed();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let header = stdout.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("20 jobs on 64 GPUs (1 racks x 8 machines x 8 GPUs)")
            && !header.contains("data sharing")
            && !header.contains("cores"),
        "{stdout}"
    );
}

/// `--network standin` replaces the trace's slowdowns for the models it
/// knows: one VGG job of 8 GPUs on 2 machines of 4 spans machines, so it
/// runs 800 iterations of 1 s / 8 GPUs at the stand-in's cross-machine
/// multiplier 10.7721 (hand-computed in docs/sim.md) instead of at the
/// trace's fraction 0.5; a model it does not know keeps the trace's.
#[test]
fn sim_network_standin_replaces_the_traces_slowdowns_for_known_models() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("jobs.json");
    let job = |id: u32, model: &str| {
        format!(
            r#"{{"job_id": "{id}", "arrival_time": "0", "total_iterations": "800",
                "time_per_iteration": "1", "max_parallelism": "8", "model": "{model}",
                "cross_slot_slowdown": "1", "cross_machine_slowdown": "0.5",
                "cross_rack_slowdown": "0.5"}}"#
        )
    };
    let finish = |network: &str, model: &str| {
        std::fs::write(&trace, format!("[{}]", job(1, model))).unwrap();
        let out = dir.path().join(format!("out-{network}-{model}"));
        let (o, csv) = sim_writing(
            &format!(
                "--racks 1 --machines-per-rack 2 --gpus-per-machine 4 \
                 --policy fifo --network {network}"
            ),
            &trace,
            &out,
        );
        let row = csv.lines().nth(1).unwrap().to_string();
        let finish: f64 = row.split(',').nth(4).unwrap().parse().unwrap();
        (finish, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (trace_finish, _) = finish("trace", "VGG");
    assert!((trace_finish - 200.0).abs() < 1e-3, "{trace_finish}");
    let (standin, err) = finish("standin", "VGG");
    assert!((standin - 1077.211).abs() < 1e-2, "{standin}");
    assert_says(&err, "stand-in network model: slowdowns of 1 jobs replaced");
    let (unknown, err) = finish("standin", "GPT");
    assert!((unknown - 200.0).abs() < 1e-3, "{unknown}");
    assert_says(
        &err,
        "1 keep the trace's, their model unknown to it: GPT (1)",
    );
    let err = batchcast()
        .args(["sim", "--jobs", "5", "--network", "astra"])
        .fail();
    assert_says(&err, "unknown --network \"astra\"; pick trace or standin");
}
