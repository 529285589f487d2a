//! `batchcast sim` end to end: a trace file in, a table, CSVs, JSON and
//! SVG charts out; malformed traces refused naming file, record and field.

use std::process::Command;

fn batchcast() -> Command {
    Command::new(env!("CARGO_BIN_EXE_batchcast"))
}

#[test]
fn sim_compares_policies_on_a_trace_and_writes_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("jobs.json");
    std::fs::write(
        &trace,
        r#"[{"job_id": 1, "arrival_time": 0, "total_iterations": 100, "time_per_iteration": 1, "max_parallelism": 4},
            {"job_id": 2, "arrival_time": 10, "total_iterations": 50, "time_per_iteration": 1, "max_parallelism": 4}]"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = batchcast()
        .args([
            "sim",
            "--racks",
            "1",
            "--machines-per-rack",
            "1",
            "--gpus-per-machine",
            "4",
            "--policy",
            "fifo,dally",
        ])
        .arg("--trace")
        .arg(&trace)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // FIFO: job 1 runs 0-100, job 2 100-150 → mean JCT (100 + 140) / 2 s.
    let fifo = stdout.lines().find(|l| l.starts_with("| fifo")).unwrap();
    assert!(fifo.contains("| 0.04 | 0.03 |"), "{fifo}");
    assert!(stdout.contains("| dally"));
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
    let csv = std::fs::read_to_string(out.join("fifo.jobs.csv")).unwrap();
    assert!(
        csv.lines()
            .nth(2)
            .unwrap()
            .starts_with("2,4,10.000,100.000,150.000,140.000,"),
        "{csv}"
    );

    std::fs::write(&trace, r#"[{"job_id": 1, "arrival_time": "soon", "total_iterations": 1, "time_per_iteration": 1, "max_parallelism": 1}]"#).unwrap();
    let o = batchcast()
        .args(["sim", "--trace"])
        .arg(&trace)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("jobs.json: record 1: field `arrival_time`"),
        "{err}"
    );
}

#[test]
fn sim_reads_a_cluster_file_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.json");
    std::fs::write(
        &cluster,
        r#"{"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 4, "gpus_per_slot": 2, "cpu_cores": 16}"#,
    )
    .unwrap();
    let o = batchcast()
        .args([
            "sim",
            "--jobs",
            "200",
            "--interarrival",
            "60",
            "--policy",
            "gandiva",
            "--cluster",
        ])
        .arg(&cluster)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.starts_with("200 jobs on 16 GPUs (2 racks x 2 machines x 4 GPUs, 16 cores each)"),
        "{stdout}"
    );

    std::fs::write(&cluster, r#"{"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 4, "gpus_per_slot": 3, "cpu_cores": 16}"#)
        .unwrap();
    let o = batchcast()
        .args(["sim", "--cluster"])
        .arg(&cluster)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("do not divide"),
        "{err}"
    );
    let o = batchcast()
        .args(["sim", "--policy", "lottery"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("pick from"), "{err}");
}
