//! A process's watcher: `sh` waiting for end-of-file on a pipe whose only
//! writers are the supervisor and, until it execs, the process itself
//! (std's pipes are close-on-exec, so no other child keeps it). It is
//! started before the process; the process, between fork and exec, writes
//! its own pid (its group's id) into the pipe, so the watcher knows the
//! group before any of the process's own code runs. The supervisor never
//! writes; when it dies (SIGKILL, the OOM killer), the kernel closes the
//! pipe and the watcher kills the process's group. It lives in a group of
//! its own, so a terminal's Ctrl-C reaches the supervisor, not it.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};

pub(crate) struct Watcher {
    process: Child,
    pipe: ChildStdin,
}

impl Watcher {
    /// `None` when no `sh` can be started: the process then runs
    /// unwatched.
    pub(crate) fn start() -> Option<Watcher> {
        let mut process = Command::new("/bin/sh")
            .args([
                "-c",
                "read -r g || exit 0; read -r _ || kill -s KILL -- \"-$g\" 2>/dev/null",
                "batchcast-watch",
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

    /// Makes `command`, between fork and exec, tell the watcher its pid:
    /// the id of the group it leads (it is started with `process_group(0)`).
    pub(crate) fn tell(&self, command: &mut Command) {
        let fd = self.pipe.as_raw_fd();
        // SAFETY: the hook runs between fork and exec; it makes only
        // async-signal-safe calls (getpid, write) on a buffer on the stack
        // and allocates nothing. `fd` is the pipe's write end, open in the
        // child until exec (close-on-exec).
        unsafe {
            command.pre_exec(move || {
                let mut buf = [0u8; 24];
                let len = pid_line(libc::getpid(), &mut buf);
                if libc::write(fd, buf.as_ptr().cast(), len) == len as isize {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            });
        }
    }

    /// Ends it without letting it fire: once the process is reaped, its
    /// group id may be reused.
    pub(crate) fn end(mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        drop(self.pipe);
    }
}

/// `pid` in decimal and a newline, at the start of `buf`; its length.
/// Allocates nothing (it runs between fork and exec).
fn pid_line(pid: i32, buf: &mut [u8; 24]) -> usize {
    let mut digits = [0u8; 12];
    let mut n = pid.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[i] = digits[len - 1 - i];
    }
    buf[len] = b'\n';
    len + 1
}

#[cfg(test)]
mod tests {
    use super::pid_line;

    #[test]
    fn a_pid_is_written_in_decimal_with_a_newline() {
        for (pid, text) in [(0, "0\n"), (7, "7\n"), (4194304, "4194304\n")] {
            let mut buf = [0u8; 24];
            let len = pid_line(pid, &mut buf);
            assert_eq!(&buf[..len], text.as_bytes());
        }
    }
}
