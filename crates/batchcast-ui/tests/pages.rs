//! Every page of the dashboard against a store written by the test.

mod common;

use common::{assert_says, filled, get, serve, served};

#[test]
fn the_experiment_list_names_experiments_and_search_finds_runs_by_parameter() {
    let (_dir, _, m, addr) = served();
    let r = get(addr, "/");
    assert_eq!(r.status, 200);
    let html = r.text();
    assert_says(
        &html,
        &format!("href=\"/experiments/{}\">sharing</a>", m.experiment),
    );
    assert_says(&html, ">live</a>");
    assert_says(&html, "/static/app.js");
    assert_says(&html, "/static/style.css");
    // runs whose parameters say lr=0.2: trainer-2 of both workloads
    let r = get(addr, "/?q=lr%3D0.2");
    let html = r.text();
    assert_eq!(r.status, 200);
    assert_says(&html, "Matching runs (2)");
    assert_says(&html, &format!("href=\"/runs/{}\"", m.runs[1]));
    assert_says(&html, &format!("href=\"/runs/{}\"", m.runs[3]));
    assert!(!html.contains(&format!("href=\"/runs/{}\"", m.runs[0])));
    // by status: the one RUNNING run
    let html = get(addr, "/?status=RUNNING").text();
    assert_says(&html, "Matching runs (1)");
    assert_says(&html, ">going</a>");
}

#[test]
fn an_experiment_shows_its_workloads_with_their_runs() {
    let (_dir, _, m, addr) = served();
    let r = get(addr, &format!("/experiments/{}", m.experiment));
    assert_eq!(r.status, 200);
    let html = r.text();
    let ind = html
        .find(&format!("/workloads/{}\">independent", m.independent))
        .unwrap();
    let sh = html
        .find(&format!("/workloads/{}\">shared", m.shared))
        .unwrap();
    assert!(ind < sh);
    assert_says(&html, "own loaders (independent)");
    assert_says(
        &html,
        "shared pipeline: <code>batchcast serve --synthetic</code>",
    );
    assert_eq!(
        html.matches("class=\"status finished\"").count(),
        5,
        "{html}"
    );
    assert_says(&html, "<td>CPU</td>");
    assert_says(&html, "lr=0.1");
    // filtered to one run
    let html = get(addr, &format!("/experiments/{}?q=data", m.experiment)).text();
    assert_eq!(
        html.matches("class=\"status finished\"").count(),
        1,
        "{html}"
    );
}

#[test]
fn a_workload_page_charts_its_runs() {
    let (_dir, path, m, addr) = served();
    let html = get(addr, &format!("/workloads/{}", m.shared)).text();
    let runs = format!("data-runs=\"{},{},{}\"", m.runs[2], m.runs[3], m.runs[4]);
    assert_says(&html, &runs);
    assert_says(&html, "batchcast/samples_per_s");
    assert_says(&html, "proc/cpu_percent");
    assert_says(&html, "data-defaults=\"[&quot;batchcast/samples_per_s&quot;,&quot;batchcast/data_wait_share&quot;]\"");
    assert_says(&html, "data-live=\"0\"");
    // the live experiment's workload polls
    let live = batchcast_store::Store::open_read_only(&path)
        .unwrap()
        .run(m.live_run)
        .unwrap();
    let html = get(addr, &format!("/workloads/{}", live.run.workload_id)).text();
    assert_says(&html, "No metrics recorded yet");
    assert_says(&html, "class=\"status running\"");
    // a run in progress has its output polled
    let html = get(addr, &format!("/runs/{}", m.live_run)).text();
    let live_log = format!(
        "data-run=\"{}\" data-tail=\"16384\" data-live=\"1\"",
        m.live_run
    );
    assert_says(&html, &live_log);
}

#[test]
fn the_collocation_view_shows_the_compare_table_and_the_speedup() {
    let (_dir, path, m, addr) = served();
    let html = get(addr, &format!("/experiments/{}/collocation", m.experiment)).text();
    let store = batchcast_store::Store::open_read_only(&path).unwrap();
    let rows = batchcast_store::compare::collocation(&store, Some("sharing")).unwrap();
    let speedup = batchcast_store::compare::speedups(&rows);
    assert_eq!(speedup.len(), 1);
    let text = format!(
        "shared vs independent: <b>{:.2}×</b> aggregate samples/s",
        speedup[0].throughput
    );
    assert_says(&html, &text);
    for w in &rows {
        let rate = format!("{:.1}", w.samples_per_s.unwrap());
        assert!(html.contains(&rate), "{rate}");
    }
    assert_says(&html, "<tr class=\"independent\">");
    assert_says(&html, "<tr class=\"shared\">");
    assert_says(&html, "<svg class=\"bars\"");
}

#[test]
fn a_run_page_shows_facts_parameters_environment_events_and_output() {
    let (_dir, _, m, addr) = served();
    let id = m.runs[0];
    let html = get(addr, &format!("/runs/{id}")).text();
    for want in [
        "python train.py --lr 0.1",
        "<th>lr</th><td>0.1</td>",
        "<th>versions.batchcast</th><td>0.1.0</td>",
        "NVML unavailable: no GPU here",
        &format!("hello from run {id}"),
        "a &lt;warning&gt; &amp; more",
        &format!("href=\"/runs/{id}/log/stdout\""),
        "<th>exit code</th><td>0</td>",
        &format!("data-runs=\"{id}\""),
        "data-live=\"0\">hello",
    ] {
        assert_says(&html, want);
    }
}

/// A shared producer's events (as `batchcast run` records them) are
/// listed in order, each with its time since the run started.
#[test]
fn a_run_page_shows_a_producers_events_with_their_time_in_the_run() {
    let (_dir, path, m) = filled();
    let id = m.runs[0];
    let fired = [
        "trigger every-epoch fired (#1) before epoch 1: 0 samples arrived since the last",
        "trigger every-epoch fired (#2) before epoch 2: 0 samples arrived since the last",
    ];
    {
        let s = batchcast_store::Store::open(&path).unwrap();
        for message in fired {
            s.add_event(id, "serve", message).unwrap();
        }
    }
    let addr = serve(&path);
    let html = get(addr, &format!("/runs/{id}")).text();
    let at: Vec<usize> = fired
        .iter()
        .map(|f| {
            let want = format!("<b>serve</b>: {f}</li>");
            html.find(&want)
                .unwrap_or_else(|| panic!("{want:?} not in {html}"))
        })
        .collect();
    assert!(at[0] < at[1], "{html}");
    let item = &html[html[..at[0]].rfind("<li>").unwrap()..at[0]];
    assert_says(item, "<span class=\"elapsed\">+");
}

#[test]
fn the_full_log_downloads_even_when_the_page_shows_its_tail() {
    let (_dir, path, m) = filled();
    let id = m.runs[0];
    let big: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    {
        let mut s = batchcast_store::Store::open(&path).unwrap();
        s.append_log(id, batchcast_store::LogStream::Stdout, 0, big.as_bytes())
            .unwrap();
    }
    let addr = serve(&path);
    let html = get(addr, &format!("/runs/{id}")).text();
    assert!(
        html.contains("last 16 KiB") && html.contains("line 4999") && !html.contains("line 10\n")
    );
    let r = get(addr, &format!("/runs/{id}/log/stdout"));
    assert_eq!(r.status, 200);
    assert_says(
        r.header("content-disposition").unwrap(),
        &format!("run-{id}-stdout.log"),
    );
    assert_eq!(r.text(), format!("hello from run {id}\n{big}"));
    let r = get(addr, &format!("/runs/{id}/log/stdout?tail=10"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-disposition"), Some("inline"));
    assert_eq!(r.text(), "line 4999\n");
    for bad in ["abc", "-1", "1048577"] {
        let r = get(addr, &format!("/runs/{id}/log/stdout?tail={bad}"));
        assert_eq!(r.status, 400, "{bad}");
        assert_says(&r.text(), "tail must be a byte count");
    }
    assert_eq!(
        get(addr, &format!("/runs/{id}/log/stderr")).text(),
        "a <warning> & more\n"
    );
}

#[test]
fn chosen_runs_of_different_workloads_are_charted_together() {
    let (_dir, _, m, addr) = served();
    let html = get(addr, &format!("/experiments/{}", m.experiment)).text();
    assert_says(
        &html,
        &format!("name=\"run\" value=\"{}\" form=\"pick\"", m.runs[0]),
    );
    assert_says(&html, "<form id=\"pick\"");
    let r = get(
        addr,
        &format!("/compare?run={}&run={}", m.runs[0], m.runs[2]),
    );
    assert_eq!(r.status, 200);
    let html = r.text();
    assert_says(&html, &format!("data-runs=\"{},{}\"", m.runs[0], m.runs[2]));
    assert_says(&html, "sharing / independent");
    assert_says(&html, "sharing / shared");
    let r = get(addr, "/compare");
    assert_eq!(r.status, 400);
    assert_says(&r.text(), "tick them in a runs table");
}

#[test]
fn the_pages_own_script_and_style_are_served() {
    let (_dir, _path, _made, addr) = served();
    for (name, ty) in [
        ("app.js", "text/javascript"),
        ("chart.js", "text/javascript"),
        ("style.css", "text/css"),
    ] {
        let r = get(addr, &format!("/static/{name}"));
        assert_eq!(r.status, 200);
        assert!(r.header("content-type").unwrap().starts_with(ty));
        assert!(r.body.len() > 1000);
    }
}

#[test]
fn a_stalls_analysis_shows_its_modes_stalls_and_sharing_on_its_run_page() {
    let (_dir, path, m) = filled();
    let report = serde_json::json!({
        "command": ["python", "train.py", "--prep", "4"],
        "regime": "prep-bound",
        "verdict": "prep-bound: 80% of each step waits for data; one shared pipeline for 2 jobs: 1.9x predicted, 1.8x measured",
        "modes": {
            "synthetic": {"steps_per_s": 200.0, "samples_per_s": 3200.0, "step_s": 0.005, "wait_mean": 0.0,
                          "wait_p50": 0.0, "wait_p95": 0.0, "cpu_per_1000": 0.25},
            "warm": {"steps_per_s": 25.0, "samples_per_s": 400.0, "step_s": 0.04, "wait_mean": 0.0352,
                     "wait_p50": 0.035, "wait_p95": 0.0461, "cpu_per_1000": 1.65}
        },
        "ddp": null,
        "timeshare": {"steps_per_s": 22.0, "samples_per_s": 352.0, "step_s": 0.045, "wait_mean": 0.05,
                      "wait_p50": 0.05, "wait_p95": 0.06, "cpu_per_1000": 1.81, "core": 1},
        "stalls": [{"name": "prep", "per_step_s": 0.035, "share": 0.8}],
        "predictions": [
            {"jobs": 4, "independent": 800.0, "shared": 2000.0, "measured": null},
            {"jobs": 2, "independent": 760.0, "shared": 1444.0,
             "measured": {"independent": 740.0, "shared": 1332.0}}
        ]
    });
    let id = {
        let mut s = batchcast_store::Store::open(&path).unwrap();
        batchcast_store::stalls::record(&mut s, &report).unwrap()
    };
    let addr = serve(&path);
    let html = get(addr, &format!("/runs/{id}")).text();
    let at = html.find("<h2>Data stalls</h2>").expect("a stalls section");
    let section = &html[at..];
    assert_says(section, "1.9x predicted, 1.8x measured");
    assert_says(section, "<tr><th>warm</th><td>25.0</td><td>400.0</td><td>35.2 ms</td><td>35.0 ms</td><td>46.1 ms</td><td>1.65</td></tr>");
    // the two copies on one core, after the modes
    assert_says(section, "<tr><th>timeshared</th><td>22.0</td><td>352.0</td><td>50.0 ms</td><td>50.0 ms</td><td>60.0 ms</td><td>1.81</td></tr>");
    assert_says(
        section,
        "<tr><th>prep</th><td>35.0 ms</td><td>80%</td></tr>",
    );
    // jobs in numeric order; measured beside predicted where measured
    let two = section
        .find("<tr><th>2</th><td>760 [740]</td><td>1444 [1332]</td><td>1.90x [1.80x]</td></tr>")
        .expect("2 jobs");
    let four = section
        .find("<tr><th>4</th><td>800</td><td>2000</td><td>2.50x</td></tr>")
        .expect("4 jobs");
    assert!(two < four);
    // a run that is no analysis has no such section
    let plain = get(addr, &format!("/runs/{}", m.runs[0])).text();
    assert!(!plain.contains("Data stalls"));
}
