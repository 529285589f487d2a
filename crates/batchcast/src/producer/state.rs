//! The producer's shared bookkeeping: slots, leases, consumers, epochs.
//!
//! One `Mutex<State>` guards it; the publishing thread and the control thread
//! both take it. The invariant everything rests on: a slot's `holders` are
//! the consumers its batch was published to, and the publishing thread
//! writes a slot only once every holder has released the batch in its
//! ledger (`crate::ledger`) or is gone. Removing a consumer (its socket
//! closed, it sent garbage, a send to it failed) drops it from every slot's
//! holders at once, so a dead consumer never holds the others up. Evicting
//! a laggard drops it from the holders of every slot it has not begun to
//! read (see `crate::ledger` for the handshake that makes this safe).
//!
//! The publisher paces itself to the most advanced consumer: it never has
//! more than a window of batches published that this consumer has not
//! begun to read, so lag slots hold only batches it has read and a slower
//! consumer has not (see [`State::take_slot`]).
//!
//! Fields are private: the producer and its control thread change the
//! state only through the methods below, each of which keeps it whole.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lag::LagPolicy;
use super::slots::Slots;
use crate::board::Board;
use crate::error::{Error, Result};
use crate::holds::Holds;
use crate::ledger::Ledger;
use crate::status::{ConsumerStatus, StatusReport};
use crate::stream::StreamSpec;
use crate::wire::{
    self, Boundary, ConsumerHello, EpochStart, JoinPolicy, OnEvict, ToConsumer, Welcome,
    PROTOCOL_VERSION,
};

/// Where a consumer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Connected before the arena existed; not welcomed yet.
    Pending,
    /// Welcomed; waits for the next epoch to begin.
    Waiting,
    /// Receives the current epoch's batches.
    Following,
    /// Evicted for falling behind, with `on_evict: error`: receives nothing
    /// more, but keeps the slots it still has views of until it releases
    /// them or leaves.
    Evicted,
    /// Closed by its user while batches it handed out live on (`Leaving`):
    /// as `Evicted`, and no longer counted as attached.
    Left,
}

/// One connected consumer.
#[derive(Debug)]
struct ConsumerEntry {
    sock: Arc<UnixStream>,
    pid: u32,
    hello: ConsumerHello,
    phase: Phase,
    /// The epoch this consumer got an `EpochStart` for, if it is inside one.
    started: Option<u64>,
    /// The first batch it was to read where it joined the stream, or
    /// rejoined it after an eviction; None until its `EpochStart`.
    joined_at: Option<u64>,
    /// Rows published to it in the current epoch.
    epoch_rows: u64,
    /// Its ledger, once welcomed.
    ledger: Option<Ledger>,
    /// The last batch published to it.
    last_sent: Option<u64>,
    /// Times it was evicted.
    evictions: u64,
}

/// The current epoch, as the publisher drives it.
#[derive(Debug, Default)]
struct Epoch {
    number: u64,
    open: bool,
    first_seq: Option<u64>,
    /// The position of the epoch's first published row: more than 0 when a
    /// restarted producer resumes the epoch mid-way.
    start_row: u64,
    published_rows: u64,
    samples: Option<u64>,
}

/// What exists once the arena does.
#[derive(Debug)]
struct Shm {
    /// A read-only descriptor of the arena, for welcomes.
    arena_fd: OwnedFd,
    slot_size: u64,
    board: Board,
    /// A read-only descriptor of the board, for welcomes.
    board_fd: OwnedFd,
    holds: Holds,
}

/// Where consumer `c` reads: one past the last batch it acquired, and at
/// least where it (re)joined the stream (`next`, the next batch to publish,
/// before it is told), so that a consumer rejoining after an eviction is
/// not taken for as far behind as it was (the ledger is the consumer's to
/// write: a hint for pacing and for choosing lag slots and laggards,
/// bounded by `next`; never trusted for memory safety).
fn position(c: &ConsumerEntry, next: u64) -> u64 {
    c.ledger
        .as_ref()
        .map_or(0, |l| l.position())
        .max(c.joined_at.unwrap_or(next))
        .min(next)
}

/// How far the most advanced consumer that wants batches has come: the
/// highest position of a following consumer, or `next` for one waiting
/// for the next epoch (it needs the rest of this epoch published before
/// its own begins, so it stands ahead of every follower). None when no
/// consumer wants batches.
fn front<'a>(consumers: impl Iterator<Item = &'a ConsumerEntry>, next: u64) -> Option<u64> {
    consumers
        .filter_map(|c| match c.phase {
            Phase::Following => Some(position(c, next)),
            Phase::Waiting => Some(next),
            Phase::Pending | Phase::Evicted | Phase::Left => None,
        })
        .max()
}

/// Everything behind the producer's mutex.
#[derive(Debug)]
pub(crate) struct State {
    name: String,
    pid: u32,
    started: Instant,
    shm: Option<Shm>,
    slots: Slots,
    consumers: BTreeMap<u64, ConsumerEntry>,
    next_id: u64,
    next_seq: u64,
    epoch: Epoch,
    epochs_begun: u64,
    batch_size: Option<u64>,
    samples_per_epoch: Option<u64>,
    lag_policy: LagPolicy,
    evictions: u64,
    published: u64,
    blocked: Duration,
    recent: VecDeque<Instant>,
    /// What the producer says about its stream, in welcomes and reports.
    stream: StreamSpec,
    /// Threads waiting on the condition variable.
    waiters: usize,
    /// A producer restarted under this name resumes the stream (it keeps a
    /// state file), told in welcomes.
    resumable: bool,
    /// The first row of the next epoch to begin (a resumed epoch's
    /// position; 0 otherwise).
    next_start_row: u64,
    /// Where the recently published batches lie in their epochs, oldest
    /// first: for the resume point (see [`State::low_water`]).
    marks: VecDeque<Mark>,
}

/// Where a published batch lies in its epoch.
#[derive(Debug, Clone, Copy)]
struct Mark {
    seq: u64,
    epoch: u64,
    row: u64,
}

impl State {
    pub fn new(
        name: &str,
        window: usize,
        batch_size: Option<u64>,
        samples: Option<u64>,
        lag_policy: LagPolicy,
    ) -> Self {
        State {
            name: name.to_owned(),
            pid: std::process::id(),
            started: Instant::now(),
            shm: None,
            slots: Slots::new(window),
            consumers: BTreeMap::new(),
            next_id: 1,
            next_seq: 0,
            epoch: Epoch::default(),
            epochs_begun: 0,
            batch_size,
            samples_per_epoch: samples,
            lag_policy,
            evictions: 0,
            stream: StreamSpec::default(),
            published: 0,
            blocked: Duration::ZERO,
            recent: VecDeque::new(),
            waiters: 0,
            resumable: false,
            next_start_row: 0,
            marks: VecDeque::new(),
        }
    }

    /// The arena exists: adds its `lag_slots` lag slots, makes the board
    /// and the holder counts, and welcomes the consumers that wait for it.
    pub fn set_arena(&mut self, arena_fd: OwnedFd, slot_size: u64, lag_slots: usize) -> Result<()> {
        self.slots.add_lag_slots(lag_slots);
        let board = Board::create(&self.name, self.slots.len())?;
        let board_fd = board.readonly_fd()?;
        let holds = Holds::create(self.slots.len())?;
        self.shm = Some(Shm {
            arena_fd,
            slot_size,
            board,
            board_fd,
            holds,
        });
        let pending: Vec<u64> = self.ids_in(Phase::Pending);
        for id in pending {
            self.welcome(id);
        }
        Ok(())
    }

    /// Consumers attached now (connected, and not closed by their user).
    pub fn consumer_count(&self) -> usize {
        self.consumers
            .values()
            .filter(|c| c.phase != Phase::Left)
            .count()
    }

    /// True while consumer `id` is connected.
    pub fn has_consumer(&self, id: u64) -> bool {
        self.consumers.contains_key(&id)
    }

    /// Counts a thread waiting on the condition variable (or one fewer).
    pub fn set_waiting(&mut self, waiting: bool) {
        if waiting {
            self.waiters += 1;
        } else {
            self.waiters = self.waiters.saturating_sub(1);
        }
    }

    /// True when a thread waits on the condition variable.
    pub fn has_waiters(&self) -> bool {
        self.waiters > 0
    }

    /// Resumes a stream (before the first epoch): welcomes say a restart
    /// resumes it, and the first epoch begun is `epoch`, from its row `row`.
    pub fn resume_at(&mut self, epoch: u64, row: u64) {
        self.epochs_begun = epoch;
        self.next_start_row = row;
    }

    /// Welcomes say that a producer restarted under this name resumes the
    /// stream.
    pub fn set_resumable(&mut self) {
        self.resumable = true;
    }

    /// The position (epoch, row) every attached consumer has received:
    /// where a restarted producer may resume without a consumer missing a
    /// row. A consumer has received every batch before its [`position`]
    /// (one past the last batch it acquired: a consumer that acquired a
    /// batch keeps it when the producer dies), whether it follows the
    /// epoch or waits for the next one (told the epoch's end, it may still
    /// be reading its tail); one not welcomed yet has received nothing of
    /// this producer. None when the slowest consumer's batch is no longer
    /// known (keep the older point).
    pub fn low_water(&self) -> Option<(u64, u64)> {
        let next = self.next_seq;
        let low = self
            .consumers
            .values()
            .filter_map(|c| match c.phase {
                Phase::Following | Phase::Waiting => Some(position(c, next)),
                Phase::Pending => Some(next),
                Phase::Evicted | Phase::Left => None,
            })
            .min()
            .unwrap_or(next);
        if low >= next {
            return Some(if self.epoch.open {
                (
                    self.epoch.number,
                    self.epoch.start_row + self.epoch.published_rows,
                )
            } else {
                (self.epochs_begun, self.next_start_row)
            });
        }
        self.marks
            .iter()
            .find(|m| m.seq == low)
            .map(|m| (m.epoch, m.row))
    }

    /// Sets the rows of the coming epochs.
    pub fn set_samples_per_epoch(&mut self, samples: Option<u64>) {
        self.samples_per_epoch = samples;
    }

    /// True between `begin_epoch` and `end_epoch`.
    pub fn epoch_open(&self) -> bool {
        self.epoch.open
    }

    /// Adds time the publisher spent blocked on a full window (every slot
    /// held, or the fastest consumer a window behind).
    pub fn note_blocked(&mut self, took: Duration) {
        self.blocked += took;
    }

    /// Begins the next epoch; every consumer waiting for it follows it.
    pub fn begin_epoch(&mut self) -> Result<u64> {
        if self.epoch.open {
            return Err(Error::Usage(
                "begin_epoch called twice without end_epoch".into(),
            ));
        }
        let number = self.epochs_begun;
        self.epochs_begun += 1;
        let start_row = std::mem::take(&mut self.next_start_row);
        self.epoch = Epoch {
            number,
            open: true,
            first_seq: None,
            start_row,
            published_rows: 0,
            samples: self.samples_per_epoch.map(|n| n.saturating_sub(start_row)),
        };
        for id in self.ids_in(Phase::Waiting) {
            self.set_phase(id, Phase::Following);
        }
        Ok(number)
    }

    /// Ends the current epoch: every consumer following it gets its end.
    /// Returns the epoch and the rows published in it.
    pub fn end_epoch(&mut self) -> Result<(u64, u64)> {
        if !self.epoch.open {
            return Err(Error::Usage("end_epoch called outside an epoch".into()));
        }
        let epoch = self.epoch.number;
        let samples = self.epoch.samples;
        for id in self.ids_in(Phase::Following) {
            let next = self.next_seq;
            if !self.started_this_epoch(id) && !self.start_epoch_for(id, samples, false, next) {
                continue;
            }
            let rows = self.consumers.get(&id).map_or(0, |c| c.epoch_rows);
            if let Ok(frame) = wire::encode(&ToConsumer::EpochEnd {
                epoch,
                samples: rows,
                end_seq: next,
            }) {
                self.send_or_drop(id, &frame);
            }
            if let Some(c) = self.consumers.get_mut(&id) {
                c.started = None;
                c.phase = Phase::Waiting;
            }
        }
        self.epoch.open = false;
        Ok((epoch, self.epoch.published_rows))
    }

    /// Tells every welcomed consumer of an epoch boundary: the coming
    /// epochs' size (which the welcome says from now on) and the trigger
    /// that fired. Inside an epoch, call it after its last batch: a
    /// consumer following the epoch that has not had its start gets it
    /// first, as at the epoch's end.
    pub fn announce_boundary(&mut self, boundary: &Boundary) -> Result<()> {
        if let Some(n) = boundary.next_samples {
            self.samples_per_epoch = Some(n);
        }
        let frame = wire::encode(&ToConsumer::Boundary(boundary.clone()))?;
        let samples = self.epoch.samples;
        let mut ids = self.ids_in(Phase::Waiting);
        if self.epoch.open {
            for id in self.ids_in(Phase::Following) {
                let next = self.next_seq;
                if self.started_this_epoch(id) || self.start_epoch_for(id, samples, false, next) {
                    ids.push(id);
                }
            }
        }
        for id in ids {
            self.send_or_drop(id, &frame);
        }
        Ok(())
    }

    fn started_this_epoch(&self, id: u64) -> bool {
        self.consumers.get(&id).and_then(|c| c.started) == Some(self.epoch.number)
    }

    /// Takes a free slot, or says the publisher waits for one: the board's
    /// flag is set (and the read it waits for, if it paces itself), and the
    /// slots looked at once more, so that a consumer that released (or
    /// began to read) after the first look, before it could see the board,
    /// is not missed (it sent no wake-up). `reserve` reserves a lag slot's
    /// memory on its first use.
    pub fn take_slot(&mut self, reserve: &mut dyn FnMut(usize) -> bool) -> Option<usize> {
        let found = self.take_free_slot(reserve).or_else(|| {
            self.set_producer_waiting(true);
            self.take_free_slot(reserve)
        });
        if found.is_some() {
            self.set_producer_waiting(false);
        }
        found
    }

    fn set_producer_waiting(&self, waiting: bool) {
        if let Some(shm) = &self.shm {
            shm.board.set_producer_waiting(waiting);
            shm.board
                .set_awaited_read(waiting.then(|| self.awaited_read()).flatten());
        }
    }

    /// The batch the publisher waits to see read before it publishes the
    /// next one, `next`: batch `next - window`, while the [`front`] has a
    /// whole window published that it has not begun to read. None when it
    /// may publish (or no consumer wants batches).
    fn awaited_read(&self) -> Option<u64> {
        let (next, window) = (self.next_seq, self.slots.window() as u64);
        let front = front(self.consumers.values(), next)?;
        (next.saturating_sub(front) >= window).then(|| next - window)
    }

    /// A free slot, if the publisher may publish now.
    ///
    /// Never more than a window ahead of the [`front`]: while the most
    /// advanced consumer has `window` batches published that it has not
    /// begun to read, no slot is taken, free or not ([`State::awaited_read`]).
    /// So at most `window` retained batches are unread by the front; every
    /// other one, those in lag slots included, is a batch the front has
    /// read and a slower consumer has not. Lag memory keeps a laggard's
    /// backlog; it never lets the publisher race ahead of everyone.
    ///
    /// A lag slot only while some following consumer is at least half a
    /// window behind the front (it lags the others, or a consumer waits for
    /// the next epoch while it holds this one up): consumers that are all
    /// as slow as each other (or just one consumer) are back-pressure,
    /// handled as it always was, and no lag memory is used for them.
    fn take_free_slot(&mut self, reserve: &mut dyn FnMut(usize) -> bool) -> Option<usize> {
        if self.awaited_read().is_some() {
            return None;
        }
        let (next, window) = (self.next_seq, self.slots.window() as u64);
        let consumers = &self.consumers;
        let lag_wanted = || {
            let low = consumers
                .values()
                .filter(|c| c.phase == Phase::Following)
                .map(|c| position(c, next))
                .min();
            match (low, front(consumers.values(), next)) {
                (Some(low), Some(high)) => high - low >= (window / 2).max(1),
                _ => false,
            }
        };
        let still_holds = |id: u64, i: usize, seq: u64| match consumers
            .get(&id)
            .and_then(|c| c.ledger.as_ref())
        {
            Some(ledger) => !ledger.has_released(i, seq),
            None => false, // gone
        };
        self.slots.take_free(&still_holds, &lag_wanted, reserve)
    }

    /// Slot `i` was loaned but not published: it is free again.
    pub fn give_back(&mut self, i: usize) {
        self.slots.give_back(i);
    }

    /// The next batch's sequence number and epoch.
    pub fn next_batch(&self) -> (u64, u64) {
        (self.next_seq, self.epoch.number)
    }

    /// Publishes batch `seq` of `rows` rows, written in slot `index`, to
    /// every consumer following the epoch.
    pub fn publish(&mut self, index: usize, seq: u64, rows: u64) {
        self.next_seq = seq + 1;
        self.batch_size.get_or_insert(rows);
        self.epoch.first_seq.get_or_insert(seq);
        let samples = self.epoch.samples;
        let mut holders = Vec::new();
        for id in self.ids_in(Phase::Following) {
            if !self.started_this_epoch(id) && !self.start_epoch_for(id, samples, false, seq) {
                continue;
            }
            if let Some(c) = self.consumers.get_mut(&id) {
                c.last_sent = Some(seq);
                c.epoch_rows += rows;
                holders.push(id);
            }
        }
        if let Some(shm) = &self.shm {
            shm.holds.set(index, holders.len());
        }
        self.slots.fill(index, seq, rows, holders);
        // Only now may consumers see it: every holder is recorded.
        if let Some(shm) = &self.shm {
            shm.board.publish(seq, index);
        }
        self.marks.push_back(Mark {
            seq,
            epoch: self.epoch.number,
            row: self.epoch.start_row + self.epoch.published_rows,
        });
        while self.marks.len() > 2 * self.slots.len() {
            self.marks.pop_front();
        }
        self.epoch.published_rows += rows;
        self.published += 1;
        let now = Instant::now();
        self.recent.push_back(now);
        while self.recent.len() > 64 {
            self.recent.pop_front();
        }
    }

    /// Sends `frame` to consumer `id` and bumps the board so that it looks;
    /// on failure removes the consumer.
    fn send_or_drop(&mut self, id: u64, frame: &[u8]) -> bool {
        let ok = match self.consumers.get(&id) {
            Some(c) => wire::send_frame(&*c.sock, frame).is_ok(),
            None => return false,
        };
        if ok {
            if let Some(shm) = &self.shm {
                shm.board.bump();
            }
        } else {
            self.remove_consumer(id);
        }
        ok
    }

    /// Removes a consumer: it no longer holds any slot.
    pub fn remove_consumer(&mut self, id: u64) {
        let Some(entry) = self.consumers.remove(&id) else {
            return;
        };
        let dropped = self.slots.drop_holder(id, &|_, _| false);
        if let Some(shm) = &self.shm {
            for i in dropped {
                shm.holds.forget(i);
            }
        }
        // Wake the peer's reader at once if it is still alive.
        let _ = entry.sock.shutdown(std::net::Shutdown::Both);
    }

    /// Tells every consumer the stream is over (`frame`, a `Shutdown`).
    pub fn shutdown(&mut self, frame: &[u8]) {
        let ids: Vec<u64> = self.consumers.keys().copied().collect();
        for id in ids {
            self.send_or_drop(id, frame);
        }
    }

    /// Removes every consumer.
    pub fn remove_all(&mut self) {
        let ids: Vec<u64> = self.consumers.keys().copied().collect();
        for id in ids {
            self.remove_consumer(id);
        }
    }

    /// The lag budget in batches: how far behind the most advanced consumer
    /// a consumer must be to count as a laggard.
    fn lag_budget(&self) -> u64 {
        self.slots.lag_slots().max(1) as u64
    }

    /// How far each following consumer is behind the [`front`].
    fn behind(&self) -> BTreeMap<u64, u64> {
        let next = self.next_seq;
        let front = front(self.consumers.values(), next).unwrap_or(0);
        self.consumers
            .iter()
            .filter(|(_, c)| c.phase == Phase::Following)
            .map(|(&id, c)| (id, front.saturating_sub(position(c, next))))
            .collect()
    }

    /// Evicts every following consumer that holds slots and is at least the
    /// lag budget behind the most advanced consumer (called while every
    /// slot is held and the publisher has been blocked for the stall
    /// timeout). Returns how many were evicted.
    pub fn evict_laggards(&mut self) -> usize {
        let budget = self.lag_budget();
        let laggards: Vec<(u64, u64)> = self
            .behind()
            .into_iter()
            .filter(|&(id, behind)| behind >= budget && self.held_by(id) > 0)
            .collect();
        for &(id, behind) in &laggards {
            self.evict(id, behind, budget);
        }
        laggards.len()
    }

    /// Consumer `id` was closed with batches still alive: it keeps only
    /// the slots of those and gets nothing more (see [`Phase::Left`]).
    pub fn leave(&mut self, id: u64) {
        if self.cut_off(id).is_some() {
            self.set_phase(id, Phase::Left);
        }
    }

    /// Stops consumer `id` from reading the board (bumps its eviction
    /// generation), *then* keeps it as a holder only of the slots it has
    /// acquired and not released (it may have views of them; see
    /// `crate::ledger`). Returns the new generation; None when it has no
    /// ledger (not welcomed) or is gone.
    fn cut_off(&mut self, id: u64) -> Option<u64> {
        let ledger = self.consumers.get(&id)?.ledger.as_ref()?;
        let generation = ledger.evict();
        let keep = |i: usize, seq: u64| ledger.has_acquired(i, seq) && !ledger.has_released(i, seq);
        let dropped = self.slots.drop_holder(id, &keep);
        if let Some(shm) = &self.shm {
            for i in dropped {
                shm.holds.forget(i);
            }
        }
        Some(generation)
    }

    /// Evicts consumer `id` ([`State::cut_off`]) and tells it.
    fn evict(&mut self, id: u64, behind: u64, budget: u64) {
        let Some(rejoin) = self
            .consumers
            .get(&id)
            .map(|c| c.hello.on_evict == OnEvict::Rejoin)
        else {
            return;
        };
        let Some(generation) = self.cut_off(id) else {
            return;
        };
        self.evictions += 1;
        if let Some(c) = self.consumers.get_mut(&id) {
            c.evictions += 1;
            // What it skipped is not behind it: it reads on from where its
            // next epoch starts.
            c.joined_at = None;
        }
        self.set_phase(
            id,
            if rejoin {
                Phase::Waiting
            } else {
                Phase::Evicted
            },
        );
        let msg = ToConsumer::Evicted {
            epoch: self.epoch.number,
            behind,
            budget,
            generation,
        };
        if let Ok(frame) = wire::encode(&msg) {
            self.send_or_drop(id, &frame);
        }
    }

    /// Adds a consumer. Before the arena exists it is left pending; else it
    /// is welcomed and joins per its policy. Returns its id, or `None` if
    /// it could not be welcomed (its socket failed).
    pub fn add_consumer(
        &mut self,
        sock: Arc<UnixStream>,
        pid: u32,
        hello: ConsumerHello,
    ) -> Option<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.consumers.insert(
            id,
            ConsumerEntry {
                sock,
                pid,
                hello,
                phase: Phase::Pending,
                started: None,
                joined_at: None,
                epoch_rows: 0,
                ledger: None,
                last_sent: None,
                evictions: 0,
            },
        );
        if self.shm.is_some() {
            self.welcome(id);
        }
        self.has_consumer(id).then_some(id)
    }

    fn welcome(&mut self, id: u64) {
        let (Some(shm), Some(entry)) = (self.shm.as_ref(), self.consumers.get(&id)) else {
            return;
        };
        let partial = self.joins_mid_epoch(entry.hello.join);
        let welcome = ToConsumer::Welcome(Welcome {
            version: PROTOCOL_VERSION,
            producer_pid: self.pid,
            slot_size: shm.slot_size,
            slots: self.slots.len() as u32,
            window: self.slots.window() as u32,
            samples_per_epoch: self.samples_per_epoch,
            batch_size: self.batch_size,
            consumer_id: id,
            stream: self.stream.clone(),
            first_epoch_partial: partial,
            first_epoch_samples: if partial {
                self.partial_samples()
            } else {
                None
            },
            resumable: self.resumable,
        });
        let sent = Ledger::create(self.slots.len()).and_then(|(ledger, ledger_fd)| {
            let frame = wire::encode(&welcome)?;
            let holds_fd = shm.holds.share_fd()?;
            let fds = [
                shm.arena_fd.as_fd(),
                shm.board_fd.as_fd(),
                ledger_fd.as_fd(),
                holds_fd.as_fd(),
            ];
            wire::send_frame_with_fds(&*entry.sock, &frame, &fds)?;
            Ok(ledger)
        });
        match sent {
            Ok(ledger) => {
                if let Some(c) = self.consumers.get_mut(&id) {
                    c.ledger = Some(ledger);
                }
                self.join(id);
            }
            Err(_) => self.remove_consumer(id),
        }
    }

    /// Places a welcomed consumer per its join policy.
    fn join(&mut self, id: u64) {
        let Some(policy) = self.consumers.get(&id).map(|c| c.hello.join) else {
            return;
        };
        let epoch = &self.epoch;
        if !epoch.open {
            self.set_phase(id, Phase::Waiting);
            return;
        }
        if epoch.published_rows == 0 {
            // The epoch has not published anything yet: joining it is joining at its start.
            self.set_phase(id, Phase::Following);
            return;
        }
        match policy {
            JoinPolicy::NextEpoch => self.set_phase(id, Phase::Waiting),
            JoinPolicy::Now => {
                let samples = self.partial_samples();
                let next = self.next_seq;
                self.set_phase(id, Phase::Following);
                self.start_epoch_for(id, samples, true, next);
            }
            JoinPolicy::CatchUp => match (self.epoch.first_seq, self.retained_epoch()) {
                (Some(first), Some(retained)) => {
                    let samples = self.epoch.samples;
                    self.set_phase(id, Phase::Following);
                    // Hold the replayed batches before telling the consumer
                    // where to start: they stay put until it releases them.
                    for &(i, rows) in &retained {
                        self.subscribe(id, i, rows);
                    }
                    self.start_epoch_for(id, samples, false, first);
                }
                _ => self.set_phase(id, Phase::Waiting),
            },
        }
    }

    /// Describes the stream's first batch (for welcomes and reports).
    pub fn set_first_batch(&mut self, shape: Option<crate::stream::BatchShape>) {
        self.stream.first_batch = shape;
    }

    /// Sets the stream's free-form metadata (already checked).
    pub fn set_metadata(&mut self, json: String) {
        self.stream.metadata = json;
    }

    /// True when a consumer joining now under `policy` starts mid-epoch:
    /// what [`State::join`] decides, told in the welcome it precedes.
    fn joins_mid_epoch(&self, policy: JoinPolicy) -> bool {
        policy == JoinPolicy::Now && self.epoch.open && self.epoch.published_rows > 0
    }

    /// Rows left in the current epoch, when known.
    fn partial_samples(&self) -> Option<u64> {
        self.epoch
            .samples
            .map(|n| n.saturating_sub(self.epoch.published_rows))
    }

    fn set_phase(&mut self, id: u64, phase: Phase) {
        if let Some(c) = self.consumers.get_mut(&id) {
            c.phase = phase;
            c.started = None;
            c.epoch_rows = 0;
        }
    }

    /// The slot and rows of every batch of the current epoch, oldest
    /// first, if all are still retained.
    fn retained_epoch(&self) -> Option<Vec<(usize, u64)>> {
        let first = self.epoch.first_seq?;
        (first..self.next_seq)
            .map(|seq| {
                let i = self.slots.find(seq)?;
                Some((i, self.slots.get(i).rows))
            })
            .collect()
    }

    /// Sends `EpochStart` to consumer `id`: it reads the epoch's batches
    /// from `first_seq` on.
    fn start_epoch_for(
        &mut self,
        id: u64,
        samples: Option<u64>,
        partial: bool,
        first_seq: u64,
    ) -> bool {
        // A catch-up joiner starts at the epoch's first batch; any other
        // consumer at the next one.
        let first_row = if self.epoch.first_seq == Some(first_seq) {
            self.epoch.start_row
        } else {
            self.epoch.start_row + self.epoch.published_rows
        };
        let msg = ToConsumer::EpochStart(EpochStart {
            epoch: self.epoch.number,
            samples,
            batch_size: self.batch_size.unwrap_or(1),
            partial: partial || first_row > 0,
            first_seq,
            first_row,
        });
        let Ok(frame) = wire::encode(&msg) else {
            return false;
        };
        if let Some(c) = self.consumers.get_mut(&id) {
            c.started = Some(self.epoch.number);
            c.joined_at.get_or_insert(first_seq);
        }
        self.send_or_drop(id, &frame)
    }

    /// Makes consumer `id` a holder of the batch in slot `i` (a catch-up
    /// joiner's replay).
    fn subscribe(&mut self, id: u64, i: usize, rows: u64) {
        self.slots.add_holder(i, id);
        if let Some(shm) = &self.shm {
            shm.holds.add(i);
        }
        if let Some(c) = self.consumers.get_mut(&id) {
            c.last_sent = self.slots.get(i).seq.max(c.last_sent);
            c.epoch_rows += rows;
        }
    }

    /// Ids of the consumers in `phase`.
    fn ids_in(&self, phase: Phase) -> Vec<u64> {
        self.consumers
            .iter()
            .filter(|(_, c)| c.phase == phase)
            .map(|(&id, _)| id)
            .collect()
    }

    /// The figures `batchcast status` prints.
    pub fn report(&self) -> StatusReport {
        let now = Instant::now();
        let rate = match (self.recent.front(), self.recent.back()) {
            (Some(&a), Some(&b))
                if self.recent.len() > 1 && now.duration_since(b) < Duration::from_secs(5) =>
            {
                (self.recent.len() - 1) as f64 / b.duration_since(a).as_secs_f64().max(1e-9)
            }
            _ => 0.0,
        };
        let behind = self.behind();
        StatusReport {
            name: self.name.clone(),
            pid: self.pid,
            uptime_secs: self.started.elapsed().as_secs_f64(),
            slots: (self.slots.len() - self.slots.lag_slots()) as u32,
            slot_size: self.shm.as_ref().map_or(0, |s| s.slot_size),
            epoch: self.epoch.number,
            published: self.published,
            batches_per_sec: rate,
            blocked_secs: self.blocked.as_secs_f64(),
            lag_slots: self.slots.lag_slots() as u64,
            lag_slots_used: self.slots.lag_in_use() as u64,
            lag_policy: self.lag_policy.name().to_owned(),
            evictions: self.evictions,
            batch_size: self.batch_size,
            samples_per_epoch: self.samples_per_epoch,
            stream: self.stream.clone(),
            consumers: self
                .consumers
                .iter()
                .map(|(&id, c)| ConsumerStatus {
                    id,
                    pid: c.pid,
                    label: c.hello.label.clone(),
                    batch_size: c.hello.batch_size,
                    join: c.hello.join.name().to_owned(),
                    state: match c.phase {
                        Phase::Pending => "pending",
                        Phase::Waiting => "waiting",
                        Phase::Following => "following",
                        Phase::Evicted => "evicted",
                        Phase::Left => "left",
                    }
                    .to_owned(),
                    position: c.last_sent,
                    lag: self.held_by(id),
                    behind: behind.get(&id).copied().unwrap_or(0),
                    evictions: c.evictions,
                    delivered: c.ledger.as_ref().map_or(0, |l| l.figures().0),
                    wait_secs: c.ledger.as_ref().map_or(0, |l| l.figures().1) as f64 / 1e9,
                })
                .collect(),
            omitted_consumers: 0,
        }
    }

    /// Batches published to consumer `id` that it has not released.
    fn held_by(&self, id: u64) -> u64 {
        let Some(ledger) = self.consumers.get(&id).and_then(|c| c.ledger.as_ref()) else {
            return 0;
        };
        self.slots
            .iter()
            .filter(|(i, s)| {
                s.holders.contains(&id) && s.seq.is_some_and(|q| !ledger.has_released(*i, q))
            })
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::BoardView;

    const WINDOW: usize = 4;

    /// A state whose arena has `WINDOW` window slots and `lag` lag slots
    /// (its memory is never touched here: /dev/null stands in for it).
    fn state(lag: usize) -> State {
        let mut s = State::new("pacing", WINDOW, Some(1), None, LagPolicy::Wait);
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        s.set_arena(fd, 4096, lag).unwrap();
        s
    }

    /// Attaches a consumer; returns its id and the peer end of its socket
    /// (kept open, so that what the producer sends it is taken).
    fn attach(s: &mut State, on_evict: OnEvict) -> (u64, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let hello = ConsumerHello {
            batch_size: None,
            drop_last: false,
            join: JoinPolicy::CatchUp,
            label: String::new(),
            on_evict,
        };
        let id = s.add_consumer(Arc::new(ours), 1, hello).unwrap();
        (id, theirs)
    }

    /// Consumer `id` reads batch `seq` and drops it, as its process would:
    /// acquired, then released, in its ledger.
    fn read(s: &State, id: u64, seq: u64) {
        let i = s.slots.find(seq).unwrap();
        let ledger = s.consumers[&id].ledger.as_ref().unwrap();
        ledger.acquire(i, seq);
        ledger.release(i, seq);
    }

    /// Publishes batches of one row while a slot can be taken, at most
    /// `most`; returns how many.
    fn publish(s: &mut State, most: u64) -> u64 {
        let mut n = 0;
        while n < most {
            let Some(i) = s.take_slot(&mut |_| true) else {
                break;
            };
            let (seq, _) = s.next_batch();
            s.publish(i, seq, 1);
            n += 1;
        }
        n
    }

    /// Issue 25: with lag slots to spare and one consumer slower than the
    /// other, the publisher still stays at most a window ahead of the
    /// faster one; lag slots hold only what the faster one has read and the
    /// slower one has not, and once the two are half a window apart the
    /// faster one never waits for the slower.
    #[test]
    fn the_publisher_is_never_more_than_a_window_ahead_of_the_fastest_consumer() {
        let w = WINDOW as u64;
        let mut s = state(100);
        let (fast, _f) = attach(&mut s, OnEvict::Error);
        let (slow, _s) = attach(&mut s, OnEvict::Error);
        s.begin_epoch().unwrap();
        let view = BoardView::map(s.shm.as_ref().unwrap().board.readonly_fd().unwrap()).unwrap();
        assert_eq!(publish(&mut s, 1000), w);
        assert!(
            view.awaits_read_of(0),
            "the read it waits for is on the board"
        );
        let (mut fast_at, mut slow_at, mut widest) = (0u64, 0u64, 0u64);
        for round in 0..60 {
            if fast_at < s.next_batch().0 {
                read(&s, fast, fast_at);
                fast_at += 1;
            }
            if round % 2 == 0 {
                read(&s, slow, slow_at);
                slow_at += 1;
            }
            widest = widest.max(fast_at - slow_at);
            publish(&mut s, 1000);
            let ahead = s.next_batch().0 - fast_at;
            assert!(ahead <= w, "round {round}: {ahead} batches ahead");
            if fast_at - slow_at >= w / 2 {
                assert_eq!(ahead, w, "round {round}: the faster one waited");
                assert!(view.awaits_read_of(fast_at) && !view.awaits_read_of(fast_at - 1));
            }
        }
        assert!(widest > 2 * w, "the test ran the two apart ({widest})");
        let lag = s.slots.lag_in_use() as u64;
        assert!(lag > 0, "the slower one's backlog went to lag slots");
        assert!(
            lag <= widest,
            "{lag} lag slots for a gap of at most {widest}"
        );
        // The faster one leaves: the slower one paces the publisher now.
        s.remove_consumer(fast);
        assert_eq!(publish(&mut s, 1000), 0);
        while slow_at < s.next_batch().0 {
            read(&s, slow, slow_at);
            slow_at += 1;
        }
        assert_eq!(publish(&mut s, 1000), w);
    }

    /// A laggard evicted with `on_evict: rejoin` reads on from its next
    /// epoch: where it was is not where it stands, so alone it does not
    /// hold the publisher back a window ahead of a batch it will never read.
    #[test]
    fn a_rejoining_laggard_paces_from_its_new_epoch_not_from_where_it_fell_behind() {
        let mut s = state(2);
        let (fast, _f) = attach(&mut s, OnEvict::Error);
        let (slow, _s) = attach(&mut s, OnEvict::Rejoin);
        s.begin_epoch().unwrap();
        let mut fast_at = 0;
        loop {
            publish(&mut s, 1000);
            let (next, _) = s.next_batch();
            if fast_at == next {
                break; // every slot is held by the slower one
            }
            while fast_at < next {
                read(&s, fast, fast_at);
                fast_at += 1;
            }
        }
        assert_eq!(fast_at, (WINDOW + 2) as u64);
        assert_eq!(s.evict_laggards(), 1);
        s.remove_consumer(fast);
        s.end_epoch().unwrap();
        let first = s.next_batch().0;
        s.begin_epoch().unwrap();
        assert_eq!(publish(&mut s, 1000), WINDOW as u64);
        // It paces the publisher from where it reads on.
        assert_eq!(s.awaited_read(), Some(first));
        read(&s, slow, first);
        assert_eq!(publish(&mut s, 1000), 1);
    }

    /// The resume point is what the slowest consumer has taken, as a row of
    /// its epoch, across an epoch boundary and from a resumed start.
    #[test]
    fn the_low_water_mark_is_the_slowest_consumers_row_in_its_epoch() {
        let mut s = state(8);
        s.set_samples_per_epoch(Some(6));
        s.resume_at(3, 4); // resumed: epoch 3 from its row 4
        let (fast, _f) = attach(&mut s, OnEvict::Error);
        let (slow, _s) = attach(&mut s, OnEvict::Error);
        assert_eq!(s.low_water(), Some((3, 4)), "nothing published yet");
        assert_eq!(s.begin_epoch().unwrap(), 3);
        assert_eq!(publish(&mut s, 2), 2); // rows 4 and 5 of epoch 3
        s.end_epoch().unwrap();
        assert_eq!(s.low_water(), Some((3, 4)), "nobody has read");
        read(&s, fast, 0);
        read(&s, fast, 1);
        s.begin_epoch().unwrap();
        assert_eq!(publish(&mut s, 3), 3); // rows 0..3 of epoch 4
        for seq in 2..5 {
            read(&s, fast, seq);
        }
        assert_eq!(s.low_water(), Some((3, 4)), "the slow one has read nothing");
        read(&s, slow, 0);
        assert_eq!(s.low_water(), Some((3, 5)), "the slow one took row 4");
        read(&s, slow, 1);
        read(&s, slow, 2);
        assert_eq!(s.low_water(), Some((4, 1)), "and now row 0 of epoch 4");
        s.remove_consumer(slow);
        assert_eq!(s.low_water(), Some((4, 3)), "the fast one has everything");
    }
}
