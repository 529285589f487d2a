//! The process supervisor: a command started in a process group of its
//! own, watched, stopped as a group (SIGTERM, then SIGKILL after a grace
//! period), its output captured with a bounded tail, its exit status and
//! resource use (`wait4`) reported.
//!
//! A [`Process`] dropped while still running is killed with its group: no
//! way out of the caller leaves one behind. With [`Options::watcher`], a
//! supervisor killed outright (SIGKILL, the OOM killer) takes its processes
//! with it too.

mod output;
mod watcher;

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};

use crate::usage::Usage;
pub use output::Sink;

/// How long the output readers may go on after the process ended (for
/// what it wrote last to reach the pipe's end): what
/// [`Process::finish_output`] is given by the runner and the Python
/// binding. Past that, a process it left behind outside its group
/// (`setsid`, a daemon) holds the pipe, and what it writes later is not
/// kept.
pub const OUTPUT_AFTER_EXIT: Duration = Duration::from_secs(2);
use output::{Reader, Tail};
use watcher::Watcher;

/// Where one output stream of a supervised process goes.
pub enum Output {
    /// Discarded.
    Null,
    /// The supervisor's own stream.
    Inherit,
    /// A pipe the caller takes ([`Process::take_stdout`],
    /// [`Process::take_stderr`]).
    Pipe,
    /// A file (stdout and stderr may share one through `try_clone`).
    File(File),
    /// Read by a thread of the supervisor: each chunk goes to the sink (if
    /// any) and into the tail ([`Process::tail`]).
    Capture(Option<Sink>),
}

impl Output {
    fn stdio(&mut self) -> io::Result<Stdio> {
        Ok(match self {
            Output::Null => Stdio::null(),
            Output::Inherit => Stdio::inherit(),
            Output::Pipe | Output::Capture(_) => Stdio::piped(),
            Output::File(f) => Stdio::from(f.try_clone()?),
        })
    }
}

/// How a process is started and supervised.
pub struct Options {
    /// A pipe for its stdin ([`Process::take_stdin`]); else /dev/null.
    pub stdin_pipe: bool,
    /// Where its stdout goes.
    pub stdout: Output,
    /// Where its stderr goes.
    pub stderr: Output,
    /// A watcher kills its group if the supervisor dies without stopping
    /// it.
    pub watcher: bool,
    /// When it exits, what it left running in its group (a DataLoader's
    /// workers) is killed.
    pub kill_group_on_exit: bool,
    /// Bytes of captured output kept for [`Process::tail`].
    pub tail_bytes: usize,
    /// The CPUs it (and everything it starts) may run on; `None`: any.
    pub cpus: Option<Vec<usize>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            stdin_pipe: false,
            stdout: Output::Null,
            stderr: Output::Null,
            watcher: false,
            kill_group_on_exit: false,
            tail_bytes: 16 * 1024,
            cpus: None,
        }
    }
}

/// A started process, the leader of its own process group.
pub struct Process {
    pid: Pid,
    /// Its start time (clock ticks after boot), against pid reuse.
    start: Option<i64>,
    /// Readable when it has ended (none on kernels without pidfd).
    pidfd: Option<OwnedFd>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    watcher: Option<Watcher>,
    readers: Vec<Reader>,
    readers_stop: Arc<AtomicBool>,
    tail: Arc<Mutex<Tail>>,
    kill_group_on_exit: bool,
    ended: bool,
    exit: Option<ExitStatus>,
    usage: Option<Usage>,
}

impl Process {
    /// Starts `command` in a process group of its own.
    pub fn start(mut command: Command, mut options: Options) -> io::Result<Process> {
        command
            .stdin(if options.stdin_pipe {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(options.stdout.stdio()?)
            .stderr(options.stderr.stdio()?)
            .process_group(0);
        if let Some(cpus) = &options.cpus {
            pin(&mut command, cpus)?;
        }
        // Started first, and told the group's id by the process itself
        // before it execs: the process never runs unwatched.
        let watcher = if options.watcher {
            Watcher::start()
        } else {
            None
        };
        if let Some(w) = &watcher {
            w.tell(&mut command);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                if let Some(w) = watcher {
                    w.end();
                }
                return Err(e);
            }
        };
        let pid = Pid::from_raw(child.id() as i32)
            .ok_or_else(|| io::Error::other("the kernel gave the process pid 0"))?;
        let tail = Arc::new(Mutex::new(Tail::new(options.tail_bytes)));
        let readers_stop = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
        let mut streams = Vec::new();
        if let Output::Capture(sink) = &mut options.stdout {
            streams.push(("stdout", stdout.take().map(OwnedFd::from), sink.take()));
        }
        if let Output::Capture(sink) = &mut options.stderr {
            streams.push(("stderr", stderr.take().map(OwnedFd::from), sink.take()));
        }
        for (name, fd, sink) in streams {
            let Some(fd) = fd else { continue };
            let stop = readers_stop.clone();
            match output::start(name, File::from(fd), sink, tail.clone(), stop) {
                Ok(r) => readers.push(r),
                Err(e) => {
                    // No reader: the process must not run on unread.
                    let _ = kill_process_group(pid, Signal::KILL);
                    let _ = child.wait();
                    if let Some(w) = watcher {
                        w.end();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Process {
            pid,
            start: crate::procfs::start_time(i64::from(pid.as_raw_nonzero().get())),
            pidfd: rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok(),
            stdin: child.stdin.take(),
            stdout,
            stderr,
            watcher,
            readers,
            readers_stop,
            tail,
            kill_group_on_exit: options.kill_group_on_exit,
            ended: false,
            exit: None,
            usage: None,
        })
    }

    /// Its pid (and process group id).
    pub fn pid(&self) -> i32 {
        self.pid.as_raw_nonzero().get()
    }

    /// Whether it has been seen to end (no system call: see [`Process::poll`]).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Its start time (clock ticks after boot), recorded against pid reuse.
    pub fn start_time(&self) -> Option<i64> {
        self.start
    }

    /// Its stdin, with [`Options::stdin_pipe`].
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// Its stdout, with [`Output::Pipe`].
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// Its stderr, with [`Output::Pipe`].
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// Whether it has ended (reaping it if so).
    pub fn poll(&mut self) -> bool {
        if !self.ended {
            self.reap(libc::WNOHANG);
        }
        self.ended
    }

    /// Waits until it ends or `deadline` passes; whether it ended.
    pub fn wait_until(&mut self, deadline: Option<Instant>) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        while !self.poll() {
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
                None => {
                    self.reap(0);
                    continue;
                }
            };
            match &self.pidfd {
                Some(fd) => {
                    let wait = left.min(Duration::from_secs(1));
                    let t = Timespec {
                        tv_sec: wait.as_secs() as _,
                        tv_nsec: wait.subsec_nanos() as _,
                    };
                    let _ = poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&t));
                }
                // No pidfd (an old kernel): look again shortly.
                None => std::thread::sleep(left.min(Duration::from_millis(10))),
            }
        }
        true
    }

    /// Waits for it to end; its exit status (an error if something else
    /// reaped it).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        self.wait_until(None);
        self.exit.ok_or_else(|| {
            io::Error::other(format!(
                "process {} ended without an exit status: something else reaped it",
                self.pid()
            ))
        })
    }

    /// Sends `signal` to its group (nothing once it has been reaped).
    pub fn signal(&self, signal: Signal) {
        if !self.ended {
            let _ = kill_process_group(self.pid, signal);
        }
    }

    /// SIGTERM to its group, SIGKILL after `grace`; waits for it. Whether
    /// it was still running.
    pub fn stop(&mut self, grace: Duration) -> bool {
        let running = !self.poll();
        stop_all(std::iter::once(&mut *self), grace);
        running
    }

    /// SIGKILL to its group; waits for it.
    pub fn kill(&mut self) {
        stop_all(std::iter::once(&mut *self), Duration::ZERO);
    }

    /// How it ended: its exit status once reaped (`None` while running, or
    /// if something else reaped it).
    pub fn exit(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// `(exit code, signal)` once ended.
    pub fn outcome(&self) -> Option<(Option<i32>, Option<i32>)> {
        self.exit.map(|s| (s.code(), s.signal()))
    }

    /// What it used (CPU, peak memory), with what it waited for, once
    /// reaped.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The last `lines` lines of its captured output. Both captured
    /// streams share one tail; between them, the order is the order their
    /// readers got the bytes, which may differ from the order written.
    pub fn tail(&self, lines: usize) -> String {
        self.tail.lock().map(|t| t.lines(lines)).unwrap_or_default()
    }

    /// Waits for the captured output's readers: until its pipes close, but
    /// no longer than `within`; a process it left outside its group
    /// (`setsid`, a daemon) may hold them open for ever. Returns the
    /// streams cut short so ("stdout", "stderr").
    pub fn finish_output(&mut self, within: Duration) -> Vec<&'static str> {
        let deadline = Instant::now() + within;
        while self.readers.iter().any(|r| !r.thread.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.readers_stop.store(true, Ordering::SeqCst);
        self.readers
            .drain(..)
            .filter_map(|r| r.thread.join().unwrap_or(false).then_some(r.stream))
            .collect()
    }

    /// `wait4` with `flags`; on its end, records how, kills what it left
    /// in its group if asked, and ends the watcher.
    fn reap(&mut self, flags: i32) {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let got = loop {
            // SAFETY: `status` and `usage` are valid, writable and live for
            // the call; the pid is our own child's.
            let got = unsafe { libc::wait4(self.pid(), &mut status, flags, &mut usage) };
            if got >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break got;
            }
        };
        match got {
            0 => return,
            p if p == self.pid() => {
                self.exit = Some(ExitStatus::from_raw(status));
                self.usage = Some(Usage::from_rusage(&usage));
            }
            // ECHILD: not ours to reap any more; it has ended all the same.
            _ => {}
        }
        self.ended = true;
        if self.kill_group_on_exit {
            // The group's id stays reserved while any member lives.
            let _ = kill_process_group(self.pid, Signal::KILL);
        }
        if let Some(w) = self.watcher.take() {
            w.end();
        }
    }
}

impl Drop for Process {
    /// The last resort, when the caller leaves by a way that did not stop
    /// it: its whole group is killed and reaped.
    fn drop(&mut self) {
        if !self.poll() {
            let _ = kill_process_group(self.pid, Signal::KILL);
            let _ = self.wait();
        }
        self.readers_stop.store(true, Ordering::SeqCst);
    }
}

/// Stops every process of `procs` still running: SIGTERM to each group at
/// once, SIGKILL to those still running after `grace`; waits for them all.
pub fn stop_all<'a>(procs: impl IntoIterator<Item = &'a mut Process>, grace: Duration) {
    let mut running: Vec<&mut Process> = procs
        .into_iter()
        .filter_map(|p| (!p.poll()).then_some(p))
        .collect();
    if !grace.is_zero() {
        for p in running.iter_mut() {
            p.signal(Signal::TERM);
        }
        let deadline = Instant::now() + grace;
        for p in running.iter_mut() {
            p.wait_until(Some(deadline));
        }
    }
    for p in running {
        if !p.poll() {
            p.signal(Signal::KILL);
            let _ = p.wait();
        }
    }
}

/// Makes `command` hold itself to `cpus` before it runs, so that
/// everything it starts inherits them.
fn pin(command: &mut Command, cpus: &[usize]) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        if c >= rustix::thread::CpuSet::MAX_CPU {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "CPU {c} is past the last CPU the kernel can name ({})",
                    rustix::thread::CpuSet::MAX_CPU - 1
                ),
            ));
        }
        set.set(c);
    }
    // SAFETY: the hook runs between fork and exec; it only makes one system
    // call on a set built before the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            rustix::thread::sched_setaffinity(None, &set).map_err(io::Error::from)
        });
    }
    Ok(())
}
