//! `batchcast ui` as a user starts it: what it prints, and refusing to
//! start where it cannot listen.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_batchcast");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn off_loopback_it_warns_and_prints_an_address_with_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    batchcast_runs::Store::open(&store).unwrap();
    let child = Command::new(BIN)
        .args(["ui", "--host", "0.0.0.0", "--port", "0", "--store"])
        .arg(&store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let line = first_line(&mut child.0);
    let url = line
        .strip_prefix("batchcast ui: http://0.0.0.0:")
        .expect(&line);
    let (port, token) = url.split_once("/?token=").expect(url);
    let port: u16 = port.parse().unwrap();
    assert_eq!(token.len(), 32);
    assert!(get(port, "/").starts_with("HTTP/1.1 403"));
    assert!(get(port, &format!("/?token={token}")).starts_with("HTTP/1.1 200"));
    let _ = child.0.kill();
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("warning: serving the run store on 0.0.0.0"),
        "{err}"
    );
}

#[test]
fn a_missing_store_is_said_at_start_and_the_server_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("none.sqlite");
    let child = Command::new(BIN)
        .args(["ui", "--port", "0", "--store"])
        .arg(&store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let line = first_line(&mut child.0);
    let (port, token) = line
        .strip_prefix("batchcast ui: http://127.0.0.1:")
        .and_then(|r| r.split_once("/?token="))
        .expect(&line);
    let port: u16 = port.parse().unwrap();
    let page = get(port, &format!("/?token={token}"));
    assert!(
        page.starts_with("HTTP/1.1 503") && page.contains("no run store at"),
        "{page}"
    );
    let _ = child.0.kill();
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("warning: no run store at"), "{err}");
}

/// On loopback too, another local user without the printed address reads
/// nothing; `--no-token` turns that off, and only on loopback.
#[test]
fn on_loopback_the_printed_address_carries_a_token_unless_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    batchcast_runs::Store::open(&store).unwrap();
    let start = |extra: &[&str]| {
        let child = Command::new(BIN)
            .args(["ui", "--port", "0"])
            .args(extra)
            .arg("--store")
            .arg(&store)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut child = Killed(child);
        let line = first_line(&mut child.0);
        (child, line)
    };
    let (_ui, line) = start(&[]);
    let (port, token) = line
        .strip_prefix("batchcast ui: http://127.0.0.1:")
        .and_then(|r| r.split_once("/?token="))
        .expect(&line);
    let port: u16 = port.parse().unwrap();
    assert_eq!(token.len(), 32);
    let page = get(port, "/");
    assert!(page.starts_with("HTTP/1.1 403"), "{page}");
    let page = get(port, &format!("/?token={token}"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains(&format!(
        "batchcast_token_{port}={token}; Path=/; HttpOnly; SameSite=Strict"
    )));

    let (_open, line) = start(&["--no-token"]);
    let port: u16 = line
        .strip_prefix("batchcast ui: http://127.0.0.1:")
        .and_then(|r| r.strip_suffix('/'))
        .expect(&line)
        .parse()
        .unwrap();
    assert!(get(port, "/").starts_with("HTTP/1.1 200"));

    let out = Command::new(BIN)
        .args([
            "ui",
            "--port",
            "0",
            "--host",
            "0.0.0.0",
            "--no-token",
            "--store",
        ])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-token is refused on 0.0.0.0"), "{err}");
}

#[test]
fn a_port_in_use_fails_with_the_address_and_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = Command::new(BIN)
        .args(["ui", "--store", "x.sqlite", "--port", &port])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "error: cannot serve the dashboard on 127.0.0.1:{port}"
        )) && err.contains("--port"),
        "{err}"
    );
}
