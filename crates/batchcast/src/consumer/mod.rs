//! The consumer: attaches to a producer by name and reads its batches.
//!
//! [`Consumer::connect`] finds the producer's socket, says hello, receives
//! the arena fd and maps it read-only. [`Consumer::next_event`] then yields,
//! in order, [`Event::EpochStart`] (with the exact number of batches when the
//! producer knows its epoch's size), the epoch's [`Event::Batch`]es cut to the
//! consumer's batch size (an [`Event::Trigger`] after the last where one
//! fired at the epoch's end), [`Event::EpochEnd`], and so on, and finally
//! [`Event::Finished`] when the producer shuts down cleanly. If the producer
//! dies, the next call fails with [`Error::ProducerGone`]: its socket closing
//! is the signal, so no heartbeat is involved, or, where forked children of
//! the producer keep copies of its socket open, its process exiting
//! (`watch`: a pidfd checked on quiet ticks).
//!
//! Batches come from the board (`crate::board`): after `EpochStart {
//! first_seq }` the consumer reads every batch the board publishes from
//! `first_seq` until the epoch's `end_seq`. To never mistake a batch of the
//! next epoch for one of this epoch, it reads the board's `published`
//! counter *before* it reads the socket: any `EpochEnd` sent before those
//! batches were published is then already in the socket. While there is
//! nothing to do it sleeps on the board's wake word, for at most a tick, so
//! that the interrupt hook runs and a dead producer's closed socket is seen
//! within a tick.
//!
//! Errors keep their place: a batch that cannot be read or built (producer
//! batches of different per-sample shapes cut into one consumer batch:
//! [`Error::InvalidBatch`]) is queued as an error where the batch would have
//! been, so every batch before it is delivered first. The call after the
//! error goes on with what follows it (the next batch, whose `index` shows
//! the gap, or the epoch's end), as a PyTorch DataLoader does after a worker
//! raised; a caller that wants to stop, stops. A dead producer, by contrast,
//! fails the next call at once ([`Error::ProducerGone`]).
//!
//! Batches are taken from the board lazily, one consumer batch at a time,
//! so that a consumer holds (has acquired) only what it is about to hand
//! out: if the producer evicts it for falling behind (see
//! `crate::ledger`), only those slots stay out of rotation. An evicted
//! consumer stops reading the board at once; when the producer's `Evicted`
//! message arrives its next read fails with [`Error::FellBehind`], or, with
//! [`OnEvict::Rejoin`], its epoch ends short and it follows the next one.

mod assemble;
mod batch;
mod link;
pub mod rebatch;
mod waiter;
mod watch;

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use assemble::Assembler;
pub use batch::{Batch, Keepalive, Leaf, SlotLease};
use link::Link;
use rebatch::batches_in;
pub use waiter::Waiter;
use watch::ProducerWatch;

use crate::arena::ArenaView;
use crate::board::{BoardView, Woken};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::holds::HoldsView;
use crate::ledger::Ledger;
use crate::warn::Warn;
use crate::wire::{
    self, ConsumerHello, Fill, FrameReader, Hello, JoinPolicy, OnEvict, Role, ShutdownReason,
    ToConsumer, ToProducer, TriggerFired, Welcome, MAGIC, PROTOCOL_VERSION,
};

/// Most triggers held back inside one epoch (a producer announces one per
/// boundary).
const MAX_HELD_TRIGGERS: usize = 64;

/// How often blocking calls wake to run the interrupt hook.
const TICK: Duration = Duration::from_millis(100);

/// Consumer settings.
#[derive(Debug, Clone, Default)]
pub struct ConsumerOptions {
    /// Rows per batch; `None`: the producer's batch size.
    pub batch_size: Option<u64>,
    /// Drop each epoch's last, smaller batch.
    pub drop_last: bool,
    /// How to join a producer that is already running.
    pub join: JoinPolicy,
    /// How long to wait for the producer's socket to appear; `None`: fail at
    /// once if it is not there.
    pub connect_timeout: Option<Duration>,
    /// Shown by `batchcast status`.
    pub label: String,
    /// Socket directory; `None`: the default.
    pub dir: Option<PathBuf>,
    /// Give a writer a private copy of each page it writes in place instead of
    /// SIGSEGV (for languages that can write through a view: Python).
    pub copy_on_write: bool,
    /// What to do if the producer evicts this consumer for falling behind.
    pub on_evict: OnEvict,
    /// Where warnings go (evicted, rejoining at the next epoch); stderr by
    /// default.
    pub warn: Warn,
}

/// An epoch as this consumer will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochInfo {
    /// The epoch number.
    pub epoch: u64,
    /// Rows this consumer will receive, when the producer knows.
    pub samples: Option<u64>,
    /// Batches this consumer will receive, when the producer knows.
    pub batches: Option<u64>,
    /// This consumer's batch size.
    pub batch_size: u64,
    /// True when joined mid-epoch.
    pub partial: bool,
}

/// What [`Consumer::next_event`] returns.
pub enum Event {
    /// An epoch begins.
    EpochStart(EpochInfo),
    /// A batch.
    Batch(Batch),
    /// The epoch ended after its last batch.
    EpochEnd {
        /// The epoch.
        epoch: u64,
        /// Rows received in it.
        samples: u64,
    },
    /// The producer shut down cleanly; repeated on every later call.
    Finished(ShutdownReason),
    /// A trigger fired at an epoch boundary: after the ending epoch's last
    /// batch, before its [`Event::EpochEnd`] (so a loop over the epoch
    /// sees it), or between epochs when none was being read.
    Trigger(TriggerFired),
}

/// A consumer's own figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerStats {
    /// Batches handed out.
    pub batches: u64,
    /// Seconds spent waiting for data.
    pub wait_secs: f64,
    /// Batches received and ready but not yet handed out.
    pub lag: u64,
    /// Batches of the epoch being read that the producer has published and
    /// this consumer has not read yet: how far the producer is ahead (at
    /// most its window; 0 between epochs).
    pub behind: u64,
}

/// Where this consumer reads the board in the epoch it follows.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    /// The next batch to read.
    next: u64,
    /// The epoch's end, once its `EpochEnd` has arrived.
    end: Option<u64>,
}

/// A consumer attached to one producer.
pub struct Consumer {
    name: String,
    link: Arc<Link>,
    reader: FrameReader,
    arena: Arc<ArenaView>,
    welcome: Welcome,
    opts: ConsumerOptions,
    /// Cuts the epoch in progress into this consumer's batches.
    assembler: Option<Assembler>,
    epoch: Option<EpochInfo>,
    cursor: Option<Cursor>,
    /// Control messages received and not yet acted on (an `EpochEnd` waits
    /// for the epoch's last batches to be read).
    control: VecDeque<ToConsumer>,
    /// Rows handed out (queued) in the current epoch.
    rows: u64,
    /// What the next calls return, in order (errors in their place).
    events: VecDeque<Result<Event>>,
    finished: Option<ShutdownReason>,
    /// The producer evicted us; its `Evicted` message is on its way.
    cut_off: bool,
    /// Evicted with `OnEvict::Error`: (epoch, behind, budget).
    fell_behind: Option<(u64, u64, u64)>,
    /// The producer's process, where it can be watched.
    watch: Option<ProducerWatch>,
    /// The producer was seen dead: every later call fails at once.
    gone: bool,
    /// Triggers announced inside the epoch being read: handed out after
    /// its last batch.
    triggers: Vec<TriggerFired>,
}

impl Consumer {
    /// Connects to the producer `name` and waits for its welcome (which
    /// comes once the producer has sized its arena). `interrupt` is called
    /// every 100 ms while waiting; returning true stops with
    /// [`Error::Interrupted`].
    pub fn connect(
        name: &str,
        opts: ConsumerOptions,
        interrupt: &mut dyn FnMut() -> bool,
    ) -> Result<Consumer> {
        if opts.batch_size == Some(0) {
            return Err(Error::InvalidArgument(
                "batch_size must be at least 1 (or None for the producer's batch size)".into(),
            ));
        }
        if opts.label.len() > wire::MAX_LABEL_LEN {
            return Err(Error::InvalidArgument(format!(
                "label is {} bytes long; use at most {} bytes (it is shown by `batchcast status`)",
                opts.label.len(),
                wire::MAX_LABEL_LEN
            )));
        }
        let endpoint = Endpoint::resolve(name, opts.dir.as_deref())?;
        let sock = connect_socket(&endpoint, opts.connect_timeout, interrupt)?;
        let cred = crate::peer::peer_cred(&sock)?;
        let ours = rustix::process::getuid().as_raw();
        if cred.uid != ours {
            return Err(Error::ForeignPeer {
                peer: cred.uid,
                ours,
            });
        }
        let hello = ToProducer::Hello(Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            role: Role::Consumer(ConsumerHello {
                batch_size: opts.batch_size,
                drop_last: opts.drop_last,
                join: opts.join,
                label: opts.label.clone(),
                on_evict: opts.on_evict,
            }),
        });
        wire::send_frame(&sock, &wire::encode(&hello)?)?;
        let mut reader = FrameReader::new();
        let mut fds: Vec<OwnedFd> = Vec::new();
        let gone = || Error::ProducerGone {
            name: name.to_owned(),
        };
        // Frames read with the end of the stream (a shutdown just before
        // the producer exits) are decoded before the end counts.
        let mut eof = false;
        let welcome = loop {
            if let Some(msg) = reader.next_frame::<ToConsumer>()? {
                match msg {
                    ToConsumer::Welcome(w) => break w,
                    ToConsumer::Refused(reason) => {
                        return Err(Error::JoinRefused {
                            name: name.to_owned(),
                            reason,
                        })
                    }
                    ToConsumer::Shutdown(reason) => {
                        return Err(Error::ProducerStopped {
                            name: name.to_owned(),
                            reason,
                        })
                    }
                    other => {
                        return Err(Error::Protocol(format!(
                            "expected a welcome, got {other:?}"
                        )))
                    }
                }
            }
            if eof {
                return Err(gone());
            }
            if !wait_readable(&sock, TICK)? {
                if interrupt() {
                    return Err(Error::Interrupted);
                }
                continue;
            }
            eof = reader.fill(&sock, false, Some(&mut fds))? == Fill::Eof;
        };
        if welcome.version != PROTOCOL_VERSION {
            return Err(Error::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: welcome.version,
            });
        }
        if welcome.batch_size == Some(0) {
            return Err(Error::Protocol(
                "the welcome announced a batch size of 0".into(),
            ));
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
        let board = BoardView::map(board_fd)?;
        let ledger = Ledger::open(ledger_fd, slots)?;
        let holds = HoldsView::open(holds_fd, slots, &opts.warn);
        let watch = ProducerWatch::open(name, welcome.producer_pid);
        Ok(Consumer {
            name: name.to_owned(),
            link: Arc::new(Link::new(sock, board, ledger, holds)),
            reader,
            arena: Arc::new(arena),
            welcome,
            opts,
            assembler: None,
            epoch: None,
            cursor: None,
            control: VecDeque::new(),
            rows: 0,
            events: VecDeque::new(),
            finished: None,
            cut_off: false,
            fell_behind: None,
            watch,
            gone: false,
            triggers: Vec::new(),
        })
    }

    /// The producer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the producer said at join; its `samples_per_epoch` follows
    /// the sizes of later full epochs and those announced at epoch
    /// boundaries (a dataset that grew).
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// The epoch in progress, if any.
    pub fn epoch(&self) -> Option<&EpochInfo> {
        self.epoch.as_ref()
    }

    /// Batches in a full epoch, from what the producer announced last (at
    /// join, at the last full epoch's start or at an epoch boundary).
    pub fn batches_per_epoch(&self) -> Option<u64> {
        let bs = self.opts.batch_size.or(self.welcome.batch_size)?;
        let samples = self.welcome.samples_per_epoch?;
        Some(batches_in(samples, bs, self.opts.drop_last))
    }

    /// This consumer's figures.
    pub fn stats(&self) -> ConsumerStats {
        ConsumerStats {
            batches: self.link.delivered.load(Ordering::Relaxed),
            wait_secs: self.link.waited_ns.load(Ordering::Relaxed) as f64 / 1e9,
            lag: self
                .events
                .iter()
                .filter(|e| matches!(e, Ok(Event::Batch(_))))
                .count() as u64,
            behind: self.cursor.map_or(0, |c| {
                let published = self.link.board.published();
                c.end
                    .map_or(published, |end| end.min(published))
                    .saturating_sub(c.next)
            }),
        }
    }

    /// The next event; blocks until there is one. `interrupt` runs every
    /// 100 ms while blocked; returning true stops with
    /// [`Error::Interrupted`].
    pub fn next_event(&mut self, interrupt: &mut dyn FnMut() -> bool) -> Result<Event> {
        loop {
            // Read the wake word before looking for work: a change after
            // this point makes the sleep below return at once.
            let seen = self.link.board.wake_word();
            if let Some(event) = self.try_next_event()? {
                return Ok(event);
            }
            let t0 = Instant::now();
            let woken = self.link.board.sleep(seen, TICK);
            self.link
                .waited_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            self.link.record();
            if woken == Woken::TimedOut {
                // A quiet tick: has the producer died without a word?
                if self.producer_exited() {
                    return Err(self.gone_error());
                }
                if interrupt() {
                    return Err(Error::Interrupted);
                }
            }
        }
    }

    /// The next event if it is there now (what the producer has sent and
    /// published so far makes it), else None; never waits. The events and
    /// their order are those of [`next_event`](Self::next_event), which
    /// waits for this to return one.
    ///
    /// # Errors
    /// As [`next_event`](Self::next_event), but never
    /// [`Error::Interrupted`].
    pub fn try_next_event(&mut self) -> Result<Option<Event>> {
        if self.gone {
            return Err(self.gone_error());
        }
        loop {
            if let Some((epoch, behind, budget)) = self.fell_behind {
                return Err(Error::FellBehind {
                    name: self.name.clone(),
                    epoch,
                    behind,
                    budget,
                });
            }
            self.drain()?;
            if self.fell_behind.is_some() {
                continue;
            }
            if let Some(event) = self.events.pop_front() {
                let event = event?;
                if matches!(event, Event::Batch(_)) {
                    self.link.delivered.fetch_add(1, Ordering::Relaxed);
                    self.link.record();
                }
                return Ok(Some(event));
            }
            if let Some(reason) = &self.finished {
                return Ok(Some(Event::Finished(reason.clone())));
            }
            return Ok(None);
        }
    }

    /// Leaves the stream while batches handed out live on: the producer
    /// sends nothing more and no longer counts this consumer as attached,
    /// and the slots of those batches stay valid until they are dropped
    /// (each lease holds the connection). Drop the consumer after this; it
    /// reads nothing more.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::ProducerGone`] when the producer cannot be
    /// told (then it is gone, and the slots are the kernel's to keep).
    pub fn leave(&mut self) -> Result<()> {
        self.link.send(&ToProducer::Leaving)
    }

    /// Whether the producer's process has exited, checked now: for a
    /// caller that waits with a [`Waiter`] (`next_event` checks on its own).
    /// The first sighting is confirmed at the next check, so that what the
    /// producer sent before it died is read first; once confirmed, every
    /// later call fails with [`Error::ProducerGone`]. Always false where
    /// the producer's process cannot be watched
    /// ([`watches_producer`](Self::watches_producer)).
    pub fn producer_exited(&mut self) -> bool {
        if !self.gone && self.watch.as_mut().is_some_and(ProducerWatch::gone) {
            self.gone = true;
            self.events.clear();
        }
        self.gone
    }

    /// Whether the producer's process is watched (a pidfd), so that its
    /// death is seen even while its forked children keep its socket open.
    /// Not where the welcome's pid is not the producer as this process
    /// sees it (another pid namespace) or pidfds are missing (Linux < 5.3).
    pub fn watches_producer(&self) -> bool {
        self.watch.is_some()
    }

    fn gone_error(&self) -> Error {
        Error::ProducerGone {
            name: self.name.clone(),
        }
    }

    /// A handle to wait for this consumer's next event without holding the
    /// consumer (see [`Waiter`]).
    pub fn waiter(&self) -> Waiter {
        Waiter::new(Arc::clone(&self.link))
    }

    /// Reads everything the producer has sent and published so far, and
    /// turns it into events.
    fn drain(&mut self) -> Result<()> {
        if self.finished.is_some() {
            return Ok(());
        }
        // Before the socket: see the module's documentation.
        let published = self.link.board.published();
        let mut eof = false;
        loop {
            // Decode after every read: the reader holds at most one largest
            // frame and reads nothing more until it is decoded.
            let fill = self.reader.fill(&self.link.sock, false, None)?;
            while let Some(msg) = self.reader.next_frame::<ToConsumer>()? {
                self.control.push_back(msg);
            }
            match fill {
                Fill::Data => continue,
                Fill::WouldBlock => break,
                Fill::Eof => {
                    eof = true;
                    break;
                }
            }
        }
        self.advance(published)?;
        // A clean shutdown may still wait in the queue behind batches not
        // taken yet (they are taken lazily).
        let shutdown = self
            .control
            .iter()
            .any(|m| matches!(m, ToConsumer::Shutdown(_)));
        if eof && self.finished.is_none() && !shutdown {
            self.events.clear();
            return Err(Error::ProducerGone {
                name: self.name.clone(),
            });
        }
        Ok(())
    }

    /// Reads the board up to `published` and acts on control messages, in
    /// the order the producer meant them.
    fn advance(&mut self, mut published: u64) -> Result<()> {
        loop {
            // An epoch's end bounds what is read of the board for it (a
            // boundary announced before it does not hide it).
            let next = self
                .control
                .iter()
                .find(|m| !matches!(m, ToConsumer::Boundary(_)));
            if let (Some(c), Some(ToConsumer::EpochEnd { end_seq, .. })) =
                (self.cursor.as_mut(), next)
            {
                c.end = Some(*end_seq);
            }
            // Lazily: one consumer batch at a time; the rest waits.
            if self.holds_batches() {
                return Ok(());
            }
            if let Some(cursor) = self.cursor.filter(|_| !self.cut_off) {
                let limit = cursor.end.map_or(published, |end| end.min(published));
                for seq in cursor.next..limit {
                    let taken = self.take_batch(seq);
                    if let Some(c) = self.cursor.as_mut() {
                        c.next = seq + 1;
                    }
                    if !taken || self.holds_batches() {
                        return Ok(());
                    }
                }
            }
            let Some(msg) = self.control.pop_front() else {
                return Ok(());
            };
            match msg {
                ToConsumer::EpochStart(es) if self.cursor.is_none() => {
                    let bs = self.opts.batch_size.unwrap_or(es.batch_size.max(1));
                    let info = EpochInfo {
                        epoch: es.epoch,
                        samples: es.samples,
                        batches: es.samples.map(|n| batches_in(n, bs, self.opts.drop_last)),
                        batch_size: bs,
                        partial: es.partial,
                    };
                    self.assembler = Some(Assembler::new(
                        es.epoch,
                        es.samples,
                        bs,
                        self.opts.drop_last,
                    ));
                    self.rows = 0;
                    if !es.partial && es.samples.is_some() {
                        self.welcome.samples_per_epoch = es.samples;
                    }
                    self.epoch = Some(info.clone());
                    self.cursor = Some(Cursor {
                        next: es.first_seq,
                        end: None,
                    });
                    self.events.push_back(Ok(Event::EpochStart(info)));
                }
                ToConsumer::EpochEnd {
                    epoch,
                    samples,
                    end_seq,
                } => {
                    let Some(cursor) = self.cursor.as_mut() else {
                        return Err(Error::Protocol("an epoch ended that never began".into()));
                    };
                    if cursor.next < end_seq {
                        // Its batches were published before it was sent:
                        // read them first.
                        cursor.end = Some(end_seq);
                        published = published.max(self.link.board.published());
                        if published < end_seq {
                            return Err(Error::Protocol(format!(
                                "the epoch ended at batch {end_seq}, but only {published} were published"
                            )));
                        }
                        self.control.push_front(ToConsumer::EpochEnd {
                            epoch,
                            samples,
                            end_seq,
                        });
                        continue;
                    }
                    if let Some(tail) = self.assembler.as_mut().and_then(|a| a.finish()) {
                        self.rows += tail.as_ref().map_or(0, |b| b.rows());
                        self.events.push_back(tail.map(Event::Batch));
                    }
                    self.assembler = None;
                    self.cursor = None;
                    let fired = std::mem::take(&mut self.triggers);
                    self.events
                        .extend(fired.into_iter().map(|t| Ok(Event::Trigger(t))));
                    self.events
                        .push_back(Ok(Event::EpochEnd { epoch, samples }));
                }
                ToConsumer::Boundary(b) => self.boundary(b)?,
                ToConsumer::Shutdown(reason) => {
                    // What was published before the shutdown is still read;
                    // an unfinished epoch's last partial batch is dropped.
                    if let Some(cursor) = self.cursor {
                        // At most a ring's worth: the board (shared memory)
                        // says how far, and no more can still be there.
                        let ring = self.link.board.ring_len() as u64;
                        let limit = cursor
                            .end
                            .unwrap_or(u64::MAX)
                            .min(self.link.board.published())
                            .min(cursor.next.saturating_add(ring));
                        for seq in cursor.next..limit {
                            if self.cut_off || !self.take_batch(seq) {
                                break;
                            }
                        }
                    }
                    self.assembler = None;
                    self.cursor = None;
                    self.control.clear();
                    self.finished = Some(reason);
                    return Ok(());
                }
                ToConsumer::Evicted {
                    epoch,
                    behind,
                    budget,
                    generation,
                } => self.evicted(epoch, behind, budget, generation),
                other => {
                    return Err(Error::Protocol(format!(
                        "unexpected message from the producer: {other:?}"
                    )))
                }
            }
        }
    }

    /// An epoch boundary: the size of the coming epochs from now on, and
    /// its trigger after the last batch of the epoch being read, if any,
    /// else at once.
    fn boundary(&mut self, b: wire::Boundary) -> Result<()> {
        if let Some(n) = b.next_samples {
            self.welcome.samples_per_epoch = Some(n);
        }
        let Some(t) = b.trigger else {
            return Ok(());
        };
        if t.id.len() > wire::MAX_TRIGGER_ID || self.triggers.len() >= MAX_HELD_TRIGGERS {
            return Err(Error::Protocol(format!(
                "a trigger id of {} bytes, or more than {MAX_HELD_TRIGGERS} triggers in one epoch",
                t.id.len()
            )));
        }
        if self.cursor.is_some() {
            self.triggers.push(t);
        } else {
            self.events.push_back(Ok(Event::Trigger(t)));
        }
        Ok(())
    }

    /// True when a batch (or an error in a batch's place) waits to be
    /// handed out: batches are taken from the board one at a time.
    fn holds_batches(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Ok(Event::Batch(_)) | Err(_)))
    }

    /// The producer evicted this consumer: drops what the epoch still had
    /// pending (views already handed out stay valid: the producer keeps
    /// their slots), then fails the next read or ends the epoch short.
    fn evicted(&mut self, epoch: u64, behind: u64, budget: u64, generation: u64) {
        self.link.evicted(generation);
        self.cut_off = false;
        self.assembler = None;
        self.events
            .retain(|e| !matches!(e, Ok(Event::Batch(_)) | Err(_)));
        let in_epoch = self.cursor.take().is_some();
        match self.opts.on_evict {
            OnEvict::Error => self.fell_behind = Some((epoch, behind, budget)),
            OnEvict::Rejoin => {
                self.opts.warn.emit(&format!(
                    "consumer of {:?} fell {behind} batches behind (budget \
                     {budget}) and was evicted from epoch {epoch}; the epoch ends short after \
                     {} samples and it rejoins at the next epoch",
                    self.name, self.rows
                ));
                let fired = std::mem::take(&mut self.triggers);
                self.events
                    .extend(fired.into_iter().map(|t| Ok(Event::Trigger(t))));
                if in_epoch {
                    self.events.push_back(Ok(Event::EpochEnd {
                        epoch,
                        samples: self.rows,
                    }));
                }
            }
        }
    }

    /// Takes batch `seq` into events, an error in the place of the batch
    /// that caused it; false when the producer has evicted this consumer
    /// (the batch was not read).
    fn take_batch(&mut self, seq: u64) -> bool {
        match self.read_batch(seq) {
            Ok(Some(batches)) => {
                for batch in batches {
                    self.rows += batch.as_ref().map_or(0, |b| b.rows());
                    self.events.push_back(batch.map(Event::Batch));
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.events.push_back(Err(e));
                true
            }
        }
    }

    /// Leases batch `seq` and cuts it into consumer batches; `None` when the
    /// producer has evicted this consumer.
    fn read_batch(&mut self, seq: u64) -> Result<Option<Vec<Result<Batch>>>> {
        // Once evicted, the board's ring may have moved past our batches:
        // the producer stopped keeping them for us before it published more.
        let slot = match self.link.board.slot_of(seq) {
            Ok(slot) => slot,
            Err(_) if self.link.is_evicted() => {
                self.cut_off = true;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        if !self.link.acquire(slot, seq) {
            self.cut_off = true;
            return Ok(None);
        }
        self.arena.refresh(slot)?;
        let header = self.arena.header(slot, seq)?;
        let Some(epoch) = self.epoch.as_ref().map(|e| e.epoch) else {
            return Err(Error::Protocol("a batch arrived outside an epoch".into()));
        };
        if header.epoch != epoch {
            return Err(Error::Protocol(format!(
                "batch {seq} belongs to epoch {}, not to epoch {epoch}",
                header.epoch
            )));
        }
        let lease = Arc::new(SlotLease {
            seq,
            slot,
            layout: header.layout,
            arena: Arc::clone(&self.arena),
            link: Arc::clone(&self.link),
        });
        let Some(assembler) = self.assembler.as_mut() else {
            return Err(Error::Protocol("a batch arrived outside an epoch".into()));
        };
        Ok(Some(assembler.push(lease)))
    }
}

fn connect_socket(
    endpoint: &Endpoint,
    timeout: Option<Duration>,
    interrupt: &mut dyn FnMut() -> bool,
) -> Result<UnixStream> {
    let path = endpoint.socket_path();
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        match endpoint.connect()? {
            Some(sock) => return Ok(sock),
            None => {
                if deadline.is_none_or(|d| Instant::now() >= d) {
                    return Err(Error::ProducerNotFound {
                        name: endpoint.name().to_owned(),
                        socket: path,
                        waited_secs: timeout.map(|t| t.as_secs_f64()),
                    });
                }
                // No signal exists for "a socket appeared": retry briefly.
                std::thread::sleep(Duration::from_millis(20));
                if interrupt() {
                    return Err(Error::Interrupted);
                }
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
