//! Events on the charts' timeline, and workloads compared by a metric
//! against its step: what `/api/series` and the experiment page send.

mod common;

use batchcast_store::{MetricPoint, RunId, Store};
use common::{assert_says, get, served, xs, Made};

const TRIGGER: &str =
    "trigger amount=300 fired (#1) before epoch 2: 310 samples arrived since the last";
const GREW: &str = "epoch 2: 310 new samples, 1310 per epoch from now on";

/// The shared producer's run (`data`) records a trigger and new data, a
/// shared trainer a consumer's event; every trainer logs `accuracy` at the
/// samples it trained (its step).
fn record(path: &std::path::Path, m: &Made) {
    let mut s = Store::open(path).unwrap();
    let data = m.runs[4];
    s.add_event(data, "serve", TRIGGER).unwrap();
    s.add_event(data, "serve", GREW).unwrap();
    s.add_event(m.runs[2], "consumer", "reattached at epoch 2, row 64")
        .unwrap();
    for (i, &run) in m.runs[..4].iter().enumerate() {
        let start = s.run(run).unwrap().run.start_ms.unwrap();
        let points: Vec<MetricPoint> = (0..5i64)
            .map(|e| MetricPoint {
                run_id: run,
                key: "accuracy".into(),
                step: 400 * (e + 1),
                ts_ms: start + 1000 * (e + 1),
                value: 0.5 + 0.05 * e as f64 + 0.01 * i as f64,
            })
            .collect();
        s.insert_metrics(&points).unwrap();
    }
}

fn markers_of(j: &serde_json::Value, run: RunId) -> Vec<(i64, String, String)> {
    j["markers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["run"] == run)
        .map(|m| {
            (
                m["from"].as_i64().unwrap(),
                m["source"].as_str().unwrap().to_string(),
                m["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_trainers_chart_marks_its_own_events_and_its_producers() {
    let (_dir, path, m, addr) = served();
    record(&path, &m);
    let (shared, independent, data) = (m.runs[2], m.runs[0], m.runs[4]);
    let r = get(
        addr,
        &format!("/api/series?runs={shared},{independent}&key=accuracy&x=step"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    // the shared trainer: its consumer event and its producer's two events
    let mut got = markers_of(&j, shared);
    got.sort();
    let mut want = vec![
        (
            shared,
            "consumer".into(),
            "reattached at epoch 2, row 64".into(),
        ),
        (data, "serve".into(), TRIGGER.into()),
        (data, "serve".into(), GREW.into()),
    ];
    want.sort();
    assert_eq!(got, want);
    // the independent trainer has no producer: only its own event
    assert_eq!(
        markers_of(&j, independent),
        vec![(
            independent,
            "gpu".into(),
            "NVML unavailable: no GPU here".into()
        )]
    );
    assert_eq!(j["markers_left_off"], 0);
    // each marker's time, and its place on the run's elapsed time
    let store = Store::open_read_only(&path).unwrap();
    let events = store.events(data).unwrap();
    let start = store.run(shared).unwrap().run.start_ms.unwrap();
    for mk in j["markers"].as_array().unwrap() {
        if mk["from"] == data {
            let e = events
                .iter()
                .find(|e| e.message == mk["message"].as_str().unwrap())
                .unwrap();
            assert_eq!(mk["ts_ms"], e.ts_ms);
            assert_eq!(
                mk["elapsed"].as_f64().unwrap(),
                (e.ts_ms - start) as f64 / 1000.0
            );
        }
    }
    // the curves: accuracy against the samples trained, with their workload
    let series = j["series"].as_array().unwrap();
    assert_eq!(series.len(), 2);
    assert_eq!(series[0]["workload"], "shared");
    assert_eq!(series[1]["workload"], "independent");
    assert_eq!(series[0]["workload_id"], m.shared);
    assert_eq!(series[1]["workload_id"], m.independent);
    assert_eq!(xs(&series[0]), vec![400.0, 800.0, 1200.0, 1600.0, 2000.0]);
    // the producer's own chart marks its events once, as its own
    let j = get(
        addr,
        &format!("/api/series?runs={data}&key=proc%2Fcpu_percent"),
    )
    .json();
    assert_eq!(
        markers_of(&j, data),
        vec![
            (data, "serve".into(), TRIGGER.into()),
            (data, "serve".into(), GREW.into())
        ]
    );
    // live updates carry the markers too
    let j = get(
        addr,
        &format!(
            "/api/series?runs={shared}&key=accuracy&after={}",
            i64::MAX / 2
        ),
    )
    .json();
    assert_eq!(markers_of(&j, shared).len(), 3);
    assert!(j["series"][0]["points"].as_array().unwrap().is_empty());
}

/// A chart sends at most 2,000 markers and counts the rest; a shared
/// producer's events come once, with the first of its trainers charted,
/// not once per trainer.
#[test]
fn markers_are_bounded_and_the_rest_counted() {
    let (_dir, path, m, addr) = served();
    let s = Store::open(&path).unwrap();
    let data = m.runs[4];
    for i in 0..1_500 {
        s.add_event(data, "serve", &format!("epoch {i}: 1 new samples"))
            .unwrap();
    }
    s.add_event(data, "serve", &"x".repeat(5_000)).unwrap();
    let (a, b) = (m.runs[2], m.runs[3]);
    for run in [a, b] {
        for i in 0..600 {
            s.add_event(run, "consumer", &format!("note {i}")).unwrap();
        }
    }
    let j = get(
        addr,
        &format!("/api/series?runs={a},{b}&key=proc%2Fcpu_percent"),
    )
    .json();
    let sent = j["markers"].as_array().unwrap();
    assert_eq!(sent.len(), 2_000);
    // a: 1,501 of its producer's and 499 of its own sent, 101 not; b: its
    // 600 counted, the producer's not again
    assert_eq!(j["markers_left_off"], 101 + 600);
    assert!(sent.iter().all(|mk| mk["run"] == a));
    assert_eq!(sent.iter().filter(|mk| mk["from"] == data).count(), 1_501);
    // oldest first, long messages cut
    let ts: Vec<i64> = sent
        .iter()
        .map(|mk| mk["ts_ms"].as_i64().unwrap())
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    let long = sent
        .iter()
        .find(|mk| mk["message"].as_str().unwrap().starts_with('x'))
        .unwrap();
    assert_eq!(long["message"].as_str().unwrap().len(), 300);
    // b charted first: the producer's events come with b
    let j = get(
        addr,
        &format!("/api/series?runs={b},{a}&key=proc%2Fcpu_percent"),
    )
    .json();
    let from_data: Vec<_> = j["markers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|mk| mk["from"] == data)
        .collect();
    assert_eq!(from_data.len(), 1_501);
    assert!(from_data.iter().all(|mk| mk["run"] == b));
}

/// A producer's output becomes an event's message: the JSON carries it
/// as it is (the page's script draws it as text), cut to 300 characters
/// (not bytes), and the run page escapes it.
#[test]
fn an_events_markup_is_text_and_its_length_is_counted_in_characters() {
    let (_dir, path, m, addr) = served();
    let s = Store::open(&path).unwrap();
    let (trainer, data) = (m.runs[2], m.runs[4]);
    let markup = "<img src=x onerror=alert(1)>&amp;";
    s.add_event(data, "serve", &format!("{markup}{}", "é".repeat(400)))
        .unwrap();
    s.add_event(trainer, "<b>consumer</b>", markup).unwrap();
    let j = get(
        addr,
        &format!("/api/series?runs={trainer}&key=proc%2Fcpu_percent"),
    )
    .json();
    let mut got = markers_of(&j, trainer);
    got.sort();
    let cut = format!("{markup}{}", "é".repeat(300 - markup.chars().count()));
    let mut want = vec![
        (trainer, "<b>consumer</b>".to_string(), markup.to_string()),
        (data, "serve".to_string(), cut),
    ];
    want.sort();
    assert_eq!(got, want);
    for id in [trainer, data] {
        let html = get(addr, &format!("/runs/{id}")).text();
        assert!(!html.contains("<img"), "{html}");
        assert_says(&html, "&lt;img src=x onerror=alert(1)&gt;&amp;amp;");
    }
}

#[test]
fn an_experiment_compares_its_workloads_training_runs_one_line_each() {
    let (_dir, path, m, addr) = served();
    record(&path, &m);
    let html = get(addr, &format!("/experiments/{}", m.experiment)).text();
    assert_says(&html, "Workloads compared");
    // the training runs (the shared producer's run left out), per workload
    let runs = format!(
        "data-runs=\"{},{},{},{}\"",
        m.runs[0], m.runs[1], m.runs[2], m.runs[3]
    );
    let section = &html[html.find("<section class=\"charts\"").unwrap()..];
    assert_says(section, &runs);
    assert_says(section, "data-mode=\"workload\"");
    assert_says(section, "&quot;accuracy&quot;");
    // other pages draw a line per run
    let html = get(addr, &format!("/workloads/{}", m.shared)).text();
    assert!(html.contains("<section class=\"charts\"") && !html.contains("data-mode="));
}

#[test]
fn a_trainers_run_page_links_its_producers_events() {
    let (_dir, path, m, addr) = served();
    let html = get(addr, &format!("/runs/{}", m.runs[2])).text();
    assert!(!html.contains("producer-events"), "{html}");
    record(&path, &m);
    let html = get(addr, &format!("/runs/{}", m.runs[2])).text();
    let note = format!(
        "shared producer recorded 2 events (triggers, new data, a resumed stream): <a href=\"/runs/{0}\">run #{0}</a>",
        m.runs[4]
    );
    assert_says(&html, &note);
    assert_says(&html, "reattached at epoch 2, row 64");
    // the producer's own page lists them, with no such note
    let html = get(addr, &format!("/runs/{}", m.runs[4])).text();
    assert!(
        html.contains(TRIGGER) && !html.contains("producer-events"),
        "{html}"
    );
    // a run of an independent workload has no producer
    let html = get(addr, &format!("/runs/{}", m.runs[0])).text();
    assert!(!html.contains("producer-events"), "{html}");
}
