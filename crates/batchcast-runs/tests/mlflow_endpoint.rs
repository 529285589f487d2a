//! The local MLflow endpoint with real sockets: a client that stops in the
//! middle of a request (a trainer paused by SIGSTOP while it logs) holds up
//! neither the other clients nor the endpoint's shutdown.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use batchcast_runs::mlflow::Endpoint;
use batchcast_store::test_support;

/// An endpoint on a new store in `dir`, and its `host:port`.
fn started(dir: &std::path::Path) -> (Endpoint, String) {
    let endpoint = Endpoint::start(&dir.join("runs.db")).unwrap();
    let addr = endpoint.url().trim_start_matches("http://").to_owned();
    (endpoint, addr)
}

/// One request on a fresh connection; the whole response, or an error if
/// none comes within 10 s.
fn request(addr: &str, head: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(head.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn a_client_stalled_mid_request_holds_up_neither_the_others_nor_the_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, addr) = started(dir.path());
    let token = endpoint.token_for(1).unwrap();

    // Its head, and 9 of the 100,000 bytes of its body (a log-batch; a
    // body under 1 KiB the HTTP library reads before handing the request
    // over): then nothing.
    let mut stalled = TcpStream::connect(&addr).unwrap();
    stalled
        .write_all(
            format!(
                "POST /api/2.0/mlflow/runs/log-batch HTTP/1.1\r\nHost: {addr}\r\n\
                 Authorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"run_id\""
            )
            .as_bytes(),
        )
        .unwrap();

    for _ in 0..3 {
        let reply = request(
            &addr,
            &format!(
                "GET /api/2.0/mlflow/experiments/get-by-name?experiment_name=none HTTP/1.1\r\n\
                 Host: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            ),
        )
        .expect("another client was not answered while one stalled");
        assert!(reply.starts_with("HTTP/1.1 "), "{reply}");
        assert!(reply.contains("RESOURCE_DOES_NOT_EXIST"), "{reply}");
    }

    let (done, stopped) = mpsc::channel();
    std::thread::spawn(move || {
        drop(endpoint);
        let _ = done.send(());
    });
    stopped
        .recv_timeout(Duration::from_secs(10))
        .expect("stopping the endpoint waited for the stalled client");
    drop(stalled);
}

/// A POST of `body` to `api` (below /api/2.0/mlflow/) with secret
/// `token`; status and body.
fn post(addr: &str, token: &str, api: &str, body: &str) -> (u16, String) {
    let reply = request(
        addr,
        &format!(
            "POST /api/2.0/mlflow/{api} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .expect("no reply");
    let status = reply
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {reply}"));
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// Two collocated jobs log at once; one names a run the store does not
/// hold. It is told 404, and the other job keeps every point it logged.
#[test]
fn an_unknown_run_id_is_refused_and_costs_no_other_run_a_point() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let endpoint = Endpoint::start(&path).unwrap();
    let addr = endpoint.url().trim_start_matches("http://").to_owned();
    let unknown_id = 999;
    // A secret for the run, so that the call reaches the run-id check.
    let (mine, theirs) = (
        endpoint.token_for(1).unwrap(),
        endpoint.token_for(unknown_id).unwrap(),
    );

    let (status, body) = post(&addr, &mine, "runs/create", r#"{"experiment_id":"0"}"#);
    assert_eq!(status, 200, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let good = created["run"]["info"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let unknown = batchcast_runs::mlflow::mlflow_run_id(unknown_id);

    let mut refused = Vec::new();
    for step in 0..30 {
        let metric = |run: &str| {
            format!(
                r#"{{"run_id":"{run}","key":"loss","value":0.5,"step":{step},"timestamp":{step}}}"#
            )
        };
        let (status, body) = post(&addr, &mine, "runs/log-metric", &metric(&good));
        assert_eq!(status, 200, "{body}");
        if step % 10 == 0 {
            refused.push(post(&addr, &theirs, "runs/log-metric", &metric(&unknown)));
            refused.push(post(
                &addr,
                &theirs,
                "runs/log-batch",
                &format!(r#"{{"run_id":"{unknown}","metrics":[{{"key":"x","value":1,"step":0,"timestamp":0}}]}}"#),
            ));
            refused.push(post(
                &addr,
                &theirs,
                "runs/log-parameter",
                &format!(r#"{{"run_id":"{unknown}","key":"lr","value":"0.1"}}"#),
            ));
        }
    }
    drop(endpoint);

    let store = batchcast_runs::Store::open_read_only(&path).unwrap();
    let id = batchcast_runs::mlflow::run_from_mlflow_id(&good).unwrap();
    assert_eq!(store.metric(id, "loss", None, 100).unwrap().len(), 30);
    for (status, body) in refused {
        assert_eq!(status, 404, "{body}");
        assert!(body.contains("RESOURCE_DOES_NOT_EXIST"), "{body}");
    }
}

/// A client that sends a 64 MB request line is cut off after 16 KiB (431,
/// or a reset while it is still sending), not buffered, and the endpoint
/// goes on answering others.
#[test]
fn a_64_mb_request_line_is_cut_off_not_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, addr) = started(dir.path());
    let token = endpoint.token_for(1).unwrap();
    let before = test_support::peak_rss().unwrap();
    let begun = std::time::Instant::now();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Sent a MiB at a time: the test itself holds no 64 MB line.
    let piece = vec![b'a'; 1 << 20];
    let sent = s.write_all(b"GET /").and_then(|()| {
        for _ in 0..64 {
            s.write_all(&piece)?;
        }
        s.write_all(b" HTTP/1.1\r\n")
    });
    let mut answer = String::new();
    let read = s.read_to_string(&mut answer);
    let peak = test_support::peak_rss().unwrap();
    println!(
        "64 MB request line: peak RSS {} MiB before, {} MiB after",
        before >> 20,
        peak >> 20
    );
    assert!(
        sent.is_err() || read.is_err() || answer.starts_with("HTTP/1.1 431"),
        "{:?}",
        answer.chars().take(200).collect::<String>()
    );
    assert!(
        begun.elapsed() < Duration::from_secs(10),
        "{:?}",
        begun.elapsed()
    );
    assert!(
        peak < before + (32 << 20),
        "grew by {} MiB",
        (peak - before) >> 20
    );
    let reply = request(
        &addr,
        &format!(
            "GET /api/2.0/mlflow/experiments/get-by-name?experiment_name=none HTTP/1.1\r\n\
             Host: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        ),
    )
    .unwrap();
    assert!(reply.contains("RESOURCE_DOES_NOT_EXIST"), "{reply}");
}

/// A client that never finishes its headers is closed after 10 s, not
/// kept (with its thread) for ever.
#[test]
fn a_client_that_never_finishes_its_headers_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_endpoint, addr) = started(dir.path());
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"POST /api/2.0/mlflow/runs/log-metric HTTP/1.1\r\nHost: 127.0.0.1")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let begun = std::time::Instant::now();
    let mut buf = [0u8; 256];
    let closed = match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(closed, "kept open for {:?}", begun.elapsed());
    assert!(
        begun.elapsed() < Duration::from_secs(15),
        "{:?}",
        begun.elapsed()
    );
}
