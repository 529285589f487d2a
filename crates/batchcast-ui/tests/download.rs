//! Log downloads stream: four clients downloading a long log at once cost
//! the dashboard a few chunks each, not a copy of the log each. A test
//! binary of its own (the dashboard runs in this process), so that the
//! process's peak memory is this test's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use batchcast_store::test_support;
use batchcast_ui::{Ui, UiConfig};

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
    let id = test_support::long_log_store(&path, LOG, b"THE END\n").unwrap();
    let ui = Ui::bind(&UiConfig {
        token: false,
        ..UiConfig::local(&path, 0)
    })
    .unwrap();
    let addr = ui.addr();
    std::thread::spawn(move || ui.run());
    test_support::reset_peak().unwrap();
    let before = test_support::peak_rss().unwrap();
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
    let peak = test_support::peak_rss().unwrap();
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
