//! A process's watcher: `sh` waiting for end-of-file on a pipe whose only
//! writer is the supervisor (std's pipes are close-on-exec, so no other
//! child inherits it). The supervisor never writes; when it dies (SIGKILL,
//! the OOM killer), the kernel closes the pipe and the watcher kills the
//! process's group. It lives in a group of its own, so a terminal's Ctrl-C
//! reaches the supervisor, not it.

use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};

pub(crate) struct Watcher {
    process: Child,
    pipe: ChildStdin,
}

impl Watcher {
    /// `None` when no `sh` can be started: the process then runs
    /// unwatched.
    pub(crate) fn start(group: i32) -> Option<Watcher> {
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

    /// Ends it without letting it fire: once the process is reaped, its
    /// group id may be reused.
    pub(crate) fn end(mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        drop(self.pipe);
    }
}
