//! Taking connections in without letting them exhaust the producer.
//!
//! - A connection costs the producer a descriptor, so the number kept is
//!   capped from the open-file limit, leaving a quarter of it (at least
//!   [`FD_RESERVE_MIN`]) to the producer's own loader.
//! - At most [`MAX_PENDING`] connections (fewer under a small open-file
//!   limit: a quarter of what the reserve leaves) may be waiting to say
//!   hello; a newer
//!   one pushes the oldest out (see `control`), so silent or slow
//!   connections can neither hold descriptors nor delay a real consumer.
//! - When `accept` fails for lack of descriptors (`EMFILE`/`ENFILE`, e.g. the
//!   loader holds them), the oldest connection still waiting for its hello
//!   is closed to make room. With none, the listener would stay readable and
//!   a poll loop would spin: a spare descriptor is kept for that case; it is
//!   closed, the waiting connection accepted and closed at once, and the
//!   spare reopened; then the listener rests for [`BACKOFF`] before it is
//!   polled again.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::SocketFlags;

/// Most connections waiting for their hello.
pub(crate) const MAX_PENDING: usize = 64;
/// Fewest descriptors left to the rest of the producer process.
pub(crate) const FD_RESERVE_MIN: u64 = 64;
/// Descriptors a consumer costs the producer (its socket, its ledger and
/// the pidfd that watches its process).
const FDS_PER_CONSUMER: u64 = 3;
/// How long the listener rests after running out of descriptors.
pub(crate) const BACKOFF: Duration = Duration::from_millis(100);

/// What one `accept` gave.
pub(crate) enum Accepted {
    /// A new connection.
    Conn(OwnedFd),
    /// No connection waits.
    Empty,
    /// Out of descriptors: close a connection of ours, or call
    /// [`Admission::shed`].
    OutOfFds,
}

/// The listening socket and its limits.
pub(crate) struct Admission {
    listener: UnixListener,
    spare: Option<OwnedFd>,
    rest_until: Option<Instant>,
    /// Most registered consumers.
    pub max_consumers: usize,
    /// Most connections waiting for their hello.
    pub max_pending: usize,
}

impl Admission {
    pub fn new(listener: UnixListener) -> Self {
        Admission {
            listener,
            spare: open_spare(),
            rest_until: None,
            max_consumers: limits_for(nofile()).0,
            max_pending: limits_for(nofile()).1,
        }
    }

    /// The listener, while it is to be polled (not resting).
    pub fn listener(&mut self) -> Option<&UnixListener> {
        match self.rest_until {
            Some(t) if Instant::now() < t => None,
            _ => {
                self.rest_until = None;
                Some(&self.listener)
            }
        }
    }

    /// How long until the listener is polled again, when it rests.
    pub fn resting_for(&self) -> Option<Duration> {
        self.rest_until
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Accepts one connection (close-on-exec).
    pub fn accept(&mut self) -> Accepted {
        loop {
            match rustix::net::accept_with(&self.listener, SocketFlags::CLOEXEC) {
                Ok(fd) => return Accepted::Conn(fd),
                Err(Errno::INTR | Errno::CONNABORTED) => continue,
                Err(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM) => {
                    return Accepted::OutOfFds
                }
                Err(_) => return Accepted::Empty, // EAGAIN, or a peer gone already
            }
        }
    }

    /// Out of descriptors with none of ours to give up: closes the
    /// connection that cannot be served (through the spare descriptor)
    /// rather than leave it to wake every poll, and rests the listener.
    pub fn shed(&mut self) {
        if self.spare.take().is_some() {
            if let Ok(fd) = rustix::net::accept_with(&self.listener, SocketFlags::CLOEXEC) {
                drop(fd);
            }
            self.spare = open_spare();
        }
        self.rest_until = Some(Instant::now() + BACKOFF);
    }
}

fn open_spare() -> Option<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

/// The soft open-file limit.
fn nofile() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// (most consumers, most pending connections) for an open-file limit: a
/// quarter of it (at least [`FD_RESERVE_MIN`]) stays with the rest of the
/// process, a quarter of what is left (at most [`MAX_PENDING`], at least 4)
/// may wait for a hello, and each consumer costs [`FDS_PER_CONSUMER`].
fn limits_for(nofile: u64) -> (usize, usize) {
    let usable = nofile.saturating_sub((nofile / 4).max(FD_RESERVE_MIN));
    let pending = (usable / 4).clamp(4, MAX_PENDING as u64);
    let consumers = usable.saturating_sub(pending) / FDS_PER_CONSUMER;
    (
        usize::try_from(consumers)
            .unwrap_or(usize::MAX)
            .clamp(1, 1 << 16),
        pending as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_leave_headroom() {
        assert_eq!(limits_for(1024), ((1024 - 256 - 64) / 3, 64));
        assert_eq!(limits_for(256), ((256 - 64 - 48) / 3, 48));
        assert_eq!(limits_for(128), ((128 - 64 - 16) / 3, 16));
        assert_eq!(limits_for(10), (1, 4));
        assert_eq!(limits_for(u64::MAX), (1 << 16, 64));
    }
}
