//! A store being written (by the runner's own Recorder) while several
//! clients read it: every answer is whole, points only grow, and the last
//! ones show up within a few seconds.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchcast_store::{now_ms, MetricPoint, NewRun, Recorder, RunStatus, Store};
use common::{get, serve};

const POINTS: i64 = 600;

#[test]
fn a_store_written_while_read_gives_whole_growing_answers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let run = {
        let mut s = Store::open(&path).unwrap();
        let e = s.experiment("live").unwrap();
        let w = s.workload(e, "w", None, 0).unwrap();
        let new = NewRun {
            name: "r".into(),
            collocation: "-".into(),
            ..Default::default()
        };
        let (id, _) = s.add_run(w, &new).unwrap();
        assert!(s.claim_run(id, 1, 1, &serde_json::json!({})).unwrap());
        // one point first, so the metric exists for the readers
        s.insert_metrics(&[MetricPoint {
            run_id: id,
            key: "loss".into(),
            step: 0,
            ts_ms: now_ms(),
            value: 0.0,
        }])
        .unwrap();
        id
    };
    let addr = serve(&path);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            let rec = Recorder::start(&path).unwrap();
            let h = rec.handle();
            let start = now_ms();
            for step in 1..POINTS {
                let p = MetricPoint {
                    run_id: run,
                    key: "loss".into(),
                    step,
                    ts_ms: start + step,
                    value: 1.0 / step as f64,
                };
                assert!(h.metric(p));
                if step % 50 == 0 {
                    std::thread::sleep(Duration::from_millis(20)); // a training step's pace
                }
            }
            drop(h);
            rec.finish().unwrap();
            Store::open(&path)
                .unwrap()
                .finish_run(run, RunStatus::Finished, Some(0), None)
                .unwrap();
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|i| {
            let done = done.clone();
            std::thread::spawn(move || {
                let (mut last, mut answers) = (0usize, 0);
                while !done.load(Ordering::Acquire) || answers < 3 {
                    let r = match i {
                        0 => get(addr, &format!("/api/series?runs={run}&key=loss")),
                        1 => get(addr, &format!("/api/csv?runs={run}&key=loss")),
                        _ => get(addr, &format!("/runs/{run}")),
                    };
                    assert_eq!(r.status, 200, "{}", r.text());
                    let n = match i {
                        0 => r.json()["series"][0]["points"].as_array().unwrap().len(),
                        1 => r.text().lines().count() - 1,
                        _ => usize::from(r.text().contains("</html>")),
                    };
                    assert!(n >= last, "points went from {last} to {n}");
                    last = n;
                    answers += 1;
                }
                answers
            })
        })
        .collect();
    writer.join().unwrap();
    // New points reach a reader within a few seconds of being recorded.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let j = get(addr, &format!("/api/series?runs={run}&key=loss")).json();
        let n = j["series"][0]["points"].as_array().unwrap().len();
        if n == POINTS as usize && j["live"] == false {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {n} points, live {}",
            j["live"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() >= 3);
    }
    let j = get(addr, &format!("/api/runs?runs={run}")).json();
    assert_eq!(j[0]["status"], "FINISHED");
}
