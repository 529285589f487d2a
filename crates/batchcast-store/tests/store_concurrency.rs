//! The run store shared at once: writers and readers on several threads,
//! runners opening one new store together, and the recorder's commits.

mod common;

use std::sync::{Arc, Barrier};

use batchcast_store::{LogStream, Recorder, Store};
use common::{point, steps_of, Fixture};

/// Four threads record through one recorder while a second recorder (as
/// a second runner would) and a read-only reader use the same file.
#[test]
fn writers_and_readers_share_one_file_from_several_threads() {
    let mut f = Fixture::new();
    let r1 = f.run("one");
    let r2 = f.run("two");
    let Fixture { path, store, .. } = f;
    drop(store);

    const PER_THREAD: i64 = 5_000;
    let rec1 = Recorder::start(&path).unwrap();
    let rec2 = Recorder::start(&path).unwrap();
    let start = Arc::new(Barrier::new(6));
    let mut threads = Vec::new();
    for t in 0..4 {
        let (h, run) = if t % 2 == 0 {
            (rec1.handle(), r1)
        } else {
            (rec2.handle(), r2)
        };
        let start = start.clone();
        threads.push(std::thread::spawn(move || {
            start.wait();
            for i in 0..PER_THREAD {
                assert!(h.metric(point(run, format!("t{t}"), i, i, i as f64)));
            }
        }));
    }
    let reader = {
        let path = path.clone();
        let start = start.clone();
        std::thread::spawn(move || {
            let ro = Store::open_read_only(&path).unwrap();
            start.wait();
            let mut seen = 0;
            // Reads go on while the writers commit; counts only grow.
            for _ in 0..50 {
                let n = ro.metric(r1, "t0", None, usize::MAX).unwrap().len();
                assert!(n >= seen);
                seen = n;
            }
        })
    };
    start.wait();
    for t in threads {
        t.join().unwrap();
    }
    reader.join().unwrap();
    rec1.finish().unwrap();
    rec2.finish().unwrap();

    let ro = Store::open_read_only(&path).unwrap();
    for (run, key) in [(r1, "t0"), (r2, "t1"), (r1, "t2"), (r2, "t3")] {
        let points = ro.metric(run, key, None, usize::MAX).unwrap();
        assert_eq!(points.len() as i64, PER_THREAD, "{key}");
        assert!(points.windows(2).all(|p| p[0].step + 1 == p[1].step));
    }
    assert_eq!(ro.metric_keys(r1).unwrap(), vec!["t0", "t2"]);
    assert_eq!(
        ro.metric(r1, "t0", Some(PER_THREAD - 3), 10).unwrap().len(),
        2,
        "points after a time, for live updates"
    );
}

/// A recorder's points reach the file within its flush period, without
/// the recorder being finished: a runner killed later loses at most that.
#[test]
fn recorded_points_are_committed_within_the_flush_period() {
    let mut f = Fixture::new();
    let r = f.run("r");
    let rec = f.recorder();
    let h = rec.handle();
    h.metric(point(r, "loss", 1, 1, 0.5));
    h.log(r, LogStream::Stdout, 1, b"epoch 1\n".to_vec());
    let deadline = std::time::Instant::now() + batchcast_store::FLUSH_EVERY * 10;
    let ro = Store::open_read_only(&f.path).unwrap();
    loop {
        let n = ro.metric(r, "loss", None, 10).unwrap().len();
        let (log, _) = ro.log(r, LogStream::Stdout, None).unwrap();
        if n == 1 && log == b"epoch 1\n" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not committed within 10 flush periods"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(h);
    rec.finish().unwrap();
}

#[test]
fn a_nan_point_is_told_once_and_never_costs_the_points_beside_it() {
    let mut f = Fixture::new();
    let r = f.run("r");
    let ro = f.record_then_read(|h| {
        for step in 0..10 {
            let loss = if step % 3 == 1 { f64::NAN } else { 1.0 };
            h.metric(point(r, "loss", step, step, loss));
            h.metric(point(r, "acc", step, step, 0.5));
        }
        h.metric(point(r, "grad", 11, 11, f64::INFINITY));
    });
    assert_eq!(ro.metric(r, "acc", None, 100).unwrap().len(), 10);
    let loss = steps_of(&ro.metric(r, "loss", None, 100).unwrap());
    assert_eq!(loss, [0, 2, 3, 5, 6, 8, 9]);
    assert_eq!(ro.last_metric(r, "grad").unwrap(), Some(f64::INFINITY));
    let events = ro.events(r).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].message.contains("\"loss\" was NaN at step 1"),
        "{events:?}"
    );
}

/// Runners started together create one store between them.
#[test]
fn runners_opening_a_new_store_at_once_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (path, start) = (path.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let store = Store::open(&path).unwrap();
                store.experiment(&format!("e{i}")).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        Store::open_read_only(&path)
            .unwrap()
            .experiments()
            .unwrap()
            .len(),
        4
    );
}

/// Writers on their own connections (the runner's recorder, its MLflow
/// endpoint, its main thread) never fail with "database is locked": a
/// transaction that reads before it writes (a log's next sequence number)
/// takes the write lock first, so another writer's commit cannot turn its
/// snapshot stale (which SQLite refuses at once, busy timeout or not).
#[test]
fn writers_that_read_first_never_find_the_store_locked() {
    let mut f = Fixture::new();
    let runs = [f.run("a"), f.run("b")];
    let path = Arc::new(f.path.clone());
    const ROUNDS: usize = 200;
    let start = Arc::new(Barrier::new(runs.len() * 2));
    let mut threads = Vec::new();
    for &r in &runs {
        let (p, s) = (Arc::clone(&path), Arc::clone(&start));
        threads.push(std::thread::spawn(move || {
            let mut store = Store::open(p.as_ref()).unwrap();
            s.wait();
            for i in 0..ROUNDS {
                store
                    .append_log(
                        r,
                        LogStream::Stdout,
                        i as i64,
                        format!("line {i}\n").as_bytes(),
                    )
                    .unwrap();
            }
        }));
        let (p, s) = (Arc::clone(&path), Arc::clone(&start));
        threads.push(std::thread::spawn(move || {
            let mut store = Store::open(p.as_ref()).unwrap();
            s.wait();
            for i in 0..ROUNDS as i64 {
                store
                    .insert_metrics(&[point(r, "loss", i, i, 1.0)])
                    .unwrap();
                store.set_pid(r, i, None).unwrap();
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let ro = Store::open_read_only(path.as_ref()).unwrap();
    for r in runs {
        let (log, _) = ro.log(r, LogStream::Stdout, None).unwrap();
        let want: String = (0..ROUNDS).map(|i| format!("line {i}\n")).collect();
        assert_eq!(String::from_utf8(log).unwrap(), want);
        assert_eq!(ro.metric_len(r, "loss", None).unwrap(), ROUNDS);
    }
}

/// A point the store refuses (a run that does not exist) fails alone: the
/// other points of its commit, another run's among them, are stored.
#[test]
fn a_refused_point_never_costs_the_points_committed_with_it() {
    let mut f = Fixture::new();
    let good = f.run("good");
    let rec = f.recorder();
    let h = rec.handle();
    for step in 0..30 {
        h.metric(point(good, "loss", step, step, 1.0));
        if step == 10 {
            h.metric(point(good + 999, "loss", step, step, 1.0));
        }
    }
    drop(h);
    let finished = rec.finish();
    let ro = Store::open_read_only(&f.path).unwrap();
    assert_eq!(ro.metric(good, "loss", None, 100).unwrap().len(), 30);
    let err = finished
        .expect_err("the refused point is reported")
        .to_string();
    assert!(err.contains("FOREIGN KEY"), "{err}");
}
