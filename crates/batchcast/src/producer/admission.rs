//! Taking connections in without letting them exhaust the producer.
//!
//! - A connection costs the producer a descriptor, so the number kept is
//!   capped from the open-file limit, leaving a quarter of it (at least
//!   [`FD_RESERVE_MIN`]) to the producer's own loader.
//! - At most [`MAX_PENDING`] connections may be waiting to say hello; a newer
//!   one pushes the oldest out (see `control`), so silent or slow
//!   connections can neither hold descriptors nor delay a real consumer.
//! - When `accept` fails for lack of descriptors (`EMFILE`/`ENFILE`, e.g. the
//!   loader holds them), the listener would stay readable and a poll loop
//!   would spin. A spare descriptor is kept for that case: it is closed, the
//!   waiting connection accepted and closed at once, and the spare reopened;
//!   then the listener rests for [`BACKOFF`] before it is polled again.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::SocketFlags;

/// Most connections waiting for their hello.
pub(crate) const MAX_PENDING: usize = 64;
/// Fewest descriptors left to the rest of the producer process.
pub(crate) const FD_RESERVE_MIN: u64 = 64;
/// Descriptors a consumer costs the producer (its socket and its ledger).
const FDS_PER_CONSUMER: u64 = 2;
/// How long the listener rests after running out of descriptors.
pub(crate) const BACKOFF: Duration = Duration::from_millis(100);

/// What one `accept` gave.
pub(crate) enum Accepted {
    /// A new connection.
    Conn(OwnedFd),
    /// No connection waits.
    Empty,
    /// Out of descriptors: the listener rests; stop accepting for now.
    Resting,
}

/// The listening socket and its limits.
pub(crate) struct Admission {
    listener: UnixListener,
    spare: Option<OwnedFd>,
    rest_until: Option<Instant>,
    /// Most registered consumers.
    pub max_consumers: usize,
}

impl Admission {
    pub fn new(listener: UnixListener) -> Self {
        Admission {
            listener,
            spare: open_spare(),
            rest_until: None,
            max_consumers: max_consumers(),
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
                    // Close the connection that cannot be served rather than
                    // leave it to wake every poll, then rest.
                    if self.spare.take().is_some() {
                        if let Ok(fd) =
                            rustix::net::accept_with(&self.listener, SocketFlags::CLOEXEC)
                        {
                            drop(fd);
                        }
                        self.spare = open_spare();
                    }
                    self.rest_until = Some(Instant::now() + BACKOFF);
                    return Accepted::Resting;
                }
                Err(_) => return Accepted::Empty, // EAGAIN, or a peer gone already
            }
        }
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

/// Consumers the open-file limit allows, with a quarter of it (at least
/// [`FD_RESERVE_MIN`]) and the pending connections kept apart.
fn max_consumers() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    consumers_for(limit)
}

fn consumers_for(nofile: u64) -> usize {
    let reserve = (nofile / 4).max(FD_RESERVE_MIN) + MAX_PENDING as u64;
    let n = nofile.saturating_sub(reserve) / FDS_PER_CONSUMER;
    usize::try_from(n).unwrap_or(usize::MAX).clamp(1, 1 << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consumer_cap_leaves_headroom() {
        assert_eq!(consumers_for(1024), (1024 - 256 - 64) / 2);
        assert_eq!(consumers_for(256), (256 - 64 - 64) / 2);
        assert_eq!(consumers_for(10), 1);
        assert_eq!(consumers_for(u64::MAX), 1 << 16);
    }
}
