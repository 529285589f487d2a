//! Attaching to a producer: connect to its socket (same uid), say hello,
//! receive the welcome and its descriptors, and map and validate every
//! region they name; a consumer attached `deferred` joins the stream at
//! its `Start` ([`Consumer::start_at`]). [`Consumer::connect`](super::Consumer::connect) does
//! it once; a consumer that lost a producer that resumes its stream does it
//! again with the restarted one (`super::reattach`).

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use super::link::Link;
use super::watch::ProducerWatch;
use super::{Consumer, ConsumerOptions, TICK};
use crate::arena::ArenaView;
use crate::board::BoardView;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::holds::HoldsView;
use crate::ledger::Ledger;
use crate::mirror::MirrorSpec;
use crate::wire::{
    self, ConsumerHello, Fill, FrameReader, Hello, JoinPolicy, Position, Role, ToConsumer,
    ToProducer, Welcome, MAGIC, PROTOCOL_VERSION,
};

/// What attaching to a producer yields.
pub(super) struct Attached {
    pub link: Link,
    pub reader: FrameReader,
    pub arena: ArenaView,
    pub welcome: Welcome,
    pub watch: Option<ProducerWatch>,
    /// The device mirrors the welcome named, with their fds.
    pub mirrors: Vec<(MirrorSpec, OwnedFd)>,
}

/// How to attach.
pub(super) struct Attach {
    /// The join policy.
    pub join: JoinPolicy,
    /// How long to wait for the socket to appear.
    pub timeout: Option<Duration>,
    /// Remove a killed producer's files if found (not while waiting for
    /// its restart: the restarted producer replaces them).
    pub clear: bool,
    /// Say hello `deferred`: placed only at the consumer's `Start`.
    pub deferred: bool,
}

impl Consumer {
    /// Where a deferred consumer ([`ConsumerOptions::deferred`]) starts:
    /// at `start` (a saved position, as [`ConsumerOptions::start`]), or
    /// per its join policy with None. Sent to the producer now; a deferred
    /// consumer that reads first starts per its join policy.
    ///
    /// A producer that cannot be told has died: the next read says so (or
    /// waits for its restart, and asks it for `start`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the consumer was not deferred or
    /// has started.
    pub fn start_at(&mut self, start: Option<Position>) -> Result<()> {
        if !self.parked {
            return Err(Error::InvalidArgument(format!(
                "the consumer of {:?} has already joined the stream: give its start before \
                 its first read (connect it with `deferred`)",
                self.name
            )));
        }
        self.opts.start = start;
        self.pos = start;
        self.restore = start;
        self.parked = false;
        match self.link.send(&ToProducer::Start(start)) {
            Ok(()) => {
                self.awaiting_start = true;
                Ok(())
            }
            Err(Error::Io { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Attaches to the producer at `endpoint` as `how` says.
pub(super) fn attach(
    endpoint: &Endpoint,
    opts: &ConsumerOptions,
    how: Attach,
    interrupt: &mut dyn FnMut() -> bool,
) -> Result<Attached> {
    let name = endpoint.name();
    let sock = connect_socket(endpoint, how.timeout, how.clear, interrupt)?;
    check_peer(&sock)?;
    say_hello(&sock, opts, &how)?;
    let (reader, welcome, fds) = await_welcome(&sock, name, interrupt)?;
    check_welcome(&welcome)?;
    if fds.len() != 4 + welcome.mirrors.len() {
        // Every descriptor received is closed as `fds` drops.
        return Err(Error::Protocol(format!(
            "the welcome named {} device mirrors but carried {} descriptors, not {}",
            welcome.mirrors.len(),
            fds.len(),
            4 + welcome.mirrors.len()
        )));
    }
    let mut fds = fds.into_iter();
    let (Some(arena_fd), Some(board_fd), Some(ledger_fd), Some(holds_fd)) =
        (fds.next(), fds.next(), fds.next(), fds.next())
    else {
        return Err(Error::Protocol(
            "the welcome did not carry the arena, board, ledger and holder-count descriptors"
                .into(),
        ));
    };
    let slot_size = usize::try_from(welcome.slot_size)
        .map_err(|_| Error::Protocol("slot size out of range".into()))?;
    let slots = welcome.slots as usize;
    let arena = ArenaView::map(arena_fd, slots, slot_size, opts.copy_on_write)?;
    let arena_len = arena.mapped_len() as u64;
    for spec in &welcome.mirrors {
        spec.check(arena_len)?;
    }
    let mirrors = welcome.mirrors.iter().cloned().zip(fds).collect();
    let board = BoardView::map(board_fd)?;
    let ledger = Ledger::open(ledger_fd, slots)?;
    let holds = HoldsView::open(holds_fd, slots, &opts.warn);
    let watch = ProducerWatch::open(name, welcome.producer_pid);
    Ok(Attached {
        link: Link::new(sock, board, ledger, holds),
        reader,
        arena,
        welcome,
        watch,
        mirrors,
    })
}

/// Refuses a producer that runs as another user.
fn check_peer(sock: &UnixStream) -> Result<()> {
    let cred = crate::peer::peer_cred(sock)?;
    let ours = rustix::process::getuid().as_raw();
    if cred.uid != ours {
        return Err(Error::ForeignPeer {
            peer: cred.uid,
            ours,
        });
    }
    Ok(())
}

/// Sends the consumer's hello: its options, and how it joins.
fn say_hello(sock: &UnixStream, opts: &ConsumerOptions, how: &Attach) -> Result<()> {
    let hello = ToProducer::Hello(Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        role: Role::Consumer(ConsumerHello {
            batch_size: opts.batch_size,
            drop_last: opts.drop_last,
            join: how.join,
            label: opts.label.clone(),
            on_evict: opts.on_evict,
            start: opts.start,
            deferred: how.deferred,
        }),
    });
    wire::send_frame(sock, &wire::encode(&hello)?)
}

/// Waits for the producer's welcome, and the descriptors that came with
/// it; a refusal or a shutdown instead fails with its reason.
fn await_welcome(
    sock: &UnixStream,
    name: &str,
    interrupt: &mut dyn FnMut() -> bool,
) -> Result<(FrameReader, Welcome, Vec<OwnedFd>)> {
    let mut reader = FrameReader::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    // Frames read with the end of the stream (a shutdown just before
    // the producer exits) are decoded before the end counts.
    let mut eof = false;
    loop {
        if let Some(msg) = reader.next_frame::<ToConsumer>()? {
            return match msg {
                ToConsumer::Welcome(w) => Ok((reader, w, fds)),
                ToConsumer::Refused(reason) => Err(Error::JoinRefused {
                    name: name.to_owned(),
                    reason,
                }),
                ToConsumer::Shutdown(reason) => Err(Error::ProducerStopped {
                    name: name.to_owned(),
                    reason,
                }),
                other => Err(Error::Protocol(format!(
                    "expected a welcome, got {other:?}"
                ))),
            };
        }
        if eof {
            return Err(Error::ProducerGone {
                name: name.to_owned(),
                waited_secs: None,
            });
        }
        if !wait_readable(sock, TICK)? {
            if interrupt() {
                return Err(Error::Interrupted);
            }
            continue;
        }
        eof = reader.fill(sock, false, Some(&mut fds))? == Fill::Eof;
    }
}

/// Refuses a welcome this consumer cannot follow: another protocol
/// version, an oversized stream identity, a batch size of 0, more device
/// mirrors than [`MAX_MIRRORS`](crate::MAX_MIRRORS).
fn check_welcome(welcome: &Welcome) -> Result<()> {
    if welcome.version != PROTOCOL_VERSION {
        return Err(Error::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: welcome.version,
        });
    }
    if welcome
        .identity
        .as_ref()
        .is_some_and(|i| i.len() > crate::MAX_IDENTITY)
    {
        return Err(Error::Protocol(format!(
            "the welcome's stream identity is longer than {} bytes",
            crate::MAX_IDENTITY
        )));
    }
    if welcome.batch_size == Some(0) {
        return Err(Error::Protocol(
            "the welcome announced a batch size of 0".into(),
        ));
    }
    if welcome.mirrors.len() > crate::MAX_MIRRORS {
        return Err(Error::Protocol(format!(
            "the welcome named {} device mirrors, more than {}",
            welcome.mirrors.len(),
            crate::MAX_MIRRORS
        )));
    }
    Ok(())
}

fn connect_socket(
    endpoint: &Endpoint,
    timeout: Option<Duration>,
    clear: bool,
    interrupt: &mut dyn FnMut() -> bool,
) -> Result<UnixStream> {
    let path = endpoint.socket_path();
    let deadline = timeout.map(|t| Instant::now() + t);
    // Watched before each attempt, so that a socket made after a failed
    // one wakes the wait below.
    let watch = timeout.and_then(|_| DirWatch::new(endpoint));
    loop {
        match endpoint.connect_or_clear(clear)? {
            Some(sock) => return Ok(sock),
            None => {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                let Some(left) = left.filter(|l| !l.is_zero()) else {
                    return Err(Error::ProducerNotFound {
                        name: endpoint.name().to_owned(),
                        socket: path,
                        waited_secs: timeout.map(|t| t.as_secs_f64()),
                    });
                };
                match &watch {
                    // Until a file appears or changes in the directory, or
                    // a tick passes (for the interrupt hook).
                    Some(w) => w.wait(left.min(TICK)),
                    // No watch (inotify refused): look again shortly.
                    None => std::thread::sleep(Duration::from_millis(20).min(left)),
                }
                if interrupt() {
                    return Err(Error::Interrupted);
                }
            }
        }
    }
}

/// An inotify watch on the socket directory: the signal that a producer's
/// socket may have appeared. Only events on the socket's own name wake the
/// wait, so that the lock files that consumers and producers create and
/// remove around it do not.
struct DirWatch {
    fd: OwnedFd,
    socket: std::ffi::OsString,
}

impl DirWatch {
    fn new(endpoint: &Endpoint) -> Option<DirWatch> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        let socket = endpoint.socket_path().file_name()?.to_owned();
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        let what = WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ATTRIB;
        inotify::add_watch(&fd, endpoint.dir(), what).ok()?;
        Some(DirWatch { fd, socket })
    }

    /// Waits up to `timeout` for an event on the socket's name.
    fn wait(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            let ts = Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos() as i64,
            };
            if left.is_zero() || !matches!(rustix::event::poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
            {
                return;
            }
            if self.drain() {
                return;
            }
        }
    }

    /// Reads the events queued; true if one is about the socket.
    fn drain(&self) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = rustix::fs::inotify::Reader::new(&self.fd, &mut buf);
        let mut ours = false;
        loop {
            match reader.next() {
                Ok(event) => {
                    ours |= event
                        .file_name()
                        .is_some_and(|n| n.to_bytes() == self.socket.as_bytes());
                }
                // Drained (AGAIN), or the watch failed: look at the socket.
                Err(rustix::io::Errno::AGAIN) => return ours,
                Err(_) => return true,
            }
        }
    }
}

/// Waits up to `timeout` for `sock` to be readable (or closed).
fn wait_readable(sock: &UnixStream, timeout: Duration) -> Result<bool> {
    let mut fds = [PollFd::new(sock, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(Error::io("cannot wait for the producer", e)),
    }
}
