//! The producer's control thread: accepts consumers, reads their messages,
//! and notices their deaths.
//!
//! One thread polls the listening socket, a wake-up pipe and every
//! connection. A connection must send a valid `Hello` within
//! [`HELLO_TIMEOUT`]; after that only `Released` wake-ups are accepted. Any
//! malformed, oversized or unexpected frame closes that one connection, and a
//! closed connection gives back the consumer's leases at once.
//!
//! A consumer's process is watched too (a pidfd on the pid its socket
//! reports): children it forked (DataLoader workers) keep copies of its
//! socket and can outlive it, so a consumer killed with such children alive
//! never closes its connection. Its exit drops it all the same.
//!
//! Hostile or broken peers are bounded ([`super::admission`]): a new
//! connection is read at once (a real consumer's hello is already queued),
//! at most 64 connections (fewer under a small open-file limit) wait for
//! their hello, the oldest closed for a newer one, frames from consumers
//! are at most [`wire::MAX_REQUEST_FRAME`] bytes, and consumers are capped
//! from the open-file limit.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use super::admission::{Accepted, Admission};
use super::Shared;
use crate::wire::{
    self, Fill, FrameReader, Hello, Role, ToConsumer, ToProducer, MAGIC, PROTOCOL_VERSION,
};

/// How long a new connection has to say hello.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A consumer that does not take a frame for this long is dropped.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections accepted per round of the poll loop.
const ACCEPTS_PER_ROUND: usize = 128;
/// A status reply not taken within this long is dropped.
const STATUS_SEND_TIMEOUT: Duration = Duration::from_millis(200);

enum Conn {
    /// Accepted; no hello yet.
    Handshake {
        sock: Arc<UnixStream>,
        pid: u32,
        since: Instant,
    },
    /// A registered consumer, and its process when it can be watched.
    Consumer {
        sock: Arc<UnixStream>,
        id: u64,
        process: Option<OwnedFd>,
    },
}

impl Conn {
    fn sock(&self) -> &Arc<UnixStream> {
        match self {
            Conn::Handshake { sock, .. } | Conn::Consumer { sock, .. } => sock,
        }
    }

    /// The consumer's pidfd: readable once its process has exited.
    fn process(&self) -> Option<&OwnedFd> {
        match self {
            Conn::Consumer { process, .. } => process.as_ref(),
            Conn::Handshake { .. } => None,
        }
    }
}

/// A pidfd on the consumer process `pid` (from `SO_PEERCRED`, so in this
/// process's pid namespace; 0 when it is not visible here). None for this
/// process itself (a consumer in the producer's own process) and where
/// pidfds are not available (Linux before 5.3): then only the socket's
/// closing tells.
fn watch_process(pid: u32) -> Option<OwnedFd> {
    if pid == std::process::id() {
        return None;
    }
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Runs until the wake pipe is written to or closed.
pub(crate) fn run(shared: Arc<Shared>, listener: UnixListener, wake: OwnedFd) {
    let uid = rustix::process::getuid().as_raw();
    let mut admission = Admission::new(listener);
    let mut conns: Vec<(Conn, FrameReader)> = Vec::new();
    loop {
        // A consumer the publisher removed (a failed send) had its socket
        // shut down, so poll reports it and it is dropped below like any
        // closed connection.
        let polled = match poll_all(&wake, &mut admission, &conns) {
            Round::Polled(polled) => polled,
            Round::Interrupted => continue,
            Round::Failed => return,
        };
        if polled.ready[0] {
            return; // shutdown
        }
        let dead = serve_ready(&shared, &mut conns, &polled);
        close_all(&shared, &mut conns, dead);
        if polled.listening && polled.ready[1] {
            accept_all(&shared, &mut admission, uid, &mut conns);
        }
    }
}

/// What one poll of the control thread's descriptors saw.
struct Polled {
    /// Whether each descriptor polled is ready: the wake pipe, the
    /// listener while it listens, every connection, then the processes of
    /// the consumers watched.
    ready: Vec<bool>,
    /// The listener was polled (second).
    listening: bool,
    /// Where the connections begin in `ready`.
    first: usize,
    /// The connections whose processes were polled, in order.
    watched: Vec<usize>,
}

/// How a poll ended.
enum Round {
    Polled(Polled),
    /// A signal came first: poll again.
    Interrupted,
    /// Polling failed: the control thread stops.
    Failed,
}

/// Polls the wake pipe, the listener (unless it rests), every connection
/// and the processes of the consumers watched, for at most a second.
fn poll_all(wake: &OwnedFd, admission: &mut Admission, conns: &[(Conn, FrameReader)]) -> Round {
    let rest = admission.resting_for();
    let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(conns.len() + 2);
    fds.push(PollFd::new(wake, PollFlags::IN));
    let listening = match admission.listener() {
        Some(l) => {
            fds.push(PollFd::new(l, PollFlags::IN));
            true
        }
        None => false,
    };
    let first = fds.len();
    for (c, _) in conns {
        fds.push(PollFd::new(c.sock().as_ref(), PollFlags::IN));
    }
    // Then the processes of the consumers watched, in order.
    let watched: Vec<usize> = (0..conns.len())
        .filter(|&i| conns[i].0.process().is_some())
        .collect();
    for &i in &watched {
        if let Some(pidfd) = conns[i].0.process() {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
    }
    let wait = rest
        .unwrap_or(Duration::from_secs(1))
        .min(Duration::from_secs(1));
    let timeout = Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos() as i64,
    };
    if let Err(e) = rustix::event::poll(&mut fds, Some(&timeout)) {
        if e == rustix::io::Errno::INTR {
            return Round::Interrupted;
        }
        return Round::Failed;
    }
    let ready = fds.iter().map(|f| !f.revents().is_empty()).collect();
    Round::Polled(Polled {
        ready,
        listening,
        first,
        watched,
    })
}

/// Serves the connections the poll found ready; returns those to close
/// (ascending): closed or failed, silent past [`HELLO_TIMEOUT`], or whose
/// consumer's process exited.
fn serve_ready(shared: &Shared, conns: &mut [(Conn, FrameReader)], polled: &Polled) -> Vec<usize> {
    let Polled {
        ready,
        first,
        watched,
        ..
    } = polled;
    let mut exited = vec![false; conns.len()];
    for (k, &i) in watched.iter().enumerate() {
        exited[i] = ready[first + conns.len() + k];
    }
    let mut dead = Vec::new();
    for (i, (conn, reader)) in conns.iter_mut().enumerate() {
        let timed_out =
            matches!(conn, Conn::Handshake { since, .. } if since.elapsed() > HELLO_TIMEOUT);
        // An exited consumer's last releases are read before it goes.
        let closed = ready[first + i] && !serve(shared, conn, reader);
        if timed_out || closed || exited[i] {
            dead.push(i);
        }
    }
    dead
}

/// Closes the connections at `indices` (ascending), giving back the leases
/// of the consumers among them.
fn close_all(shared: &Shared, conns: &mut Vec<(Conn, FrameReader)>, indices: Vec<usize>) {
    for i in indices.into_iter().rev() {
        let (conn, _) = conns.remove(i);
        if let Conn::Consumer { id, .. } = conn {
            let mut state = shared.lock();
            state.remove_consumer(id);
            shared.notify(state);
        }
        let _ = conn.sock().shutdown(std::net::Shutdown::Both);
    }
}

/// Accepts what waits, serving each new connection at once; keeps at most
/// `max_pending` connections waiting for their hello.
fn accept_all(
    shared: &Shared,
    admission: &mut Admission,
    uid: u32,
    conns: &mut Vec<(Conn, FrameReader)>,
) {
    // Bounded per round, so that a flood of connections cannot starve the
    // consumers' own messages.
    for _ in 0..ACCEPTS_PER_ROUND {
        let fd = match admission.accept() {
            Accepted::Conn(fd) => fd,
            Accepted::Empty => return,
            Accepted::OutOfFds => {
                // Room first from the oldest silent connection; else shed.
                match conns
                    .iter()
                    .position(|(c, _)| matches!(c, Conn::Handshake { .. }))
                {
                    Some(oldest) => {
                        close_all(shared, conns, vec![oldest]);
                        continue;
                    }
                    None => {
                        admission.shed();
                        return;
                    }
                }
            }
        };
        let sock = UnixStream::from(fd);
        if let Some(conn) = admit(shared, sock, uid, admission.max_consumers, conns) {
            conns.push(conn);
            close_oldest_pending(shared, conns, admission.max_pending);
        }
    }
}

/// A new connection, served at once: None when it is refused (another
/// user, no room for another consumer) or already done with (closed, a
/// status query answered).
fn admit(
    shared: &Shared,
    sock: UnixStream,
    uid: u32,
    max_consumers: usize,
    conns: &[(Conn, FrameReader)],
) -> Option<(Conn, FrameReader)> {
    let cred = crate::peer::peer_cred(&sock).ok()?;
    if cred.uid != uid {
        refuse_now(
            &sock,
            format!(
                "refused a connection from uid {} (the producer runs as uid {uid}); run the \
                 consumer as the producer's user",
                cred.uid
            ),
        );
        return None;
    }
    let consumers = conns
        .iter()
        .filter(|(c, _)| matches!(c, Conn::Consumer { .. }))
        .count();
    if consumers >= max_consumers {
        refuse_now(
            &sock,
            format!(
                "the producer already serves {consumers} consumers, the most its open-file \
                 limit allows; raise the producer's limit (`ulimit -n`) or start another \
                 producer"
            ),
        );
        return None;
    }
    let _ = sock.set_write_timeout(Some(SEND_TIMEOUT));
    let mut conn = Conn::Handshake {
        sock: Arc::new(sock),
        pid: cred.pid.unwrap_or(0),
        since: Instant::now(),
    };
    let mut reader = FrameReader::with_limit(wire::MAX_REQUEST_FRAME);
    if !serve(shared, &mut conn, &mut reader) {
        let _ = conn.sock().shutdown(std::net::Shutdown::Both);
        return None;
    }
    Some((conn, reader))
}

/// Closes the oldest connections waiting for their hello beyond `max`.
fn close_oldest_pending(shared: &Shared, conns: &mut Vec<(Conn, FrameReader)>, max: usize) {
    let pending: Vec<usize> = conns
        .iter()
        .enumerate()
        .filter(|(_, (c, _))| matches!(c, Conn::Handshake { .. }))
        .map(|(i, _)| i)
        .collect();
    if pending.len() > max {
        // The oldest waits longest: a real consumer says hello at once.
        close_all(shared, conns, pending[..pending.len() - max].to_vec());
    }
}

/// Tells a connection why it is refused, without waiting for it to read.
fn refuse_now(sock: &UnixStream, reason: String) {
    let _ = sock.set_nonblocking(true);
    send_refusal(sock, reason);
}

/// Reads what a connection sent; false means close it.
fn serve(shared: &Shared, conn: &mut Conn, reader: &mut FrameReader) -> bool {
    if !read_ready(conn, reader) {
        return false;
    }
    loop {
        let msg = match reader.next_frame::<ToProducer>() {
            Ok(Some(msg)) => msg,
            Ok(None) => return true,
            Err(_) => return false,
        };
        if !handle(shared, conn, msg) {
            return false;
        }
    }
}

/// Reads what the connection has sent, up to a full reader; false when it
/// closed or failed.
fn read_ready(conn: &Conn, reader: &mut FrameReader) -> bool {
    loop {
        match reader.fill(conn.sock().as_fd(), false, None) {
            Ok(Fill::Data) => {}
            Ok(Fill::WouldBlock) => return true,
            Ok(Fill::Eof) | Err(_) => return false,
        }
        if reader.is_full() {
            return true; // decode what we have before reading more
        }
    }
}

/// Acts on one message of a connection; false means close it.
fn handle(shared: &Shared, conn: &mut Conn, msg: ToProducer) -> bool {
    match (&*conn, msg) {
        (Conn::Handshake { sock, pid, .. }, ToProducer::Hello(hello)) => {
            let (sock, pid) = (Arc::clone(sock), *pid);
            let Some(id) = greet(shared, &sock, pid, hello) else {
                return false;
            };
            *conn = Conn::Consumer {
                sock,
                id,
                process: watch_process(pid),
            };
            true
        }
        (Conn::Consumer { id, .. }, ToProducer::Released) => {
            // The release itself is in the consumer's ledger: wake the
            // publisher, which looks there.
            let state = shared.lock();
            let alive = state.has_consumer(*id);
            shared.notify(state);
            alive
        }
        (Conn::Consumer { id, .. }, ToProducer::Leaving) => {
            // Closed with batches alive: it keeps their slots (released
            // through its ledger) and its connection, and gets nothing
            // more; a producer with no one else attached goes idle.
            let mut state = shared.lock();
            state.leave(*id);
            shared.notify(state);
            true
        }
        (Conn::Consumer { id, .. }, ToProducer::Start(start)) => {
            let mut state = shared.lock();
            let placed = state.start(*id, start);
            shared.notify(state);
            placed
        }
        _ => false, // a message out of place
    }
}

/// Answers a hello: a status query gets its report, a consumer is
/// registered. The consumer's id, or None to close the connection (a
/// refusal sent, a status answered).
fn greet(shared: &Shared, sock: &Arc<UnixStream>, pid: u32, hello: Hello) -> Option<u64> {
    if hello.magic != MAGIC {
        return refuse(sock, "not a batchcast client".into());
    }
    if hello.version != PROTOCOL_VERSION {
        return refuse(
            sock,
            format!(
                "protocol version mismatch: the producer speaks {PROTOCOL_VERSION}, \
                 this consumer {}; use the same batchcast version on both sides",
                hello.version
            ),
        );
    }
    let ch = match hello.role {
        Role::Status => {
            let report = shared.lock().report();
            if let Ok(frame) = report.into_frame() {
                let _ = sock.set_write_timeout(Some(STATUS_SEND_TIMEOUT));
                let _ = wire::send_frame(sock.as_fd(), &frame);
            }
            return None;
        }
        Role::Consumer(ch) => ch,
    };
    if ch.label.len() > wire::MAX_LABEL_LEN {
        return refuse(
            sock,
            format!(
                "a label of {} bytes is too long; use at most {} bytes",
                ch.label.len(),
                wire::MAX_LABEL_LEN
            ),
        );
    }
    if let Some(bs) = ch.batch_size {
        if bs == 0 || bs > u32::MAX as u64 {
            return refuse(
                sock,
                format!(
                    "batch_size {bs} is out of range; use an integer from 1 \
                     to {}, or None for the producer's batch size",
                    u32::MAX
                ),
            );
        }
    }
    let mut state = shared.lock();
    let id = state.add_consumer(Arc::clone(sock), pid, ch)?;
    shared.notify(state);
    Some(id)
}

/// Tells a connection why it is refused (waiting for it to read up to the
/// socket's write timeout); None, for [`greet`] to close it.
fn refuse(sock: &UnixStream, reason: String) -> Option<u64> {
    send_refusal(sock, reason);
    None
}

/// Sends a connection the reason it is refused.
fn send_refusal(sock: &UnixStream, reason: String) {
    if let Ok(frame) = wire::encode(&ToConsumer::Refused(reason)) {
        let _ = wire::send_frame(sock.as_fd(), &frame);
    }
}
