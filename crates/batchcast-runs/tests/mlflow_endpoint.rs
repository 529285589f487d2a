//! The local MLflow endpoint with real sockets: a client that stops in the
//! middle of a request (a trainer paused by SIGSTOP while it logs) holds up
//! neither the other clients nor the endpoint's shutdown.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use batchcast_runs::mlflow::Endpoint;

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
    let endpoint = Endpoint::start(&dir.path().join("runs.db")).unwrap();
    let addr = endpoint.url().trim_start_matches("http://").to_owned();

    // Its head, and 9 of the 100,000 bytes of its body (a log-batch; a
    // body under 1 KiB the HTTP library reads before handing the request
    // over): then nothing.
    let mut stalled = TcpStream::connect(&addr).unwrap();
    stalled
        .write_all(
            b"POST /api/2.0/mlflow/runs/log-batch HTTP/1.1\r\nHost: x\r\n\
              Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"run_id\"",
        )
        .unwrap();

    for _ in 0..3 {
        let reply = request(
            &addr,
            "GET /api/2.0/mlflow/experiments/get-by-name?experiment_name=none HTTP/1.1\r\n\
             Host: x\r\nConnection: close\r\n\r\n",
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
