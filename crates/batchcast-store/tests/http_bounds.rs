//! The stack's bounds with real sockets: a server on 127.0.0.1 whose one
//! handler reads its request's body through `read_body`, and a client that
//! writes raw HTTP/1.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use axum::extract::Request;
use batchcast_store::http::{read_body, serve, Busy, Limits};

/// Bytes of a body the handler accepts.
const MAX: u64 = 1024;
/// Serves on a thread of its own until the test ends: each request is
/// answered with the length of its body, or with the status `read_body`
/// refused it with after at most `body_time`.
fn server(max_connections: usize, body_time: Duration) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    std::thread::spawn(move || {
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = axum::Router::new().fallback(move |req: Request| async move {
                match read_body(req, MAX, body_time).await {
                    Ok(body) => format!("{} bytes", body.len()),
                    Err(e) => format!("refused {}", e.status()),
                }
            });
            let limits = Limits {
                header_timeout: Duration::from_secs(2),
                max_head: 8 * 1024,
                max_connections,
                keep_alive: false,
            };
            let busy = Busy {
                content_type: "text/plain",
                body: "busy\n".into(),
            };
            serve(listener, app, limits, busy, std::future::pending()).await;
        });
    });
    addr
}

/// Sends `head` and `body` on a fresh connection; the whole answer.
fn exchange(addr: SocketAddr, head: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn post(len: usize) -> String {
    format!("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len}\r\n\r\n")
}

#[test]
fn a_body_within_the_bound_is_read_whole() {
    let addr = server(4, Duration::from_millis(500));
    let answer = exchange(addr, &post(1000), &[b'x'; 1000]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("1000 bytes"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
}

/// The client sends all of an overlong body before it reads: it still sees
/// the refusal, not a reset.
#[test]
fn an_overlong_body_is_drained_and_refused() {
    let addr = server(4, Duration::from_millis(500));
    let answer = exchange(addr, &post(1 << 20), &vec![b'x'; 1 << 20]);
    assert!(answer.ends_with("refused 413"), "{answer}");
}

#[test]
fn a_chunked_body_is_refused_unread() {
    let addr = server(4, Duration::from_millis(500));
    let answer = exchange(
        addr,
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"3\r\nabc\r\n0\r\n\r\n",
    );
    assert!(answer.ends_with("refused 411"), "{answer}");
}

/// A client that stops halfway through its body is answered when the
/// handler's time is up, not held for ever.
#[test]
fn a_body_that_stops_coming_is_refused_in_time() {
    let addr = server(4, Duration::from_millis(500));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(post(100).as_bytes()).unwrap();
    s.write_all(&[b'x'; 10]).unwrap();
    let begun = Instant::now();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.ends_with("refused 408"), "{answer}");
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "{:?}",
        begun.elapsed()
    );
}

/// A connection past the limit is answered with the server's own message
/// at once, while the one before it is still being served.
#[test]
fn a_connection_past_the_limit_is_answered_busy() {
    let addr = server(1, Duration::from_secs(60));
    let mut first = TcpStream::connect(addr).unwrap();
    // Its head and part of its body: it holds the one slot for a minute
    // (connections are accepted in the order they came).
    first.write_all(post(100).as_bytes()).unwrap();
    first.write_all(b"x").unwrap();
    let begun = Instant::now();
    let answer = exchange(addr, &post(0), b"");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "{:?}",
        begun.elapsed()
    );
    assert!(answer.ends_with("busy\n"), "{answer}");
    assert!(answer.contains("Content-Type: text/plain"), "{answer}");
    drop(first);
}
