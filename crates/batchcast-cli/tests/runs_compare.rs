//! `batchcast runs compare` on stores that are missing, foreign or real.

use std::process::Command;

fn batchcast() -> Command {
    Command::new(env!("CARGO_BIN_EXE_batchcast"))
}

#[test]
fn a_missing_or_foreign_store_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sqlite");
    let out = batchcast()
        .args(["runs", "compare", "--store"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no run store at") && err.contains("batchcast run"),
        "{err}"
    );
    assert!(!missing.exists());

    let foreign = dir.path().join("notes.txt");
    std::fs::write(&foreign, "x".repeat(4096)).unwrap();
    let out = batchcast()
        .args(["runs", "compare", "--store"])
        .arg(&foreign)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a batchcast run store"), "{err}");
}

#[test]
fn compare_prints_the_collocation_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let mut store = batchcast_runs::Store::open(&path).unwrap();
    let e = store.experiment("exp").unwrap();
    let w = store
        .workload(e, "shared", Some("batchcast serve"), 0)
        .unwrap();
    let (r, _) = store
        .add_run(
            w,
            &batchcast_runs::NewRun {
                name: "a".into(),
                ..Default::default()
            },
        )
        .unwrap();
    store
        .insert_metrics(&[batchcast_runs::MetricPoint {
            run_id: r,
            key: batchcast_runs::keys::BATCHCAST_DATA_WAIT_SHARE.into(),
            step: 0,
            ts_ms: 1,
            value: 0.25,
        }])
        .unwrap();
    drop(store);
    let out = batchcast()
        .args(["runs", "compare", "--store"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("exp/shared") && text.contains("25.0%"),
        "{text}"
    );
    let out = batchcast()
        .args(["runs", "compare", "--json", "--store"])
        .arg(&path)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["workloads"][0]["data_wait_share"], 0.25);
}
