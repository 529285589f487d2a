//! The producer's control thread: accepts consumers, reads their messages,
//! and notices their deaths.
//!
//! One thread polls the listening socket, a wake-up pipe and every
//! connection. A connection must send a valid `Hello` within
//! [`HELLO_TIMEOUT`]; after that only `Released` wake-ups are accepted. Any
//! malformed, oversized or unexpected frame closes that one connection, and a
//! closed connection gives back the consumer's leases at once.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use super::Shared;
use crate::wire::{self, Fill, FrameReader, Role, ToConsumer, ToProducer, MAGIC, PROTOCOL_VERSION};

/// How long a new connection has to say hello.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A consumer that does not take a frame for this long is dropped.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);

enum Conn {
    /// Accepted; no hello yet.
    Handshake {
        sock: Arc<UnixStream>,
        pid: u32,
        since: Instant,
    },
    /// A registered consumer.
    Consumer { sock: Arc<UnixStream>, id: u64 },
}

impl Conn {
    fn sock(&self) -> &Arc<UnixStream> {
        match self {
            Conn::Handshake { sock, .. } | Conn::Consumer { sock, .. } => sock,
        }
    }
}

/// Runs until the wake pipe is written to or closed.
pub(crate) fn run(shared: Arc<Shared>, listener: UnixListener, wake: OwnedFd) {
    let uid = rustix::process::getuid().as_raw();
    let mut conns: Vec<(Conn, FrameReader)> = Vec::new();
    loop {
        // A consumer the publisher removed (a failed send) had its socket
        // shut down, so poll reports it and it is dropped below like any
        // closed connection.
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(conns.len() + 2);
        fds.push(PollFd::new(&wake, PollFlags::IN));
        fds.push(PollFd::new(&listener, PollFlags::IN));
        for (c, _) in &conns {
            fds.push(PollFd::new(c.sock().as_ref(), PollFlags::IN));
        }
        let timeout = Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        if let Err(e) = rustix::event::poll(&mut fds, Some(&timeout)) {
            if e == rustix::io::Errno::INTR {
                continue;
            }
            return;
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        if ready[0] {
            return; // shutdown
        }
        // Serve the connections that were polled; newly accepted ones are
        // polled from the next round on.
        let polled = conns.len();
        if ready[1] {
            accept_all(&listener, uid, &mut conns);
        }
        let mut dead = Vec::new();
        for (i, (conn, reader)) in conns.iter_mut().enumerate().take(polled) {
            let timed_out =
                matches!(conn, Conn::Handshake { since, .. } if since.elapsed() > HELLO_TIMEOUT);
            if timed_out || (ready[i + 2] && !serve(&shared, conn, reader)) {
                dead.push(i);
            }
        }
        for i in dead.into_iter().rev() {
            let (conn, _) = conns.swap_remove(i);
            if let Conn::Consumer { id, .. } = conn {
                let mut state = shared.lock();
                state.remove_consumer(id);
                shared.notify(state);
            }
            let _ = conn.sock().shutdown(std::net::Shutdown::Both);
        }
    }
}

fn accept_all(listener: &UnixListener, uid: u32, conns: &mut Vec<(Conn, FrameReader)>) {
    loop {
        match rustix::net::accept_with(listener, rustix::net::SocketFlags::CLOEXEC) {
            Ok(fd) => {
                let sock = UnixStream::from(fd);
                let cred = match rustix::net::sockopt::socket_peercred(&sock) {
                    Ok(c) => c,
                    Err(_) => continue,
                };
                if cred.uid.as_raw() != uid {
                    let reason = format!(
                        "refused a connection from uid {} (the producer runs as uid {uid})",
                        cred.uid.as_raw()
                    );
                    if let Ok(frame) = wire::encode(&ToConsumer::Refused(reason)) {
                        let _ = sock.set_write_timeout(Some(Duration::from_millis(100)));
                        let _ = wire::send_frame(&sock, &frame);
                    }
                    continue;
                }
                let _ = sock.set_write_timeout(Some(SEND_TIMEOUT));
                conns.push((
                    Conn::Handshake {
                        sock: Arc::new(sock),
                        pid: cred.pid.as_raw_nonzero().get() as u32,
                        since: Instant::now(),
                    },
                    FrameReader::new(),
                ));
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return, // EAGAIN: nothing more to accept
        }
    }
}

/// Reads what a connection sent; false means close it.
fn serve(shared: &Shared, conn: &mut Conn, reader: &mut FrameReader) -> bool {
    loop {
        match reader.fill(conn.sock().as_fd(), false, None) {
            Ok(Fill::Data) => {}
            Ok(Fill::WouldBlock) => break,
            Ok(Fill::Eof) | Err(_) => return false,
        }
        if reader.pending() > wire::MAX_FRAME + 4 {
            break; // decode what we have before reading more
        }
    }
    loop {
        let msg = match reader.next_frame::<ToProducer>() {
            Ok(Some(msg)) => msg,
            Ok(None) => return true,
            Err(_) => return false,
        };
        match (&*conn, msg) {
            (Conn::Handshake { sock, pid, .. }, ToProducer::Hello(hello)) => {
                let refuse = |reason: String| {
                    if let Ok(frame) = wire::encode(&ToConsumer::Refused(reason)) {
                        let _ = wire::send_frame(sock.as_fd(), &frame);
                    }
                    false
                };
                if hello.magic != MAGIC {
                    return refuse("not a batchcast client".into());
                }
                if hello.version != PROTOCOL_VERSION {
                    return refuse(format!(
                        "protocol version mismatch: the producer speaks {PROTOCOL_VERSION}, \
                         this consumer {}; use the same batchcast version on both sides",
                        hello.version
                    ));
                }
                match hello.role {
                    Role::Status => {
                        let report = shared.lock().report();
                        if let Ok(frame) = wire::encode(&ToConsumer::Status(report)) {
                            let _ = wire::send_frame(sock.as_fd(), &frame);
                        }
                        return false;
                    }
                    Role::Consumer(ch) => {
                        if let Some(bs) = ch.batch_size {
                            if bs == 0 || bs > u32::MAX as u64 {
                                return refuse(format!(
                                    "batch_size {bs} is out of range; use an integer from 1 \
                                     to {}, or None for the producer's batch size",
                                    u32::MAX
                                ));
                            }
                        }
                        let sock = Arc::clone(sock);
                        let pid = *pid;
                        let id = {
                            let mut state = shared.lock();
                            let Some(id) = state.add_consumer(Arc::clone(&sock), pid, ch) else {
                                return false;
                            };
                            shared.notify(state);
                            id
                        };
                        *conn = Conn::Consumer { sock, id };
                    }
                }
            }
            (Conn::Consumer { id, .. }, ToProducer::Released) => {
                // The release itself is in the consumer's ledger: wake the
                // publisher, which looks there.
                let id = *id;
                let state = shared.lock();
                let alive = state.has_consumer(id);
                shared.notify(state);
                if !alive {
                    return false;
                }
            }
            _ => return false, // a message out of place
        }
    }
}
