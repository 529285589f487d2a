//! Log downloads stream: four clients downloading a long log at once cost
//! the dashboard a few chunks each, not a copy of the log each. A test
//! binary of its own (the dashboard runs in this process), so that the
//! process's peak memory is this test's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use batchcast_store::{LogStream, NewRun, RunStatus, Store};
use batchcast_ui::{Ui, UiConfig};

/// This process's peak resident memory, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Downloads `path`, counting the body's bytes without keeping them;
/// returns the status line and the last bytes received.
fn download(addr: SocketAddr, path: &str) -> (String, usize, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let (mut total, mut last) = (0usize, Vec::new());
    let mut head = Vec::new();
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if head.len() < 4096 {
            head.extend_from_slice(&buf[..n.min(4096)]);
        }
        total += n;
        last.extend_from_slice(&buf[..n]);
        let keep = last.len().saturating_sub(64);
        last.drain(..keep);
        // A slow client: the server must wait for it, not read ahead.
        std::thread::sleep(Duration::from_micros(200));
    }
    let status = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    (status, total, last)
}

#[test]
fn four_downloads_of_a_long_log_hold_no_copy_of_it() {
    const LOG: usize = 96 << 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let id = {
        let mut store = Store::open(&path).unwrap();
        let e = store.experiment("e").unwrap();
        let w = store.workload(e, "w", None, 0).unwrap();
        let new = NewRun {
            name: "long".into(),
            command: vec!["job.sh".into()],
            collocation: "-".into(),
            host: "h".into(),
            ..Default::default()
        };
        let (id, _) = store.add_run(w, &new).unwrap();
        let piece: Vec<u8> = b"0123456789abcdef".repeat(1 << 16);
        for _ in 0..LOG / piece.len() {
            store.append_log(id, LogStream::Stdout, 1, &piece).unwrap();
        }
        store
            .append_log(id, LogStream::Stdout, 2, b"THE END\n")
            .unwrap();
        store
            .finish_run(id, RunStatus::Finished, Some(0), None)
            .unwrap();
        id
    };
    let ui = Ui::bind(&UiConfig {
        token: false,
        ..UiConfig::local(&path, 0)
    })
    .unwrap();
    let addr = ui.addr();
    std::thread::spawn(move || ui.run());
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = peak_rss();
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let p = format!("/runs/{id}/log/stdout");
            std::thread::spawn(move || download(addr, &p))
        })
        .collect();
    for c in clients {
        let (status, total, last) = c.join().unwrap();
        assert!(status.contains(" 200 "), "{status}");
        assert!(total > LOG, "{total} bytes received");
        assert!(
            String::from_utf8_lossy(&last).contains("THE END\n"),
            "{:?}",
            String::from_utf8_lossy(&last)
        );
    }
    let peak = peak_rss();
    println!(
        "4 downloads of a {} MiB log: peak RSS {} MiB before, {} MiB during",
        LOG >> 20,
        before >> 20,
        peak >> 20
    );
    assert!(
        peak < before + (48 << 20),
        "the dashboard grew by {} MiB for 4 downloads of {} MiB",
        (peak - before) >> 20,
        LOG >> 20
    );
}
