//! What a user can get wrong: malformed requests, a missing or foreign
//! store, a foreign Host, a missing token. Clear answers, no crash.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use batchcast_ui::UiConfig;
use common::{assert_says, filled, get, make_store, request, serve, serve_with, served};

#[test]
fn malformed_requests_get_4xx_with_a_reason_and_the_server_goes_on() {
    let (_dir, _, m, addr) = served();
    let run = m.runs[0];
    let many: Vec<String> = (1..=51).map(|i| i.to_string()).collect();
    let long = "a".repeat(9000);
    let cases: Vec<(String, u16, &str)> = vec![
        ("/runs/abc".into(), 400, "positive integer"),
        ("/runs/-3".into(), 400, "positive integer"),
        (
            "/runs/99999999999999999999999".into(),
            400,
            "positive integer",
        ),
        ("/runs/9999".into(), 404, "run 9999 not found"),
        ("/workloads/0".into(), 400, "positive integer"),
        ("/experiments/777".into(), 404, "experiment 777 not found"),
        ("/experiments/777/collocation".into(), 404, "not found"),
        (format!("/runs/{run}/log/stdin"), 404, "stdout or stderr"),
        ("/nothing/here".into(), 404, "no page at /nothing/here"),
        ("/static/..%2Fsrc%2Flib.rs".into(), 404, "no page"),
        ("/?status=SLEEPING".into(), 400, "status must be"),
        (format!("/?q={}", "x".repeat(300)), 400, "at most 200"),
        ("/api/series".into(), 400, "missing runs="),
        (
            format!("/api/series?runs={run}"),
            400,
            "give 1 to 2 metrics",
        ),
        (
            format!("/api/series?runs={run}&key=a&key=b&key=c"),
            400,
            "give 1 to 2 metrics",
        ),
        (
            format!("/api/series?runs={run}&key=nope"),
            400,
            "has the metric \\\"nope\\\"",
        ),
        (
            format!("/api/series?runs={run}&key=%01"),
            400,
            "bad metric name",
        ),
        (
            format!("/api/series?runs={run}&key=proc%2Fcpu_percent&x=time"),
            400,
            "elapsed or step",
        ),
        (
            format!("/api/series?runs={run}&key=proc%2Fcpu_percent&after=soon"),
            400,
            "milliseconds",
        ),
        (
            format!("/api/series?runs={}&key=proc%2Fcpu_percent", many.join(",")),
            400,
            "at most 50 runs",
        ),
        (
            "/api/series?runs=1,x&key=proc%2Fcpu_percent".into(),
            400,
            "positive integer",
        ),
        (
            "/api/series?runs=9999&key=proc%2Fcpu_percent".into(),
            404,
            "run 9999 not found",
        ),
        (format!("/api/csv?runs={run}&key=nope"), 400, "nope"),
        (format!("/api/series?{long}"), 400, "longer than"),
        ("/api/runs?runs=".into(), 400, "names no run"),
        ("/compare?run=abc".into(), 400, "choose runs"),
        ("/compare?runs=99999".into(), 404, "run 99999 not found"),
    ];
    for (path, status, why) in &cases {
        let r = get(addr, path);
        assert_eq!(r.status, *status, "{path}: {}", r.text());
        assert!(
            r.text().contains(why),
            "{path}: {why:?} not in {}",
            r.text()
        );
        if path.starts_with("/api/") {
            assert!(r.json()["error"].is_string(), "{path}");
        } else {
            assert!(r.text().contains("class=\"error\""), "{path}");
        }
    }
    assert_eq!(get(addr, "/").status, 200, "still serving");
}

#[test]
fn a_missing_store_gives_an_error_page_until_it_exists() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("later.sqlite");
    let addr = serve(&path);
    for p in ["/", "/runs/1", "/api/series?runs=1&key=a"] {
        let r = get(addr, p);
        assert_eq!(r.status, 503, "{p}");
        assert!(r.text().contains("no run store at"), "{p}: {}", r.text());
        assert!(
            r.text().contains("batchcast run"),
            "{p}: says how to make one"
        );
    }
    assert!(get(addr, "/").text().contains("<h2>No run store</h2>"));
    make_store(&path);
    assert_eq!(get(addr, "/").status, 200);
}

#[test]
fn a_foreign_sqlite_file_or_a_text_file_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("other.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "not a database at all, just some words of text here\n".repeat(40),
    )
    .unwrap();
    for file in [&foreign, &text] {
        let addr = serve(file);
        let r = get(addr, "/");
        assert_eq!(r.status, 503, "{}", r.text());
        assert_says(&r.text(), "is not a batchcast run store");
        assert_says(&r.text(), "Not a batchcast run store");
        let r = get(addr, "/api/runs?runs=1");
        assert_eq!(r.status, 503);
        assert_says(
            r.json()["error"].as_str().unwrap(),
            "not a batchcast run store",
        );
    }
    // the dashboard never wrote to it
    let n: i64 = rusqlite::Connection::open(&foreign)
        .unwrap()
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn a_request_naming_another_host_is_refused_when_local() {
    let (_dir, _path, _made, addr) = served();
    let r = request(addr, "/", &[("Host", "attacker.example:8470")]);
    assert_eq!(r.status, 421);
    assert_says(&r.text(), "not this machine");
    assert_eq!(request(addr, "/", &[]).status, 421, "no Host at all");
    let port = addr.port().to_string();
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        assert_eq!(request(addr, "/", &[("Host", &host)]).status, 200, "{host}");
    }
}

#[test]
fn another_address_needs_the_token_on_every_request() {
    let (_dir, path, _made) = filled();
    let config = UiConfig {
        host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        ..UiConfig::local(path, 0)
    };
    let (addr, token) = serve_with(config);
    let token = token.expect("a token off loopback");
    assert_eq!(token.len(), 32);
    let local = std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, addr.port()));
    let host = [("Host", "somewhere.example")];
    let r = request(local, "/", &host);
    assert_eq!(r.status, 403);
    assert_says(&r.text(), "needs its token");
    assert_eq!(request(local, "/?token=wrong", &host).status, 403);
    assert_eq!(request(local, "/api/runs?runs=1", &host).status, 403);
    let r = request(local, &format!("/?token={token}"), &host);
    assert_eq!(r.status, 200);
    let cookie = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert!(cookie.contains(&token) && r.header("set-cookie").unwrap().contains("HttpOnly"));
    let with_cookie = [("Host", "somewhere.example"), ("Cookie", &cookie)];
    assert_eq!(request(local, "/api/runs?runs=1", &with_cookie).status, 200);
    let bearer = format!("Bearer {token}");
    let with_bearer = [("Host", "somewhere.example"), ("Authorization", &bearer)];
    assert_eq!(request(local, "/static/app.js", &with_bearer).status, 200);
}

/// The dashboard on loopback, as `batchcast ui` starts it: another local
/// user without the printed token reads nothing; the printed address sets
/// an HttpOnly SameSite cookie that the later requests carry.
#[test]
fn a_local_dashboard_needs_its_token_by_default() {
    let (_dir, path, _made) = filled();
    let (addr, token) = serve_with(UiConfig::local(&path, 0));
    let token = token.expect("a token on loopback too");
    let host = addr.to_string();
    let host = [("Host", host.as_str())];
    for page in ["/", "/runs/1", "/api/runs?runs=1", "/runs/1/log/stdout"] {
        let r = request(addr, page, &host);
        assert_eq!(r.status, 403, "{page}");
        assert!(!r.text().contains("hello from run"), "{page}");
    }
    assert_eq!(request(addr, "/?token=0123", &host).status, 403);
    let r = request(addr, &format!("/?token={token}"), &host);
    assert_eq!(r.status, 200);
    let set = r.header("set-cookie").unwrap().to_owned();
    let name = format!("batchcast_token_{}=", addr.port());
    assert!(set.starts_with(&name), "{set}");
    assert_says(&set, "HttpOnly");
    assert_says(&set, "SameSite=Strict");
    let cookie = set.split(';').next().unwrap().to_owned();
    let with_cookie = [("Host", host[0].1), ("Cookie", cookie.as_str())];
    let r = request(addr, "/runs/1/log/stdout", &with_cookie);
    assert_eq!(r.status, 200);
    assert_says(&r.text(), "hello from run");
    // Another dashboard's cookie (another port) is not this one's.
    let other = format!("batchcast_token_1={token}");
    let with_other = [("Host", host[0].1), ("Cookie", other.as_str())];
    assert_eq!(request(addr, "/", &with_other).status, 403);
}

/// `Host` is parsed strictly: a name that only starts like loopback is a
/// page of another site (DNS rebinding), and so is a foreign `Origin`.
#[test]
fn a_host_or_origin_that_only_looks_local_is_refused() {
    let (_dir, _path, _made, addr) = served();
    let port = addr.port();
    for host in [
        format!("127.0.0.1:{port}@evil.com"),
        "127.0.0.1:evil.com".to_owned(),
        format!("127.0.0.1:{port}:1"),
        "::1".to_owned(),
    ] {
        assert_eq!(request(addr, "/", &[("Host", &host)]).status, 421, "{host}");
    }
    let local = addr.to_string();
    let r = request(
        addr,
        "/api/runs?runs=1",
        &[("Host", &local), ("Origin", "https://evil.com")],
    );
    assert_eq!(r.status, 403);
    let me = format!("http://{local}");
    let r = request(
        addr,
        "/api/runs?runs=1",
        &[("Host", &local), ("Origin", &me)],
    );
    assert_eq!(r.status, 200);
}

#[test]
fn no_token_off_loopback_is_refused() {
    let config = UiConfig {
        host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        token: false,
        ..UiConfig::local("x.sqlite", 0)
    };
    let err = batchcast_ui::Ui::bind(&config).err().unwrap().to_string();
    assert_says(&err, "--no-token");
    assert_says(&err, "127.0.0.1");
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = batchcast_ui::Ui::bind(&UiConfig::local("x.sqlite", port))
        .err()
        .unwrap()
        .to_string();
    assert_says(&err, &format!("127.0.0.1:{port}"));
    assert_says(&err, "--port");
}

/// Clients that open a connection and never finish their headers (a
/// slowloris, or a port scanner) cannot lock others out: each is closed
/// after the header timeout, before any token is looked at, and a
/// connection past the cap is answered 503 at once instead of waiting.
#[test]
fn clients_that_never_finish_their_headers_are_cut_off_and_capped() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let (_dir, path, _made) = filled();
    let (addr, token) = serve_with(UiConfig {
        header_timeout: Duration::from_secs(1),
        max_connections: 8,
        ..UiConfig::local(&path, 0)
    });
    let token = token.unwrap();
    let slow: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let busy = get(addr, &format!("/?token={token}"));
    assert_eq!(busy.status, 503, "{}", busy.text());
    assert_says(&busy.text(), "too many connections");
    let begun = Instant::now();
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 256];
        // Closed by the server: end of file (or a reset), not a timeout.
        let closed = loop {
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) => break e.kind() != std::io::ErrorKind::WouldBlock,
            }
        };
        assert!(closed, "a connection without headers was kept open");
    }
    assert!(
        begun.elapsed() < Duration::from_secs(4),
        "closed after {:?}",
        begun.elapsed()
    );
    let ok = get(addr, &format!("/?token={token}"));
    assert!(
        ok.status == 200 || ok.status == 303,
        "{} {}",
        ok.status,
        ok.text()
    );
}
