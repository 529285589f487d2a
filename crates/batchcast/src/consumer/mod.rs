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
mod attach;
mod batch;
mod drain;
mod event;
mod link;
mod options;
mod reading;
mod reattach;
pub mod rebatch;
mod waiter;
mod watch;

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use assemble::Assembler;
use attach::{attach, Attach};
pub use batch::{Batch, Keepalive, Leaf};
pub use event::{ConsumerStats, EpochInfo, Event};
use link::Link;
pub use options::{ConsumerOptions, DEFAULT_RECONNECT_TIMEOUT};
use reading::Cursor;
use rebatch::batches_in;
pub use waiter::Waiter;
use watch::ProducerWatch;

use crate::arena::ArenaView;
use crate::board::Woken;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::mirror::MirrorSpec;
use crate::wire::{
    self, FrameReader, Position, ShutdownReason, ToConsumer, ToProducer, TriggerFired, Welcome,
};

/// Most triggers held back inside one epoch (a producer announces one per
/// boundary).
const MAX_HELD_TRIGGERS: usize = 64;

/// How often blocking calls wake to run the interrupt hook.
const TICK: Duration = Duration::from_millis(100);

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
    /// Where this consumer stands in the stream (None before its first
    /// epoch): the rows before it were taken from the board, whatever
    /// producer published them.
    pos: Option<Position>,
    /// Rows taken in the current epoch.
    epoch_taken: u64,
    /// The current epoch was continued from a restarted producer.
    resumed: bool,
    /// Since when the producer is lost while a restarted one may resume
    /// its stream (see `reattach`).
    lost: Option<Instant>,
    /// Reattached, and the restarted producer's first epoch not begun yet.
    reattached: bool,
    /// Triggers announced inside the epoch being read: handed out after
    /// its last batch.
    triggers: Vec<TriggerFired>,
    /// The position this consumer was restored at, until the epoch that
    /// holds it (or a later one) begins.
    restore: Option<Position>,
    /// Connected `deferred` and not started yet: the first read starts it.
    parked: bool,
    /// Where reattachments are recorded for `batchcast run`, opened at the
    /// first (see `crate::run_events`).
    run_events: Option<crate::RunEvents>,
    /// Started, and the producer's `Started` not seen yet: until then
    /// the board is not read (the epoch ends held back while this consumer
    /// was parked may still be on their way).
    awaiting_start: bool,
    /// The device mirrors of the producer's arena, with their fds.
    mirrors: Vec<(MirrorSpec, OwnedFd)>,
    /// Changes each time `mirrors` is replaced (a reattachment).
    mirror_generation: u64,
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
        let how = Attach {
            join: opts.join,
            timeout: opts.connect_timeout,
            clear: true,
            deferred: opts.deferred,
        };
        let attached = attach(&endpoint, &opts, how, interrupt)?;
        let start = opts.start;
        let parked = opts.deferred;
        Ok(Consumer {
            name: name.to_owned(),
            link: Arc::new(attached.link),
            reader: attached.reader,
            arena: Arc::new(attached.arena),
            welcome: attached.welcome,
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
            watch: attached.watch,
            gone: false,
            pos: start,
            restore: start,
            epoch_taken: 0,
            resumed: false,
            lost: None,
            reattached: false,
            triggers: Vec::new(),
            parked,
            awaiting_start: false,
            run_events: None,
            mirrors: attached.mirrors,
            mirror_generation: 0,
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

    /// The device mirrors of the producer's arena (see
    /// [`DeviceMirror`](crate::DeviceMirror)), each with the fd that
    /// imports it: a batch this consumer gets is already in every one, at
    /// its slot's offset ([`Consumer::slot_offset`]) plus its layout's
    /// offsets. Empty when the producer mirrors nothing.
    ///
    /// A reattachment to a restarted producer replaces them (and bumps
    /// [`Consumer::mirror_generation`]): import the new ones. The fds of
    /// the old ones close then; device memory imported from them stays
    /// valid as long as the importer keeps its own mapping alive, which
    /// views handed out before must do (the binding's job, as the host
    /// arena's old mapping lives as long as its views).
    pub fn mirrors(&self) -> &[(MirrorSpec, OwnedFd)] {
        &self.mirrors
    }

    /// Changes each time [`Consumer::mirrors`] is replaced: 0 at
    /// connection, one more at each reattachment.
    pub fn mirror_generation(&self) -> u64 {
        self.mirror_generation
    }

    /// Where slot `slot` starts in the arena, and so in every device mirror.
    pub fn slot_offset(&self, slot: usize) -> usize {
        self.arena.slot_offset(slot)
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
            if self.lost.is_some() {
                self.reattach(interrupt)?;
                continue;
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
        if self.parked {
            self.start_at(self.opts.start)?;
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
            if self.lost.is_none() {
                self.drain()?;
            }
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
            // Lost: `next_event` waits for a restarted producer.
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
    ///
    /// Where the producer resumes its stream when restarted (see
    /// [`ConsumerOptions::reconnect_timeout`]), true means that the next
    /// [`next_event`](Self::next_event) waits for the restart (and fails
    /// only if none comes in time).
    pub fn producer_exited(&mut self) -> bool {
        if !self.gone && self.lost.is_none() && self.watch.as_mut().is_some_and(ProducerWatch::gone)
        {
            self.lose_producer();
        }
        self.gone || self.lost.is_some()
    }

    /// The producer died: wait for a restart where one resumes the stream,
    /// else fail every later call.
    fn lose_producer(&mut self) {
        if self.can_reattach() {
            if self.lost.is_none() {
                self.lost = Some(Instant::now());
                self.warn_waiting();
            }
        } else {
            self.gone = true;
            self.events.clear();
        }
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
            waited_secs: self
                .can_reattach()
                .then_some(self.opts.reconnect_timeout.as_secs_f64()),
        }
    }

    /// A handle to wait for this consumer's next event without holding the
    /// consumer (see [`Waiter`]).
    pub fn waiter(&self) -> Waiter {
        Waiter::new(Arc::clone(&self.link))
    }
}
