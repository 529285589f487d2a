//! Test helpers: a store written through the store's own write API, a
//! dashboard serving it on a real socket, and a tiny HTTP/1.1 client.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use batchcast_store::{keys, LogStream, MetricPoint, NewRun, RunId, RunStatus, Store};
use batchcast_ui::{Ui, UiConfig};

/// Fails, showing `needle` and the whole of `text`, unless `text` holds
/// `needle`.
#[track_caller]
pub fn assert_says(text: &str, needle: &str) {
    assert!(text.contains(needle), "{needle:?} is not in:\n{text}");
}

/// Ids of what [`make_store`] wrote.
pub struct Made {
    pub experiment: i64,
    pub independent: i64,
    pub shared: i64,
    /// independent trainer-1, trainer-2, shared trainer-1, trainer-2, data
    pub runs: Vec<RunId>,
    pub live_run: RunId,
}

/// Samples/s of each run of [`make_store`]: independent runs are slower.
pub fn rate(i: usize) -> f64 {
    if i < 2 {
        1000.0 + 10.0 * i as f64
    } else {
        1600.0 + 10.0 * i as f64
    }
}

/// A store with experiment `sharing` (workloads `independent` and `shared`,
/// finished, 20 points of each metric) and experiment `live` (one run still
/// RUNNING).
pub fn make_store(path: &Path) -> Made {
    let mut s = Store::open(path).unwrap();
    let e = s.experiment("sharing").unwrap();
    let ind = s.workload(e, "independent", None, 0).unwrap();
    let sh = s
        .workload(e, "shared", Some("batchcast serve --synthetic"), 1)
        .unwrap();
    let mut runs = Vec::new();
    for (w, name, lr) in [
        (ind, "trainer-1", "0.1"),
        (ind, "trainer-2", "0.2"),
        (sh, "trainer-1", "0.1"),
        (sh, "trainer-2", "0.2"),
        (sh, keys::DATA_RUN, ""),
    ] {
        let new = NewRun {
            name: name.into(),
            command: vec!["python".into(), "train.py".into(), "--lr".into(), lr.into()],
            params: if lr.is_empty() {
                vec![]
            } else {
                vec![("lr".into(), lr.into())]
            },
            devices: vec![],
            collocation: "-".into(),
            listeners: vec!["process".into()],
            host: "testhost".into(),
            ..Default::default()
        };
        let (id, _) = s.add_run(w, &new).unwrap();
        let env =
            serde_json::json!({"host": "testhost", "versions": {"batchcast": "0.1.0"}, "gpus": []});
        assert!(s.claim_run(id, 1, 1, &env).unwrap());
        runs.push(id);
    }
    for (i, &id) in runs.iter().enumerate() {
        let start = s.run(id).unwrap().run.start_ms.unwrap();
        let mut points = Vec::new();
        for t in 0..20i64 {
            let ts = start + 1000 * (t + 1);
            let mut push = |key: &str, value: f64| {
                points.push(MetricPoint {
                    run_id: id,
                    key: key.into(),
                    step: t,
                    ts_ms: ts,
                    value,
                })
            };
            push(
                keys::PROC_CPU_PERCENT,
                50.0 + (i as f64) * 10.0 + (t % 5) as f64,
            );
            push(keys::PROC_CPU_SECONDS, 0.5 * (t + 1) as f64);
            push(keys::PROC_PSS_BYTES, 1e6 * (i + 1) as f64);
            if i < 4 {
                push(keys::BATCHCAST_SAMPLES_PER_S, rate(i) + t as f64);
                push(keys::BATCHCAST_SAMPLES, rate(i) * (t + 1) as f64);
                push(keys::BATCHCAST_DATA_WAIT_SHARE, 0.5 - 0.1 * i as f64);
            }
        }
        s.insert_metrics(&points).unwrap();
        s.append_log(
            id,
            LogStream::Stdout,
            start,
            format!("hello from run {id}\n").as_bytes(),
        )
        .unwrap();
        s.append_log(id, LogStream::Stderr, start, b"a <warning> & more\n")
            .unwrap();
    }
    s.add_event(runs[0], "gpu", "NVML unavailable: no GPU here")
        .unwrap();
    std::thread::sleep(Duration::from_millis(5)); // runs take some wall time
    for &id in &runs {
        s.finish_run(id, RunStatus::Finished, Some(0), None)
            .unwrap();
    }
    let le = s.experiment("live").unwrap();
    let lw = s.workload(le, "only", None, 0).unwrap();
    let (live_run, _) = s
        .add_run(
            lw,
            &NewRun {
                name: "going".into(),
                collocation: "-".into(),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(s.claim_run(live_run, 1, 1, &serde_json::json!({})).unwrap());
    Made {
        experiment: e,
        independent: ind,
        shared: sh,
        runs,
        live_run,
    }
}

/// A store filled by [`make_store`] in a new temporary directory: the
/// directory (the store lives as long as it does), the store's path and
/// what was written.
pub fn filled() -> (tempfile::TempDir, PathBuf, Made) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let made = make_store(&path);
    (dir, path, made)
}

/// A store made by [`filled`] and a dashboard serving it: also the
/// dashboard's address.
pub fn served() -> (tempfile::TempDir, PathBuf, Made, SocketAddr) {
    let (dir, path, made) = filled();
    let addr = serve(&path);
    (dir, path, made, addr)
}

/// A dashboard on a free loopback port without a token (`--no-token`),
/// serving until the test ends.
pub fn serve(store: &Path) -> SocketAddr {
    serve_with(UiConfig {
        token: false,
        ..UiConfig::local(store, 0)
    })
    .0
}

/// A dashboard with this configuration; its address and token.
pub fn serve_with(config: UiConfig) -> (SocketAddr, Option<String>) {
    let ui = Ui::bind(&config).unwrap();
    let (addr, token) = (ui.addr(), ui.token().map(String::from));
    std::thread::spawn(move || ui.run());
    (addr, token)
}

/// An HTTP response.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The x of each point of one series of an `/api/series` answer.
pub fn xs(series: &serde_json::Value) -> Vec<f64> {
    series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_f64().unwrap())
        .collect()
}

/// `GET path` with `Host: 127.0.0.1:port`.
pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, path, &[("Host", &addr.to_string())])
}

/// `GET path` with these headers (and `Connection: close`).
pub fn request(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

fn parse(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no header end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        let (mut out, mut rest) = (Vec::new(), &body[..]);
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16)
                .unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
            rest = &rest[eol + 4 + n..];
        }
        body = out;
    }
    Resp {
        status,
        headers,
        body,
    }
}
