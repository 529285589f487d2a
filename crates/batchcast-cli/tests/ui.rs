//! `batchcast ui` as a user starts it: what it prints, and refusing to
//! start where it cannot listen.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use common::{assert_says, batchcast, Fail};

/// A running `batchcast ui` and the address it printed; killed when
/// dropped.
struct Ui {
    child: Child,
    line: String,
}

impl Ui {
    /// Starts `batchcast ui --port 0 ARGS --store STORE`; returns once it
    /// printed its address.
    fn start(args: &[&str], store: &Path) -> Ui {
        let mut child = batchcast()
            .args(["ui", "--port", "0"])
            .args(args)
            .arg("--store")
            .arg(store)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let line = line.trim().to_string();
        Ui { child, line }
    }

    /// The port and token of the address it printed, on `host`.
    fn port_and_token(&self, host: &str) -> (u16, &str) {
        let (port, token) = self
            .line
            .strip_prefix(&format!("batchcast ui: http://{host}:"))
            .and_then(|r| r.split_once("/?token="))
            .unwrap_or_else(|| panic!("no address with a token: {}", self.line));
        (port.parse().unwrap(), token)
    }

    /// Stops it; what it wrote to stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let mut err = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            stderr.read_to_string(&mut err).unwrap();
        }
        err
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An empty run store in a temporary folder, which lives as long as the
/// `TempDir` returned with it.
fn empty_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    batchcast_runs::Store::open(&store).unwrap();
    (dir, store)
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
    let (_dir, store) = empty_store();
    let ui = Ui::start(&["--host", "0.0.0.0"], &store);
    let (port, token) = ui.port_and_token("0.0.0.0");
    assert_eq!(token.len(), 32);
    assert!(get(port, "/").starts_with("HTTP/1.1 403"));
    assert!(get(port, &format!("/?token={token}")).starts_with("HTTP/1.1 200"));
    let err = ui.stop();
    assert_says(&err, "warning: serving the run store on 0.0.0.0");
}

#[test]
fn a_missing_store_is_said_at_start_and_the_server_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("none.sqlite");
    let ui = Ui::start(&[], &store);
    let (port, token) = ui.port_and_token("127.0.0.1");
    let page = get(port, &format!("/?token={token}"));
    assert!(
        page.starts_with("HTTP/1.1 503") && page.contains("no run store at"),
        "{page}"
    );
    let err = ui.stop();
    assert_says(&err, "warning: no run store at");
}

/// On loopback too, another local user without the printed address reads
/// nothing; `--no-token` turns that off, and only on loopback.
#[test]
fn on_loopback_the_printed_address_carries_a_token_unless_no_token() {
    let (_dir, store) = empty_store();
    let ui = Ui::start(&[], &store);
    let (port, token) = ui.port_and_token("127.0.0.1");
    assert_eq!(token.len(), 32);
    let page = get(port, "/");
    assert!(page.starts_with("HTTP/1.1 403"), "{page}");
    let page = get(port, &format!("/?token={token}"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains(&format!(
        "batchcast_token_{port}={token}; Path=/; HttpOnly; SameSite=Strict"
    )));

    let open = Ui::start(&["--no-token"], &store);
    let port: u16 = open
        .line
        .strip_prefix("batchcast ui: http://127.0.0.1:")
        .and_then(|r| r.strip_suffix('/'))
        .expect(&open.line)
        .parse()
        .unwrap();
    assert!(get(port, "/").starts_with("HTTP/1.1 200"));

    let err = batchcast()
        .args("ui --port 0 --host 0.0.0.0 --no-token --store".split_whitespace())
        .arg(&store)
        .fail();
    assert_says(&err, "--no-token is refused on 0.0.0.0");
}

#[test]
fn a_port_in_use_fails_with_the_address_and_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let err = batchcast()
        .args(["ui", "--store", "x.sqlite", "--port", &port])
        .fail();
    assert_says(
        &err,
        &format!("error: cannot serve the dashboard on 127.0.0.1:{port}"),
    );
    assert_says(&err, "--port");
}
