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
//! state only through its methods, each of which keeps it whole. The core
//! is here; the rest by concept: `epochs` (beginning and ending them),
//! `membership` (joining and leaving), `publish` (slots and publishing),
//! `evict` (lag and eviction), `resume` (the durable resume point) and
//! `report` (the status figures).

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lag::LagPolicy;
use super::slots::Slots;
use crate::board::Board;
use crate::error::Result;
use crate::holds::Holds;
use crate::ledger::Ledger;
use crate::mirror::MirrorSpec;
use crate::stream::StreamSpec;
use crate::wire::{self, ConsumerHello};

mod epochs;
mod evict;
mod membership;
mod parked;
mod publish;
mod report;
mod resume;
#[cfg(test)]
mod tests;

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
    /// Connected `deferred` and not started yet (see `parked`).
    parked: Option<parked::Parked>,
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
    /// The device mirrors, for welcomes: their fds follow the fixed four.
    mirrors: Vec<(MirrorSpec, OwnedFd)>,
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
    /// The stream's identity, when a producer restarted under this name
    /// resumes it (it keeps a state file): told in welcomes.
    identity: Option<String>,
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
            identity: None,
            next_start_row: 0,
            marks: VecDeque::new(),
        }
    }

    /// The arena exists (and its device `mirrors`): adds its `lag_slots`
    /// lag slots, makes the board and the holder counts, and welcomes the
    /// consumers that wait for it.
    pub fn set_arena(
        &mut self,
        arena_fd: OwnedFd,
        slot_size: u64,
        lag_slots: usize,
        mirrors: Vec<(MirrorSpec, OwnedFd)>,
    ) -> Result<()> {
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
            mirrors,
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

    /// Sets the rows of the coming epochs.
    pub fn set_samples_per_epoch(&mut self, samples: Option<u64>) {
        self.samples_per_epoch = samples;
    }

    /// Sends `frame` to consumer `id` and bumps the board so that it looks;
    /// on failure removes the consumer.
    fn send_or_drop(&mut self, id: u64, frame: &[u8]) -> bool {
        let queued = self.queue_if_parked(id, frame);
        let ok = match self.consumers.get(&id) {
            Some(_) if queued.is_some() => queued == Some(true),
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

    /// Tells every consumer the stream is over (`frame`, a `Shutdown`),
    /// after what a parked one was not sent yet.
    pub fn shutdown(&mut self, frame: &[u8]) {
        let ids: Vec<u64> = self.consumers.keys().copied().collect();
        for id in ids {
            match self.consumers.get_mut(&id) {
                // Not welcomed: nothing was held back for it.
                Some(c) if c.phase == Phase::Pending => c.parked = None,
                _ => {
                    self.start(id, None);
                }
            }
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

    /// Describes the stream's first batch (for welcomes and reports).
    pub fn set_first_batch(&mut self, shape: Option<crate::stream::BatchShape>) {
        self.stream.first_batch = shape;
    }

    /// Sets the stream's free-form metadata (already checked).
    pub fn set_metadata(&mut self, json: String) {
        self.stream.metadata = json;
    }

    fn set_phase(&mut self, id: u64, phase: Phase) {
        if let Some(c) = self.consumers.get_mut(&id) {
            c.phase = phase;
            c.started = None;
            c.epoch_rows = 0;
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
}
