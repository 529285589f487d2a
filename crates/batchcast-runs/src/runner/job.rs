//! One process of a workload (a training job or the shared producer): its
//! own process group, its output captured into the store, stopped as a
//! group. A job dropped while still running is killed with its group: no
//! way out of the runner leaves one behind. A runner killed outright
//! (SIGKILL, the OOM killer) takes its jobs with it too: each job has a
//! watcher, a small `sh` in a group of its own that reads a pipe only the
//! runner holds and kills the job's group when the pipe closes unasked.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};

use crate::{now_ms, LogStream, RecorderHandle, RunId};

/// Longest last line kept for progress.
const LAST_LINE: usize = 200;
/// How long the output readers may go on after the job's process ended
/// (for what it wrote last to reach the pipe's end). Past that, a process it
/// left behind outside its group (`setsid`, a daemon) holds the pipe: the
/// run ends anyway, and what that process writes later is not recorded.
const OUTPUT_AFTER_EXIT: Duration = Duration::from_secs(2);
/// How often a reader looks whether it is told to stop.
const READER_TICK: Duration = Duration::from_millis(100);

/// A started process and the threads reading its output.
pub(crate) struct Job {
    pub run: RunId,
    pub name: String,
    pub child: Child,
    /// Its start time (clock ticks since boot), recorded against pid reuse.
    pub start: Option<i64>,
    /// Kills its group if the runner dies without stopping it.
    watcher: Option<Watcher>,
    readers: Vec<JoinHandle<()>>,
    /// Tells the readers to stop reading (the job ended long enough ago).
    readers_stop: Arc<AtomicBool>,
    /// The last line it wrote (stdout or stderr), for progress.
    pub last_line: Arc<Mutex<String>>,
    pub exit: Option<ExitStatus>,
    /// Why the runner stopped it, when it was still running then: its run
    /// ends KILLED. A job that had ended already keeps its own outcome.
    pub stopped: Option<String>,
    /// Its end is in the store.
    pub recorded: bool,
}

impl Job {
    /// Starts `command` in a process group of its own, its output going to
    /// the run's log through `rec`.
    pub(crate) fn start(
        run: RunId,
        name: &str,
        mut command: Command,
        rec: &RecorderHandle,
    ) -> std::io::Result<Job> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = command.spawn()?;
        let start = super::process_start(i64::from(child.id()));
        let watcher = Watcher::start(child.id());
        let last_line = Arc::new(Mutex::new(String::new()));
        let readers_stop = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        let pumped = |stream| Pump {
            run,
            stream,
            rec: rec.clone(),
            last_line: last_line.clone(),
            stop: readers_stop.clone(),
        };
        if let Some(out) = child.stdout.take() {
            readers.push(pumped(LogStream::Stdout).start(out));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(pumped(LogStream::Stderr).start(err));
        }
        Ok(Job {
            run,
            name: name.to_string(),
            child,
            start,
            watcher,
            readers,
            readers_stop,
            last_line,
            exit: None,
            stopped: None,
            recorded: false,
        })
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it has ended (and records how).
    pub(crate) fn poll(&mut self) -> bool {
        if self.exit.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exit = Some(status);
                // Workers it left behind (a DataLoader's, say) go with it.
                self.signal(Signal::KILL);
                self.end_watcher();
            }
        }
        self.exit.is_some()
    }

    /// Ends its watcher without letting it fire: once the job is reaped,
    /// its group id may be reused.
    fn end_watcher(&mut self) {
        if let Some(mut w) = self.watcher.take() {
            let _ = w.process.kill();
            let _ = w.process.wait();
            drop(w.pipe);
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = Pid::from_raw(self.pid()) {
            let _ = kill_process_group(pid, signal);
        }
    }

    /// SIGTERM to its group, SIGKILL after `grace`; waits for it. `why`
    /// is recorded only if it was still running.
    pub(crate) fn stop(&mut self, grace: Duration, why: &str) {
        stop_all(std::iter::once(self), grace, why);
    }

    /// Waits for the output readers, once the job has ended: until its
    /// pipes close (its group ended), but no longer than
    /// [`OUTPUT_AFTER_EXIT`]; a process it left outside its group may hold
    /// them open for ever. Output cut short so is noted in the run's
    /// events.
    pub(crate) fn join_output(&mut self) {
        let deadline = Instant::now() + OUTPUT_AFTER_EXIT;
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.readers_stop.store(true, Ordering::SeqCst);
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    pub(crate) fn last_line(&self) -> String {
        self.last_line.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// `(exit code, signal)` once ended.
    pub(crate) fn outcome(&self) -> Option<(Option<i32>, Option<i32>)> {
        self.exit.map(|s| (s.code(), s.signal()))
    }
}

impl Drop for Job {
    /// The last resort, when the runner leaves by a way that did not stop
    /// it: its whole group is killed and reaped.
    fn drop(&mut self) {
        if !self.poll() {
            self.signal(Signal::KILL);
            if let Ok(status) = self.child.wait() {
                self.exit = Some(status);
            }
        }
        self.end_watcher();
    }
}

/// A job's watcher: `sh` waiting for end-of-file on a pipe whose only
/// writer is the runner (std's pipes are close-on-exec, so no other child
/// inherits it). The runner never writes; when it dies, the kernel closes
/// the pipe and the watcher kills the job's group. It lives in a group of
/// its own, so a terminal's Ctrl-C reaches the runner, not it.
struct Watcher {
    process: Child,
    pipe: ChildStdin,
}

impl Watcher {
    /// `None` when no `sh` can be started: the job then runs unwatched, and
    /// a later runner finds it by its recorded pid and start time.
    fn start(group: u32) -> Option<Watcher> {
        let mut process = Command::new("/bin/sh")
            .args([
                "-c",
                "read -r _ || kill -s KILL -- \"-$1\" 2>/dev/null",
                "batchcast-watch",
                &group.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ok()?;
        let pipe = process.stdin.take()?;
        Some(Watcher { process, pipe })
    }
}

/// Stops every job of `jobs` still running: SIGTERM to each group at once,
/// SIGKILL to those still running after `grace`; waits for them all. `why`
/// is recorded in each job that was still running.
pub(crate) fn stop_all<'a>(
    jobs: impl IntoIterator<Item = &'a mut Job>,
    grace: Duration,
    why: &str,
) {
    let mut running: Vec<&mut Job> = jobs
        .into_iter()
        .filter_map(|j| (!j.poll()).then_some(j))
        .collect();
    for j in running.iter_mut() {
        j.stopped = Some(why.to_string());
        j.signal(Signal::TERM);
    }
    let deadline = Instant::now() + grace;
    while running.iter_mut().any(|j| !j.poll()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for j in running {
        if !j.poll() {
            j.signal(Signal::KILL);
            if let Ok(status) = j.child.wait() {
                j.exit = Some(status);
            }
            j.end_watcher();
        }
    }
}

/// An output reader's share of the job.
struct Pump {
    run: RunId,
    stream: LogStream,
    rec: RecorderHandle,
    last_line: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
}

impl Pump {
    /// Reads `from` into the run's log until end of file, or until told to
    /// stop (it waits for data at most [`READER_TICK`] at a time, so a pipe
    /// held open by someone else does not hold it).
    fn start(self, mut from: impl Read + AsFd + Send + 'static) -> JoinHandle<()> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        std::thread::spawn(move || {
            let tick = Timespec {
                tv_sec: 0,
                tv_nsec: READER_TICK.as_nanos() as _,
            };
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                if self.stop.load(Ordering::SeqCst) {
                    let note = format!(
                        "{} after the job ended was not recorded: a process it left outside \
                         its group (setsid, a daemon) still held it",
                        self.stream.as_str()
                    );
                    self.rec.event(self.run, "runner", &note);
                    return;
                }
                let mut fds = [PollFd::new(&from, PollFlags::IN)];
                match poll(&mut fds, Some(&tick)) {
                    Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                    Ok(_) => {}
                    Err(_) => return,
                }
                match from.read(&mut buf) {
                    Ok(0) => return,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                    Ok(n) => {
                        let chunk = &buf[..n];
                        let text = String::from_utf8_lossy(chunk);
                        if let Some(line) = text.lines().rev().find(|l| !l.trim().is_empty()) {
                            if let Ok(mut l) = self.last_line.lock() {
                                *l = line.chars().take(LAST_LINE).collect();
                            }
                        }
                        self.rec
                            .log(self.run, self.stream, now_ms(), chunk.to_vec());
                    }
                }
            }
        })
    }
}
