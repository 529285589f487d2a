//! `_native.Process` and the `/proc` sampler's functions: the one process
//! supervisor and sampler of `batchcast-proc`, for the stalls modes and the
//! collocated benchmark.
//!
//! A `Process` starts a command in its own process group; waiting releases
//! the GIL and wakes every 100 ms to run Python's signal handlers, so
//! Ctrl-C ends the wait. A `Process` dropped while still running kills its
//! group, except in a forked child, where it is not its own to kill.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{IntoRawFd, OwnedFd};
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use batchcast_proc::{Options, Output, Process, Signal, OUTPUT_AFTER_EXIT};
use pyo3::prelude::*;

use crate::errors::{invalid, Exc};

/// How long a wait holds the GIL released before it runs Python's signal
/// handlers.
const TICK: Duration = Duration::from_millis(100);

/// `batchcast.IoError` with `errno`, `strerror` and `filename` set, so
/// that it reads as Python's own `OSError` for that file.
fn io_error(py: Python<'_>, what: String, e: &std::io::Error, filename: &str) -> PyErr {
    let errno = e
        .raw_os_error()
        .and_then(|n| n.into_pyobject(py).ok())
        .map(|o| o.into_any());
    // As Python's own OSError says it: without Rust's "(os error N)".
    let text = e.to_string();
    let strerror = text
        .split(" (os error ")
        .next()
        .and_then(|t| t.into_pyobject(py).ok())
        .map(|o| o.into_any());
    let filename_text = filename.to_string();
    let filename = filename.into_pyobject(py).ok().map(|o| o.into_any());
    let attrs: Vec<(&str, Bound<'_, PyAny>)> = [
        ("errno", errno),
        ("strerror", strerror),
        ("filename", filename),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect();
    Exc::IoError.err(py, format!("{what} {filename_text}: {e}"), &attrs)
}

/// Python's `returncode`: the exit code, or minus the signal that ended it.
fn returncode(status: ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| -s))
}

/// Where a stream goes, by name.
fn output(
    py: Python<'_>,
    which: &str,
    name: &str,
    log: Option<&File>,
    logged: &str,
) -> PyResult<Output> {
    Ok(match name {
        "null" => Output::Null,
        "inherit" => Output::Inherit,
        "pipe" => Output::Pipe,
        "capture" => Output::Capture(None),
        "log" => match log {
            Some(f) => Output::File(
                f.try_clone()
                    .map_err(|e| io_error(py, "cannot share the log".into(), &e, logged))?,
            ),
            None => return Err(invalid(py, format!("{which}=\"log\" needs log=PATH"))),
        },
        other => {
            return Err(invalid(
                py,
                format!(
                "{which}={other:?}: give \"null\", \"inherit\", \"pipe\", \"capture\" or \"log\""
            ),
            ))
        }
    })
}

/// A command in its own process group (`_native.Process`).
#[pyclass(name = "Process", module = "batchcast._native")]
pub(crate) struct PyProcess {
    inner: Mutex<Option<Process>>,
    pid: i32,
    /// The process that started it.
    owner: u32,
}

impl PyProcess {
    fn lock(&self) -> MutexGuard<'_, Option<Process>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the process (`None` once it is gone).
    fn with<R>(&self, f: impl FnOnce(&mut Process) -> R) -> Option<R> {
        self.lock().as_mut().map(f)
    }

    fn take_fd(&self, f: impl FnOnce(&mut Process) -> Option<OwnedFd>) -> Option<i32> {
        self.with(f).flatten().map(IntoRawFd::into_raw_fd)
    }

    /// Once it has ended: lets its output readers reach the pipes' end, so
    /// that `tail` holds all it wrote (at most [`OUTPUT_AFTER_EXIT`]; a
    /// second call returns at once).
    fn finish_output(&self, py: Python<'_>) {
        py.detach(|| {
            self.with(|p| {
                if p.poll() {
                    p.finish_output(OUTPUT_AFTER_EXIT);
                }
            })
        });
    }
}

#[pymethods]
impl PyProcess {
    /// Starts `argv` in a process group of its own.
    #[new]
    #[pyo3(signature = (argv, env=None, *, stdin_pipe=false, stdout="null", stderr="null",
                        log=None, cpus=None, watcher=false, kill_group_on_exit=false,
                        tail_bytes=16384))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        argv: Vec<String>,
        env: Option<HashMap<String, String>>,
        stdin_pipe: bool,
        stdout: &str,
        stderr: &str,
        log: Option<std::path::PathBuf>,
        cpus: Option<Vec<usize>>,
        watcher: bool,
        kill_group_on_exit: bool,
        tail_bytes: usize,
    ) -> PyResult<PyProcess> {
        let Some((program, args)) = argv.split_first() else {
            return Err(invalid(py, "argv is empty: give the program to run".into()));
        };
        let log_file = match &log {
            Some(p) => Some(
                File::create(p)
                    .map_err(|e| io_error(py, "cannot create".into(), &e, &p.to_string_lossy()))?,
            ),
            None => None,
        };
        let shown = log
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string());
        let options = Options {
            stdin_pipe,
            stdout: output(py, "stdout", stdout, log_file.as_ref(), &shown)?,
            stderr: output(py, "stderr", stderr, log_file.as_ref(), &shown)?,
            watcher,
            kill_group_on_exit,
            tail_bytes,
            cpus,
        };
        let mut command = Command::new(program);
        command.args(args);
        if let Some(env) = env {
            command.env_clear().envs(env);
        }
        let process = py
            .detach(|| Process::start(command, options))
            .map_err(|e| io_error(py, "cannot start".into(), &e, program))?;
        Ok(PyProcess {
            pid: process.pid(),
            inner: Mutex::new(Some(process)),
            owner: std::process::id(),
        })
    }

    /// Its pid, which is also its process group's id.
    #[getter]
    fn pid(&self) -> i32 {
        self.pid
    }

    /// `None` while it runs; then its exit code, or minus the signal that
    /// ended it (as `subprocess.Popen.returncode`).
    #[getter]
    fn returncode(&self) -> Option<i32> {
        self.with(|p| p.exit().and_then(returncode)).flatten()
    }

    /// Looks whether it has ended: `returncode`.
    fn poll(&self) -> Option<i32> {
        self.with(|p| p.poll().then(|| p.exit().and_then(returncode)))
            .flatten()
            .flatten()
    }

    /// Waits for it to end, at most `timeout` seconds (`None`: for ever);
    /// its `returncode`, `None` if still running.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<i32>> {
        let deadline = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(invalid(py, format!("timeout={t}: give seconds >= 0")))
            }
            Some(t) => Some(Instant::now() + Duration::from_secs_f64(t)),
            None => None,
        };
        loop {
            let step = Instant::now() + TICK;
            let until = deadline.map_or(step, |d| d.min(step));
            let ended = py.detach(|| self.with(|p| p.wait_until(Some(until))).unwrap_or(true));
            if ended {
                self.finish_output(py);
                return Ok(self.returncode());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// SIGTERM to its group, SIGKILL after `grace` seconds; waits for it.
    /// Whether it was still running.
    fn stop(&self, py: Python<'_>, grace: f64) -> PyResult<bool> {
        if !(grace >= 0.0 && grace.is_finite()) {
            return Err(invalid(py, format!("grace={grace}: give seconds >= 0")));
        }
        let grace = Duration::from_secs_f64(grace);
        let running = py.detach(|| self.with(|p| p.stop(grace)).unwrap_or(false));
        self.finish_output(py);
        Ok(running)
    }

    /// SIGKILL to its group; waits for it.
    fn kill(&self, py: Python<'_>) {
        py.detach(|| self.with(Process::kill));
        self.finish_output(py);
    }

    /// Sends signal number `signum` to its group.
    fn signal(&self, py: Python<'_>, signum: i32) -> PyResult<()> {
        let sig = Signal::from_named_raw(signum)
            .ok_or_else(|| invalid(py, format!("{signum} is not a signal number")))?;
        self.with(|p| p.signal(sig));
        Ok(())
    }

    /// Its stdin's file descriptor (with `stdin_pipe=True`), now the
    /// caller's to close; `None` if taken or not piped.
    fn take_stdin(&self) -> Option<i32> {
        self.take_fd(|p| p.take_stdin().map(OwnedFd::from))
    }

    /// Its stdout's file descriptor (with `stdout="pipe"`), now the
    /// caller's to close.
    fn take_stdout(&self) -> Option<i32> {
        self.take_fd(|p| p.take_stdout().map(OwnedFd::from))
    }

    /// Its stderr's file descriptor (with `stderr="pipe"`), now the
    /// caller's to close.
    fn take_stderr(&self) -> Option<i32> {
        self.take_fd(|p| p.take_stderr().map(OwnedFd::from))
    }

    /// The last `lines` lines of its captured output (`"capture"`): all of
    /// it once `wait`, `stop` or `kill` has returned (its readers get
    /// [`OUTPUT_AFTER_EXIT`] after the exit to reach the pipes' end).
    #[pyo3(signature = (lines=15))]
    fn tail(&self, lines: usize) -> String {
        self.with(|p| p.tail(lines)).unwrap_or_default()
    }

    /// `(cpu_seconds, max_rss_bytes)` it used, with what it waited for,
    /// once ended; `None` before.
    fn usage(&self) -> Option<(f64, u64)> {
        self.with(|p| p.usage().map(|u| (u.cpu_seconds, u.max_rss_bytes)))
            .flatten()
    }
}

impl Drop for PyProcess {
    fn drop(&mut self) {
        if std::process::id() != self.owner {
            // A forked child: the process is the parent's.
            if let Some(p) = self.lock().take() {
                std::mem::forget(p);
            }
        }
    }
}

/// CPU seconds used so far by this process and all its descendants (the
/// reaped ones included).
#[pyfunction]
pub(crate) fn tree_cpu_seconds(py: Python<'_>) -> f64 {
    py.detach(batchcast_proc::tree_cpu_seconds)
}

/// CPU seconds all cores of the machine have been busy (`/proc/stat`).
#[pyfunction]
pub(crate) fn machine_busy_seconds() -> f64 {
    batchcast_proc::machine_busy_seconds()
}

/// Every process now: pid -> `(ppid, cpu_ticks, children_cpu_ticks)` (own
/// utime + stime, and cutime + cstime of children it waited for).
#[pyfunction]
pub(crate) fn proc_table(py: Python<'_>) -> HashMap<i32, (i32, u64, u64)> {
    py.detach(|| {
        batchcast_proc::snapshot()
            .into_iter()
            .map(|(p, s)| (p, (s.ppid, s.cpu_ticks, s.children_cpu_ticks)))
            .collect()
    })
}

/// Every descendant of `root` now (children, grandchildren, ...).
#[pyfunction]
pub(crate) fn descendants(py: Python<'_>, root: i32) -> Vec<i32> {
    py.detach(|| batchcast_proc::descendants(&batchcast_proc::snapshot(), root))
}

/// Clock ticks per second, the unit of `proc_table`'s CPU times.
#[pyfunction]
pub(crate) fn clock_ticks() -> f64 {
    batchcast_proc::ticks_per_second()
}

/// Adds the supervisor and the sampler to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProcess>()?;
    m.add_function(wrap_pyfunction!(tree_cpu_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(machine_busy_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(proc_table, m)?)?;
    m.add_function(wrap_pyfunction!(descendants, m)?)?;
    m.add_function(wrap_pyfunction!(clock_ticks, m)?)?;
    Ok(())
}
