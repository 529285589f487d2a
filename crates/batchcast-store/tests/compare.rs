//! The collocation summary on a store written as a runner would.

use batchcast_store::compare::{collocation, speedups, summarize_runs};
use batchcast_store::{keys, MetricPoint, NewRun, RunStatus, Store};

fn point(run: i64, key: &str, ts: i64, value: f64) -> MetricPoint {
    MetricPoint {
        run_id: run,
        key: key.into(),
        step: 0,
        ts_ms: ts,
        value,
    }
}

#[test]
fn shared_and_independent_workloads_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("runs.sqlite")).unwrap();
    let e = store.experiment("sweep").unwrap();
    let env = serde_json::json!({});
    let add = |store: &mut Store, w: i64, name: &str| {
        let (id, _) = store
            .add_run(
                w,
                &NewRun {
                    name: name.into(),
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(store.claim_run(id, 1, 1, &env).unwrap());
        id
    };
    let indep = store.workload(e, "independent", None, 0).unwrap();
    let shared = store
        .workload(e, "shared", Some("batchcast serve --name s"), 1)
        .unwrap();
    let i1 = add(&mut store, indep, "a");
    let i2 = add(&mut store, indep, "b");
    let s1 = add(&mut store, shared, "a");
    let s2 = add(&mut store, shared, "b");
    let data = add(&mut store, shared, keys::DATA_RUN);
    let mut points = Vec::new();
    // Independent jobs log `samples` themselves and each burn 10 CPU s.
    for r in [i1, i2] {
        points.extend([
            point(r, keys::SCRIPT_SAMPLES, 1, 500.0),
            point(r, keys::SCRIPT_SAMPLES, 2, 1000.0),
        ]);
        points.push(point(r, keys::PROC_CPU_SECONDS, 2, 10.0));
        points.push(point(r, keys::PROC_PSS_BYTES, 2, 100.0));
    }
    // Shared jobs read 2000 samples each through batchcast, burn 2 CPU s;
    // the producer burns 6.
    for r in [s1, s2] {
        points.push(point(r, keys::BATCHCAST_SAMPLES, 2, 2000.0));
        points.push(point(r, keys::PROC_CPU_SECONDS, 2, 2.0));
        points.extend([
            point(r, keys::BATCHCAST_DATA_WAIT_SHARE, 1, 0.1),
            point(r, keys::BATCHCAST_DATA_WAIT_SHARE, 2, 0.3),
        ]);
        points.push(point(r, &keys::gpu(0, keys::DCGM_SM_ACTIVE), 2, 0.5));
    }
    points.push(point(data, keys::PROC_CPU_SECONDS, 2, 6.0));
    store.insert_metrics(&points).unwrap();
    for r in [i1, i2, s1, s2, data] {
        store
            .finish_run(r, RunStatus::Finished, Some(0), None)
            .unwrap();
    }

    // Every run took 10 s.
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    conn.execute("UPDATE runs SET start_ms = 1000, end_ms = 11000", [])
        .unwrap();

    let all = collocation(&store, Some("sweep")).unwrap();
    assert_eq!(all.len(), 2);
    let (i, s) = (&all[0], &all[1]);
    assert!(!i.shared && s.shared);
    assert_eq!(
        (i.runs, s.runs, s.finished),
        (2, 2, 2),
        "the producer's run is not a training run"
    );
    assert_eq!(i.samples, Some(2000.0));
    assert_eq!(s.samples, Some(4000.0));
    assert_eq!(i.cpu_s_per_1000_samples, Some(10.0));
    assert_eq!(
        s.cpu_s_per_1000_samples,
        Some(2.5),
        "(2 + 2 + 6) CPU s per 4000 samples: the producer counts"
    );
    assert!((s.data_wait_share.unwrap() - 0.2).abs() < 1e-9);
    assert_eq!(s.gpu_activity, Some(0.5));
    assert_eq!(i.gpu_activity, None);
    assert_eq!(i.memory_bytes, Some(200.0));
    let sp = speedups(&all);
    assert_eq!(sp.len(), 1);
    assert_eq!(
        (sp[0].independent.as_str(), sp[0].shared.as_str()),
        ("independent", "shared")
    );
    assert_eq!(sp[0].cpu_saving, Some(4.0));
    assert_eq!(
        (i.samples_per_s, s.samples_per_s),
        (Some(200.0), Some(400.0))
    );
    assert_eq!(sp[0].throughput, 2.0);
    assert_eq!(s.wall_s, Some(10.0));

    let runs = summarize_runs(
        &store,
        &[s1],
        &[keys::BATCHCAST_DATA_WAIT_SHARE.to_string(), "nope".into()],
    )
    .unwrap();
    let m = &runs[0].metrics;
    assert_eq!(m[0].1.as_ref().unwrap().max, 0.3);
    assert!(m[1].1.is_none());
}

/// The samples a job reports as a figure at its end (the demo's trainers)
/// count over the last sampled count, and the CPU the kernel counted at a
/// run's end over its last sample.
#[test]
fn figures_and_cpu_at_exit_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("runs.sqlite")).unwrap();
    let e = store.experiment("demo").unwrap();
    let w = store.workload(e, "independent", None, 0).unwrap();
    let new = NewRun {
        name: "trainer-1".into(),
        ..Default::default()
    };
    let (run, _) = store.add_run(w, &new).unwrap();
    assert!(store.claim_run(run, 1, 1, &serde_json::json!({})).unwrap());
    store
        .insert_metrics(&[
            point(run, keys::PROC_CPU_SECONDS, 1, 1.0),
            point(run, keys::PROC_EXIT_CPU_SECONDS, 2, 3.0),
            point(run, keys::BATCHCAST_SAMPLES, 1, 1400.0),
            point(run, &keys::figure("samples"), 2, 1500.0),
        ])
        .unwrap();
    store
        .finish_run(run, RunStatus::Finished, Some(0), None)
        .unwrap();
    let all = collocation(&store, Some("demo")).unwrap();
    assert_eq!(all[0].samples, Some(1500.0));
    assert_eq!(all[0].cpu_s_per_1000_samples, Some(2.0));
}
