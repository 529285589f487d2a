//! The run store on a real SQLite file: creation, refusal of foreign files,
//! resumable runs, orphan repair, searches, logs and reads of points.

mod common;

use batchcast_store::{keys, LogStream, MetricPoint, RunFilter, RunStatus, Store, StoreError};
use common::{found, log_param, new_run, point, steps_of, Fixture};

#[test]
fn a_new_store_is_created_with_its_directory_and_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/runs.sqlite");
    let mut store = Store::open(&path).unwrap();
    let e = store.experiment("exp").unwrap();
    let w = store
        .workload(e, "shared", Some("batchcast serve --name x"), 0)
        .unwrap();
    let (run, status) = store.add_run(w, &new_run("r1")).unwrap();
    assert_eq!(status, RunStatus::Pending);
    drop(store);

    let ro = Store::open_read_only(&path).unwrap();
    let row = ro.run(run).unwrap();
    assert_eq!(
        (row.experiment.as_str(), row.workload.as_str()),
        ("exp", "shared")
    );
    assert_eq!(row.run.command[1], "train.py");
    assert_eq!(ro.params(run).unwrap()[0].key, "lr");
    assert_eq!(
        ro.workloads(e).unwrap()[0].data.as_deref(),
        Some("batchcast serve --name x")
    );
}

#[test]
fn foreign_and_missing_files_are_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "hello, this is not a database at all, but it is long enough to have a header",
    )
    .unwrap();
    let before = std::fs::read(&text).unwrap();
    assert!(matches!(
        Store::open(&text),
        Err(StoreError::NotAStore { .. })
    ));
    assert!(matches!(
        Store::open_read_only(&text),
        Err(StoreError::NotAStore { .. })
    ));
    assert_eq!(std::fs::read(&text).unwrap(), before);

    let other = dir.path().join("other.sqlite");
    let conn = rusqlite::Connection::open(&other).unwrap();
    conn.execute_batch("CREATE TABLE t (x); PRAGMA application_id = 42;")
        .unwrap();
    drop(conn);
    let err = Store::open(&other).unwrap_err();
    assert!(
        matches!(err, StoreError::NotAStore { found: 42, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("--store"),
        "the message says what to do: {err}"
    );

    let missing = dir.path().join("missing.sqlite");
    let err = Store::open_read_only(&missing).unwrap_err();
    assert!(matches!(err, StoreError::Missing { .. }));
    assert!(!missing.exists(), "a reader never creates a store");
}

#[test]
fn a_newer_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    drop(Store::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    let err = Store::open_read_only(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 99, .. }),
        "{err}"
    );
}

/// A store of layout 1 (no job start times) is read as it stands, and a
/// writer migrates it to layout 2 in place, keeping its runs.
#[test]
fn a_layout_1_store_is_read_and_migrated() {
    let mut f = Fixture::new();
    let a = f.run("a");
    let Fixture {
        dir: _dir,
        path,
        store,
        ..
    } = f;
    drop(store);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("ALTER TABLE runs DROP COLUMN pid_start; PRAGMA user_version = 1;")
        .unwrap();
    let runs = Store::open_read_only(&path)
        .unwrap()
        .runs(&RunFilter::default())
        .unwrap();
    assert_eq!(runs.len(), 1);
    let store = Store::open(&path).unwrap();
    store.set_pid(a, 4242, Some(7)).unwrap();
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2);
}

#[test]
fn runs_resume_claims_are_exclusive_and_orphans_are_repaired() {
    let mut f = Fixture::new();
    let a = f.run("a");
    let b = f.run("b");
    let Fixture { mut store, w, .. } = f;
    let env = serde_json::json!({"host": "testhost"});
    assert!(store.claim_run(a, 111, 5, &env).unwrap());
    assert!(
        !store.claim_run(a, 222, 6, &env).unwrap(),
        "a RUNNING run cannot be claimed twice"
    );
    assert!(store.claim_run(b, 111, 5, &env).unwrap());
    store.set_pid(a, 4242, None).unwrap();
    store
        .finish_run(a, RunStatus::Finished, Some(0), None)
        .unwrap();

    // Adding the same run again keeps its status: that is what resumes a plan.
    let (a2, status) = store.add_run(w, &new_run("a")).unwrap();
    assert_eq!((a2, status), (a, RunStatus::Finished));

    // Runner 111 died: its RUNNING run b becomes KILLED; another host's is left.
    let repaired = store
        .repair_orphans("testhost", |pid, start| pid == 999 && start == 1)
        .unwrap();
    assert_eq!(repaired, vec![b]);
    let b_row = store.run(b).unwrap().run;
    assert_eq!(b_row.status, RunStatus::Killed);
    assert!(b_row.message.unwrap().contains("pid 111"));
    assert!(b_row.end_ms.is_some());
    assert!(
        store.claim_run(b, 333, 7, &env).unwrap(),
        "a KILLED run can be run again"
    );
    assert_eq!(store.run(b).unwrap().run.end_ms, None);
}

#[test]
fn filters_search_names_and_parameters() {
    let mut f = Fixture::new();
    let a = f.run("alpha");
    let _b = f.run("beta");
    let Fixture { store, .. } = f;
    log_param(&store, a, "optimizer", "adamw");
    let by = |search: &str| found(&store, search);
    assert_eq!(by("alph"), vec!["alpha"]);
    assert_eq!(by("optimizer=adamw"), vec!["alpha"]);
    assert_eq!(by("lr=0.1"), vec!["beta", "alpha"]);
    assert!(
        by("%").is_empty(),
        "wildcards in a search are taken literally"
    );
    let limited = store
        .runs(&RunFilter {
            limit: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(limited.len(), 1);
}

#[test]
fn logs_keep_order_and_tails_are_cut_at_the_end() {
    let mut f = Fixture::new();
    let r = f.run("r");
    let Fixture { mut store, .. } = f;
    let big: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    store
        .append_log(r, LogStream::Stdout, 1, b"first\n")
        .unwrap();
    store.append_log(r, LogStream::Stdout, 2, &big).unwrap();
    store
        .append_log(r, LogStream::Stderr, 3, b"oops\n")
        .unwrap();
    let (all, cut) = store.log(r, LogStream::Stdout, None).unwrap();
    assert!(!cut);
    assert_eq!(&all[..6], b"first\n");
    assert_eq!(&all[6..], &big[..]);
    let (tail, cut) = store.log(r, LogStream::Stdout, Some(1000)).unwrap();
    assert!(cut);
    assert_eq!(&tail[..], &big[big.len() - 1000..]);
    assert_eq!(
        store.log(r, LogStream::Stderr, Some(1000)).unwrap(),
        (b"oops\n".to_vec(), false)
    );
}

/// A chart's read of a long metric keeps at most what it draws, evenly,
/// with both ends, and counts what it would scan without reading it.
#[test]
fn a_long_metric_is_thinned_while_read_with_both_ends_kept() {
    let mut f = Fixture::new();
    let r = f.run("r");
    const N: i64 = 10_007;
    let ro = f.record_then_read(|h| {
        for step in 0..N {
            assert!(h.metric(point(r, "loss", step, 1000 + step, step as f64)));
        }
    });
    assert_eq!(ro.metric_len(r, "loss", None).unwrap(), N as usize);
    assert_eq!(ro.metric_len(r, "loss", Some(1000 + N - 11)).unwrap(), 10);
    assert_eq!(ro.metric_len(r, "nothing", None).unwrap(), 0);

    let steps = steps_of(&ro.metric_thinned(r, "loss", None, 100).unwrap());
    assert!(
        (50..=100).contains(&steps.len()),
        "{} points kept",
        steps.len()
    );
    assert_eq!(steps[0], 0);
    assert_eq!(*steps.last().unwrap(), N - 1);
    let gaps: Vec<i64> = steps.windows(2).map(|w| w[1] - w[0]).collect();
    let stride = gaps[0];
    assert!(
        gaps[..gaps.len() - 1].iter().all(|&g| g == stride),
        "{gaps:?}"
    );
    assert!((1..=stride).contains(gaps.last().unwrap()), "{gaps:?}");

    // A short read (live updates) is returned whole.
    let tail = ro
        .metric_thinned(r, "loss", Some(1000 + N - 11), 100)
        .unwrap();
    assert_eq!(steps_of(&tail), (N - 10..N).collect::<Vec<_>>());
    assert!(ro
        .metric_thinned(r, "nothing", None, 100)
        .unwrap()
        .is_empty());
}

/// `%` and `_` in a search are the characters themselves, not wildcards
/// (nor dropped): `batch_size=64` finds the run with that parameter only.
#[test]
fn a_search_takes_percent_and_underscore_literally() {
    let mut f = Fixture::new();
    let a = f.run("drop50%");
    let b = f.run("drop500");
    let c = f.run("c\\d");
    let Fixture { store, .. } = f;
    log_param(&store, a, "batch_size", "64");
    log_param(&store, b, "batchXsize", "64");
    log_param(&store, c, "batchsize", "64");
    let by = |search: &str| found(&store, search);
    assert_eq!(by("batch_size=64"), vec!["drop50%"]);
    assert_eq!(by("50%"), vec!["drop50%"]);
    assert_eq!(by("drop50_"), Vec::<String>::new());
    assert_eq!(by("c\\d"), vec!["c\\d"]);
    assert_eq!(by("size=64").len(), 3);
}

/// A run's CPU is the larger of the kernel's count at its end and the last
/// sample of its process tree, either alone when only one was recorded.
#[test]
fn a_runs_cpu_is_the_larger_of_its_exit_count_and_its_last_sample() {
    let mut f = Fixture::new();
    let (none, exit_only, sampled_only, escaped, exact) =
        (f.run("a"), f.run("b"), f.run("c"), f.run("d"), f.run("e"));
    let Fixture { mut store, .. } = f;
    let cpu = keys::PROC_CPU_SECONDS;
    let exit = keys::PROC_EXIT_CPU_SECONDS;
    store
        .insert_metrics(&[
            point(exit_only, exit, 0, 5, 2.0),
            point(sampled_only, cpu, 0, 1, 1.0),
            point(sampled_only, cpu, 0, 2, 3.0),
            // A process that escaped the waited child: sampled, not waited for.
            point(escaped, cpu, 0, 1, 7.0),
            point(escaped, exit, 0, 2, 4.0),
            // The usual case: the exit count has the last interval too.
            point(exact, cpu, 0, 1, 3.5),
            point(exact, exit, 0, 2, 4.0),
        ])
        .unwrap();
    let got: Vec<Option<f64>> = [none, exit_only, sampled_only, escaped, exact]
        .iter()
        .map(|&r| store.run_cpu_seconds(r).unwrap())
        .collect();
    assert_eq!(got, [None, Some(2.0), Some(3.0), Some(7.0), Some(4.0)]);
}

/// Points are read one by one after a time, at most as many as asked.
#[test]
fn points_are_read_after_a_time_up_to_a_limit() {
    let mut f = Fixture::new();
    let r = f.run("r");
    let Fixture { mut store, .. } = f;
    let points: Vec<MetricPoint> = (0..10)
        .map(|i| point(r, "loss", i, i * 10, i as f64))
        .collect();
    store.insert_metrics(&points).unwrap();
    let seen = |after: Option<i64>, limit: usize| {
        let mut out = Vec::new();
        store
            .for_each_point_after(r, "loss", after, limit, |step, ts, v| {
                out.push((step, ts, v));
                Ok::<_, StoreError>(())
            })
            .unwrap();
        out
    };
    assert_eq!(seen(None, usize::MAX).len(), 10);
    assert_eq!(
        seen(Some(65), usize::MAX),
        [(7, 70, 7.0), (8, 80, 8.0), (9, 90, 9.0)]
    );
    assert_eq!(seen(Some(65), 2), [(7, 70, 7.0), (8, 80, 8.0)]);
    assert_eq!(store.metric_len(r, "loss", Some(65)).unwrap(), 3);
}

/// A reader of events reads at most as many as it asks for, each cut to
/// the characters it asks for (characters, not bytes), and counts the rest.
#[test]
fn events_are_read_up_to_a_limit_and_cut_to_a_length() {
    let mut f = Fixture::new();
    let r = f.run("r");
    let other = f.run("other");
    for i in 0..5 {
        f.store
            .add_event(r, &format!("s{i}ééé"), &format!("{i}: ééé <b>x</b>"))
            .unwrap();
    }
    f.store.add_event(other, "s", "not r's").unwrap();
    assert_eq!(f.store.event_count(r).unwrap(), 5);
    assert_eq!(f.store.event_count(other).unwrap(), 1);
    let head = f.store.events_head(r, 3, 4).unwrap();
    let cut: Vec<(&str, &str)> = head
        .iter()
        .map(|e| (e.source.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(cut, [("s0éé", "0: é"), ("s1éé", "1: é"), ("s2éé", "2: é")]);
    let all = f.store.events(r).unwrap();
    assert_eq!(
        head.iter().map(|e| e.ts_ms).collect::<Vec<_>>(),
        all[..3].iter().map(|e| e.ts_ms).collect::<Vec<_>>()
    );
    assert_eq!(f.store.events_head(r, 10, 1000).unwrap(), all);
    assert!(f.store.events_head(r, 0, 10).unwrap().is_empty());
}
