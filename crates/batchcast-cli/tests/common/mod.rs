//! Test harness: runs the real `batchcast` binary in a private socket
//! directory and reads the JSON lines it prints. Waiting is always for a
//! line (the process's own signal) or an exit; the deadlines only turn a
//! hang into a failure.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use batchcast::Event;
use serde_json::Value;

/// Generous bound for anything that should happen "at once".
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Arguments of a synthetic producer that outlasts any test unless killed:
/// 100 epochs of 100,000 samples in batches of 10.
pub const UNTIL_KILLED: &str = "--samples 100000 --batch-size 10 --epochs 100";

/// The messages of the events `source` recorded for run `run`, in order.
pub fn events_from(store: &batchcast_runs::Store, run: i64, source: &str) -> Vec<String> {
    store
        .events(run)
        .unwrap()
        .into_iter()
        .filter(|e| e.source == source)
        .map(|e| e.message)
        .collect()
}

/// A consumer in this process of producer `name` in `dir`, which waits
/// [`DEADLINE`] for it.
pub fn connect(name: &str, dir: PathBuf) -> batchcast::Consumer {
    let opts = batchcast::ConsumerOptions {
        connect_timeout: Some(DEADLINE),
        dir: Some(dir),
        ..Default::default()
    };
    batchcast::Consumer::connect(name, opts, &mut || false).unwrap()
}

/// What a consumer in this process saw of a producer, read to its end.
#[derive(Debug, Default, PartialEq)]
pub struct Seen {
    /// A line per event, in order: `start EPOCH Some(SAMPLES)`, `end EPOCH
    /// SAMPLES`, `trigger ID #SEQ epoch EPOCH samples SAMPLES`.
    pub events: Vec<String>,
    /// The labels (each batch's second array, of i64s) of each epoch.
    pub labels: Vec<Vec<i64>>,
    /// The arrivals of each trigger, in order.
    pub arrivals: Vec<Option<(f64, f64)>>,
}

/// Reads producer `name` in `dir` to its end and returns what it saw;
/// `each` is shown every event first, with what was seen before it (a
/// batch's lease is held while `each` runs).
pub fn read_to_end(
    name: &str,
    dir: PathBuf,
    mut each: impl FnMut(&batchcast::Consumer, &Event, &Seen),
) -> Seen {
    let mut consumer = connect(name, dir);
    let mut seen = Seen::default();
    loop {
        let event = consumer.next_event(&mut || false).unwrap();
        each(&consumer, &event, &seen);
        match event {
            Event::EpochStart(i) => {
                seen.events
                    .push(format!("start {} {:?}", i.epoch, i.samples));
                seen.labels.push(Vec::new());
            }
            Event::Batch(b) => {
                let labels = b.leaves()[1]
                    .bytes()
                    .chunks_exact(8)
                    .map(|c| i64::from_ne_bytes(c.try_into().unwrap()));
                seen.labels.last_mut().unwrap().extend(labels);
            }
            Event::EpochEnd { epoch, samples } => {
                seen.events.push(format!("end {epoch} {samples}"));
            }
            Event::Trigger(t) => {
                seen.events.push(format!(
                    "trigger {} #{} epoch {} samples {}",
                    t.id, t.seq, t.epoch, t.samples
                ));
                seen.arrivals.push(t.arrivals);
            }
            Event::Finished(_) => return seen,
        }
    }
}

/// How many of `labels` are each of the labels `0..classes`.
pub fn per_label(labels: &[i64], classes: usize) -> Vec<usize> {
    let mut per = vec![0; classes];
    for &l in labels {
        per[l as usize] += 1;
    }
    per
}

/// The `batchcast` binary under test, as a command to add arguments to.
pub fn batchcast() -> Command {
    Command::new(env!("CARGO_BIN_EXE_batchcast"))
}

/// Insists that `text` (a command's output or a line of it) says `needle`;
/// a failure shows both.
#[track_caller]
pub fn assert_says(text: &str, needle: &str) {
    assert!(text.contains(needle), "expected {needle:?} in:\n{text}");
}

/// Runs a command to its end and insists that it succeeded.
pub trait Succeed {
    /// The command's output; panics with its stderr if it failed.
    fn succeed(&mut self) -> Output;
}

impl Succeed for Command {
    fn succeed(&mut self) -> Output {
        let out = self.output().unwrap();
        assert!(
            out.status.success(),
            "{:?} failed: {}",
            self,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// An ImageFolder of generated JPEGs in `dir`: `classes` classes of
/// `per_class` images whose long side lies in `long_side`.
pub fn jpeg_dataset(
    dir: &Path,
    classes: usize,
    per_class: usize,
    long_side: (u32, u32),
) -> PathBuf {
    let config = batchcast_pipeline::GenerateConfig {
        classes,
        images_per_class: per_class,
        long_side,
        ..batchcast_pipeline::GenerateConfig::default()
    };
    batchcast_pipeline::generate_jpeg_dataset(dir, &config, &|_, _| {})
        .unwrap()
        .path
}

/// The arguments of `serve --name NAME --data DATA`: 16-pixel crops in
/// batches of 4, for `consumers` consumers, as JSON lines. More options may
/// be added after them.
pub fn serve_data<'a>(name: &'a str, data: &'a str, consumers: &'a str) -> Vec<&'a str> {
    vec![
        "serve",
        "--name",
        name,
        "--data",
        data,
        "--batch-size",
        "4",
        "--image-size",
        "16",
        "--consumers",
        consumers,
        "--json",
    ]
}

/// Runs a command to its end and insists that it failed as `batchcast`
/// fails: status 1 on a user's error, 2 on arguments its parser refuses.
pub trait Fail {
    /// The command's stderr; panics unless it exited with status 1.
    fn fail(&mut self) -> String {
        self.fail_with(1)
    }

    /// The command's stderr; panics unless it exited with status `code`.
    fn fail_with(&mut self, code: i32) -> String;
}

impl Fail for Command {
    fn fail_with(&mut self, code: i32) -> String {
        let out = self.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{self:?}: {err}");
        err
    }
}

/// The arguments of a command: a line as the user types it, split on
/// whitespace (`"consume pace --verify"`), or a slice for a line with an
/// argument that contains a space or is built at run time.
pub trait Args {
    /// The arguments, in order.
    fn args(&self) -> Vec<&str>;
}

impl Args for str {
    fn args(&self) -> Vec<&str> {
        self.split_whitespace().collect()
    }
}

impl Args for [&str] {
    fn args(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl Args for String {
    fn args(&self) -> Vec<&str> {
        self.as_str().args()
    }
}

impl<const N: usize> Args for [&str; N] {
    fn args(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl Args for Vec<&str> {
    fn args(&self) -> Vec<&str> {
        self.clone()
    }
}

/// A private socket directory for one test.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env {
            dir: tempfile::Builder::new()
                .prefix("bc-test")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A `batchcast` command in this environment.
    pub fn cmd(&self, args: &(impl Args + ?Sized)) -> Command {
        let mut c = batchcast();
        c.args(args.args())
            .env("BATCHCAST_DIR", self.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Starts `batchcast ARGS` and collects its stdout lines.
    pub fn spawn(&self, args: &(impl Args + ?Sized)) -> Proc {
        Proc::start(self.cmd(args))
    }

    /// Starts producer `batchcast ARGS` (a `serve ... --json`) and waits
    /// until it listens: the process and its `listening` line.
    pub fn listening(&self, args: &(impl Args + ?Sized)) -> (Proc, Value) {
        let mut p = self.spawn(args);
        let line = p.expect("listening");
        (p, line)
    }

    /// `consume NAME --each --hash` in batches of `batch_size` rows, each
    /// held `delay_ms` ms, waiting up to 60 s for the producer (and for
    /// its restart).
    pub fn hashing_consumer(&self, name: &str, delay_ms: &str, batch_size: &str) -> Proc {
        Proc::start(self.hashing_consumer_cmd(name, delay_ms, batch_size))
    }

    /// The command [`Env::hashing_consumer`] starts.
    pub fn hashing_consumer_cmd(&self, name: &str, delay_ms: &str, batch_size: &str) -> Command {
        self.cmd(&[
            "consume",
            name,
            "--each",
            "--hash",
            "--delay-ms",
            delay_ms,
            "--batch-size",
            batch_size,
            "--connect-timeout",
            "60",
        ])
    }

    /// A synthetic producer; returns once it listens.
    pub fn producer(&self, name: &str, extra: &(impl Args + ?Sized)) -> Proc {
        let mut args = vec!["serve", "--name", name, "--synthetic", "--json"];
        args.extend(extra.args());
        self.listening(&args).0
    }

    /// Files left in the socket directory.
    pub fn leftovers(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.path())
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default()
    }
}

/// A running `batchcast` process.
pub struct Proc {
    pub child: Child,
    lines: Receiver<(Instant, Value)>,
    pub seen: Vec<(Instant, Value)>,
    stderr: Receiver<String>,
}

impl Proc {
    pub fn start(mut cmd: Command) -> Proc {
        let mut child = cmd.spawn().expect("spawn batchcast");
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send((Instant::now(), v)).is_err() {
                        break;
                    }
                }
            }
        });
        let (etx, stderr) = mpsc::channel();
        std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                all.push_str(&line);
                all.push('\n');
            }
            let _ = etx.send(all);
        });
        Proc {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line, or None when the process closed stdout.
    pub fn next_line(&mut self, deadline: Duration) -> Option<Value> {
        match self.lines.recv_timeout(deadline) {
            Ok((t, v)) => {
                self.seen.push((t, v.clone()));
                Some(v)
            }
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!(
                "pid {}: no output within {deadline:?}; seen so far: {:?}",
                self.child.id(),
                self.seen.iter().map(|(_, v)| v).collect::<Vec<_>>()
            ),
        }
    }

    /// Takes every line printed so far, without waiting.
    pub fn pump(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// Waits for the next line whose `event` is `event`.
    pub fn expect(&mut self, event: &str) -> Value {
        self.expect_where(event, |_| true)
    }

    /// Waits for a line with `event` that satisfies `pred`.
    pub fn expect_where(&mut self, event: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.next_line(DEADLINE) {
                Some(v) if v["event"] == event && pred(&v) => return v,
                Some(_) => continue,
                None => panic!(
                    "pid {} ended before printing {event:?}; seen {:?}; stderr: {}",
                    self.child.id(),
                    self.seen.iter().map(|(_, v)| v).collect::<Vec<_>>(),
                    self.stderr_text()
                ),
            }
        }
    }

    /// Reads every remaining line until the process closes stdout.
    pub fn drain(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(v) = self.next_line(DEADLINE) {
            out.push(v);
        }
        out
    }

    /// All lines seen with this `event`.
    pub fn events(&self, event: &str) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|(_, v)| v["event"] == event)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Reads stdout to its end (the process closing it is the signal that
    /// it is exiting), then reaps it.
    pub fn finish(&mut self) -> ExitStatus {
        self.drain();
        self.child.wait().unwrap()
    }

    /// What the process wrote to stderr (after it exited).
    pub fn stderr_text(&self) -> String {
        self.stderr
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default()
    }

    pub fn kill9(&mut self) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: as in kill9.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Checks an `epoch_end` line: every id from `first` to `last`, in order,
/// every payload byte right, every batch full but the last, exact count.
pub fn assert_full_epoch(v: &Value, first: i64, last: i64) {
    assert_eq!(v["first_id"], first, "{v}");
    assert_eq!(v["last_id"], last, "{v}");
    assert_eq!(v["contiguous"], true, "{v}");
    assert_eq!(v["payload_ok"], true, "{v}");
    assert_eq!(v["sizes_ok"], true, "{v}");
    assert_eq!(v["batches"], v["expected_batches"], "inexact len: {v}");
    assert_eq!(v["samples"], last - first + 1, "{v}");
}

/// `p` ends well after reading `epochs` epochs; returns its `epoch_end`
/// lines.
#[track_caller]
pub fn ends_after(p: &mut Proc, epochs: usize) -> Vec<Value> {
    assert!(p.finish().success(), "{}", p.stderr_text());
    let ends = p.events("epoch_end");
    assert_eq!(ends.len(), epochs, "{ends:?}");
    ends
}

/// `p` ends well after reading `epochs` whole epochs of `samples` samples.
pub fn assert_every_epoch_full_of(p: &mut Proc, epochs: usize, samples: i64) {
    for end in &ends_after(p, epochs) {
        assert_full_epoch(end, 0, samples - 1);
    }
}
