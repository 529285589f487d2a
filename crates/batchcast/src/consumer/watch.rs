//! [`ProducerWatch`]: a consumer watches its producer's process.
//!
//! A producer's death normally shows as its socket closing. A producer that
//! used a forking DataLoader, though, shares its end of every connection
//! with its worker processes, which outlive it by seconds; so a consumer
//! also watches the producer process itself, through a pidfd on the pid of
//! the welcome, and reports [`Error::ProducerGone`](crate::Error) once it
//! has exited and what it sent before has been read.

use std::os::fd::{AsFd, OwnedFd};

/// Watches the producer process through a pidfd.
pub(super) struct ProducerWatch {
    pidfd: OwnedFd,
    /// Seen exited once: the next check confirms it, after the consumer has
    /// drained what the producer sent before it died.
    suspected: bool,
}

impl ProducerWatch {
    /// Opens a pidfd on `pid`, if `pid` is the producer `name` as this
    /// process sees it: it holds the arena memfd `batchcast:NAME`. (The pid
    /// comes from the producer's welcome; in another pid namespace it could
    /// name some unrelated process.) None where it cannot be watched: then
    /// only the socket's closing tells.
    pub(super) fn open(name: &str, pid: u32) -> Option<ProducerWatch> {
        let raw = i32::try_from(pid).ok()?;
        let pid_t = rustix::process::Pid::from_raw(raw)?;
        let pidfd =
            rustix::process::pidfd_open(pid_t, rustix::process::PidfdFlags::empty()).ok()?;
        let holds_arena = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.any(|e| {
            let Ok(e) = e else { return false };
            let Ok(target) = std::fs::read_link(e.path()) else {
                return false;
            };
            let target = target.to_string_lossy();
            match target.strip_prefix("/memfd:batchcast:") {
                Some(rest) => rest == name || rest.strip_suffix(" (deleted)") == Some(name),
                None => false,
            }
        });
        holds_arena.then_some(ProducerWatch {
            pidfd,
            suspected: false,
        })
    }

    fn exited(&self) -> bool {
        let fd = self.pidfd.as_fd();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }

    /// True once the producer has exited and a full wait has passed since
    /// it was first seen exited.
    pub(super) fn gone(&mut self) -> bool {
        if !self.exited() {
            return false;
        }
        if self.suspected {
            return true;
        }
        self.suspected = true;
        false
    }
}
