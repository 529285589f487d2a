//! The JSON and CSV endpoints: what they send is what the store holds.

mod common;

use batchcast_store::{keys, Store};
use common::{assert_says, filled, get, serve, served, xs};

#[test]
fn series_are_the_stores_points_on_elapsed_time_or_step() {
    let (_dir, path, m, addr) = served();
    let (a, b) = (m.runs[0], m.runs[2]);
    let r = get(
        addr,
        &format!("/api/series?runs={a},{b}&key=proc%2Fcpu_percent&key=batchcast%2Fsamples_per_s"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["x"], "elapsed");
    assert_eq!(j["live"], false);
    assert_eq!(j["keys"][0][1], "proc/cpu_percent (%)");
    let store = Store::open_read_only(&path).unwrap();
    let series = j["series"].as_array().unwrap();
    assert_eq!(series.len(), 4);
    for s in series {
        let run = s["run"].as_i64().unwrap();
        let key = s["key"].as_str().unwrap();
        let row = store.run(run).unwrap();
        assert_eq!(
            s["label"],
            format!("{}/{} (#{run})", row.workload, row.run.name)
        );
        let want = store.metric(run, key, None, 1000).unwrap();
        let got = s["points"].as_array().unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            let elapsed = (w.ts_ms - row.run.start_ms.unwrap()) as f64 / 1000.0;
            assert_eq!(g[0].as_f64().unwrap(), elapsed);
            assert_eq!(g[1].as_f64().unwrap(), w.value);
            assert_eq!(g[2].as_f64().unwrap(), w.ts_ms as f64);
        }
    }
    // step axis, and only points after a time
    let cut = store.metric(a, keys::PROC_CPU_PERCENT, None, 1000).unwrap()[14].ts_ms;
    let j = get(
        addr,
        &format!("/api/series?runs={a}&key=proc%2Fcpu_percent&x=step&after={cut}"),
    )
    .json();
    assert_eq!(j["x"], "step");
    assert_eq!(xs(&j["series"][0]), vec![15.0, 16.0, 17.0, 18.0, 19.0]);
}

#[test]
fn csv_rows_are_every_point_of_the_chart() {
    let (_dir, path, m, addr) = served();
    let ids = format!("{},{}", m.runs[0], m.runs[1]);
    let r = get(
        addr,
        &format!("/api/csv?runs={ids}&key=batchcast%2Fsamples"),
    );
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/csv"));
    assert_says(r.header("content-disposition").unwrap(), "attachment");
    let text = r.text();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "run_id,experiment,workload,run,key,step,ts_ms,elapsed_s,value"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 40);
    let store = Store::open_read_only(&path).unwrap();
    for (i, &id) in m.runs[..2].iter().enumerate() {
        let want = store
            .metric(id, keys::BATCHCAST_SAMPLES, None, 100)
            .unwrap();
        for (row, w) in rows[i * 20..(i + 1) * 20].iter().zip(&want) {
            let run = store.run(id).unwrap();
            assert_eq!(row[0], id.to_string());
            assert_eq!(row[1], run.experiment);
            assert_eq!(row[2], "independent");
            assert_eq!(row[3], format!("trainer-{}", i + 1));
            assert_eq!(row[4], "batchcast/samples");
            assert_eq!(row[5], w.step.to_string());
            assert_eq!(row[6], w.ts_ms.to_string());
            let elapsed = (w.ts_ms - run.run.start_ms.unwrap()) as f64 / 1000.0;
            assert_eq!(row[7], format!("{elapsed:.3}"));
            assert_eq!(row[8].parse::<f64>().unwrap(), w.value);
        }
    }
}

#[test]
fn run_states_are_served_for_live_tables() {
    let (_dir, _, m, addr) = served();
    let j = get(
        addr,
        &format!("/api/runs?runs={},{}", m.runs[0], m.live_run),
    )
    .json();
    assert_eq!(j[0]["status"], "FINISHED");
    assert_eq!(j[1]["status"], "RUNNING");
    assert!(j[1]["duration"].as_str().unwrap().ends_with(" s"));
}

#[test]
fn a_request_for_more_points_than_the_budget_is_refused_with_a_way_out() {
    let (_dir, path, m) = filled();
    {
        let mut s = Store::open(&path).unwrap();
        let run = m.runs[0];
        let points: Vec<batchcast_store::MetricPoint> = (0..2_000_001)
            .map(|i| batchcast_store::MetricPoint {
                run_id: run,
                key: "big".into(),
                step: i,
                ts_ms: i,
                value: 1.0,
            })
            .collect();
        s.insert_metrics(&points).unwrap();
    }
    let addr = serve(&path);
    for ep in ["series", "csv"] {
        let r = get(addr, &format!("/api/{ep}?runs={}&key=big", m.runs[0]));
        assert_eq!(r.status, 400, "{ep}");
        assert_says(
            r.json()["error"].as_str().unwrap(),
            "batchcast runs export --csv",
        );
    }
    // a narrower ask (newer points only) fits
    let r = get(
        addr,
        &format!(
            "/api/series?runs={}&key=big&x=step&after=1999000",
            m.runs[0]
        ),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["series"][0]["points"].as_array().unwrap().len(),
        1000
    );
}

#[test]
fn the_chart_is_thinned_but_the_csv_has_every_point() {
    let (_dir, path, made) = filled();
    let run = made.runs[0];
    let mut s = Store::open(&path).unwrap();
    let points: Vec<batchcast_store::MetricPoint> = (0..6_000i64)
        .map(|t| batchcast_store::MetricPoint {
            run_id: run,
            key: "many".into(),
            step: t,
            ts_ms: 1_000_000 + t,
            value: t as f64,
        })
        .collect();
    s.insert_metrics(&points).unwrap();
    drop(s);
    let addr = serve(&path);
    let drawn = get(addr, &format!("/api/series?runs={run}&key=many")).json();
    let n = drawn["series"][0]["points"].as_array().unwrap().len();
    assert!((2..=5_000).contains(&n), "drawn {n}");
    let r = get(addr, &format!("/api/csv?runs={run}&key=many"));
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let values: Vec<f64> = text
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(values, (0..6_000).map(|t| t as f64).collect::<Vec<_>>());
}
