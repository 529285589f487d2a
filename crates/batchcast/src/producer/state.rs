//! The producer's shared bookkeeping: slots, leases, consumers, epochs.
//!
//! One `Mutex<State>` guards it; the publishing thread and the control thread
//! both take it. The invariant everything rests on: a slot's `holders` are
//! the consumers its batch was published to, and the publishing thread
//! writes a slot only once every holder has released the batch in its
//! ledger ([`crate::ledger`]) or is gone. Removing a consumer (its socket
//! closed, it sent garbage, a send to it failed) drops it from every slot's
//! holders at once, so a dead consumer never holds the others up.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use crate::board::Board;
use crate::ledger::Ledger;
use crate::status::{ConsumerStatus, StatusReport};
use crate::stream::StreamSpec;
use crate::wire::{
    self, ConsumerHello, EpochStart, JoinPolicy, ToConsumer, Welcome, PROTOCOL_VERSION,
};

/// One slot of the window.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// The batch it holds, if any.
    pub seq: Option<u64>,
    /// Consumers its batch was published to that may not have released it.
    pub holders: Vec<u64>,
    /// Rows of the batch it holds.
    pub rows: u64,
}

/// Where a consumer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Connected before the arena existed; not welcomed yet.
    Pending,
    /// Welcomed; waits for the next epoch to begin.
    Waiting,
    /// Receives the current epoch's batches.
    Following,
}

/// One connected consumer.
#[derive(Debug)]
pub(crate) struct ConsumerEntry {
    pub sock: Arc<UnixStream>,
    pub pid: u32,
    pub hello: ConsumerHello,
    pub phase: Phase,
    /// The epoch this consumer got an `EpochStart` for, if it is inside one.
    pub started: Option<u64>,
    /// Rows published to it in the current epoch.
    pub epoch_rows: u64,
    /// Its ledger, once welcomed.
    pub ledger: Option<Ledger>,
    /// The last batch published to it.
    pub last_sent: Option<u64>,
}

/// The current epoch, as the publisher drives it.
#[derive(Debug, Default)]
pub(crate) struct Epoch {
    pub number: u64,
    pub open: bool,
    pub first_seq: Option<u64>,
    pub published_rows: u64,
    pub samples: Option<u64>,
}

/// The arena as the control thread needs it.
#[derive(Debug)]
pub(crate) struct ArenaInfo {
    pub fd: OwnedFd,
    pub slot_size: u64,
}

/// Everything behind the producer's mutex.
#[derive(Debug)]
pub(crate) struct State {
    pub name: String,
    pub pid: u32,
    pub started: Instant,
    pub arena: Option<ArenaInfo>,
    pub board: Arc<Board>,
    /// A read-only descriptor of the board, for welcomes.
    pub board_fd: OwnedFd,
    pub slots: Vec<Slot>,
    pub consumers: BTreeMap<u64, ConsumerEntry>,
    pub next_id: u64,
    pub next_seq: u64,
    pub epoch: Epoch,
    pub epochs_begun: u64,
    pub batch_size: Option<u64>,
    pub samples_per_epoch: Option<u64>,
    /// What the producer says about its stream, in welcomes and reports.
    pub stream: StreamSpec,
    pub published: u64,
    pub blocked: Duration,
    pub recent: VecDeque<Instant>,
    pub closed: bool,
    /// Threads waiting on the condition variable.
    pub waiters: usize,
}

impl State {
    pub fn new(
        name: &str,
        window: usize,
        batch_size: Option<u64>,
        samples: Option<u64>,
    ) -> crate::Result<Self> {
        let board = Board::create(name, window)?;
        let board_fd = board.readonly_fd()?;
        Ok(State {
            name: name.to_owned(),
            pid: std::process::id(),
            started: Instant::now(),
            arena: None,
            board: Arc::new(board),
            board_fd,
            slots: (0..window).map(|_| Slot::default()).collect(),
            consumers: BTreeMap::new(),
            next_id: 1,
            next_seq: 0,
            epoch: Epoch::default(),
            epochs_begun: 0,
            batch_size,
            samples_per_epoch: samples,
            stream: StreamSpec::default(),
            published: 0,
            blocked: Duration::ZERO,
            recent: VecDeque::new(),
            closed: false,
            waiters: 0,
        })
    }

    /// Sends `frame` to consumer `id` and bumps the board so that it looks;
    /// on failure removes the consumer.
    pub fn send_or_drop(&mut self, id: u64, frame: &[u8]) -> bool {
        let ok = match self.consumers.get(&id) {
            Some(c) => wire::send_frame(&*c.sock, frame).is_ok(),
            None => return false,
        };
        if ok {
            self.board.bump();
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
        for slot in &mut self.slots {
            slot.holders.retain(|&h| h != id);
        }
        // Wake the peer's reader at once if it is still alive.
        let _ = entry.sock.shutdown(std::net::Shutdown::Both);
    }

    /// True when consumer `id` still needs batch `seq` in slot `i`.
    fn still_holds(&self, id: u64, i: usize, seq: u64) -> bool {
        match self.consumers.get(&id).and_then(|c| c.ledger.as_ref()) {
            Some(ledger) => !ledger.has_released(i, seq),
            None => false, // gone
        }
    }

    /// A slot no consumer needs any more, the one holding the oldest batch
    /// first (so that recent batches stay retained for catch-up joins). Its
    /// batch is forgotten: the caller is about to rewrite it.
    pub fn take_free_slot(&mut self) -> Option<usize> {
        for i in 0..self.slots.len() {
            let Some(seq) = self.slots[i].seq else {
                continue;
            };
            let mut holders = std::mem::take(&mut self.slots[i].holders);
            holders.retain(|&id| self.still_holds(id, i, seq));
            self.slots[i].holders = holders;
        }
        let i = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.holders.is_empty())
            .min_by_key(|(_, s)| s.seq.map_or(0, |q| q + 1))
            .map(|(i, _)| i)?;
        self.slots[i].seq = None;
        Some(i)
    }

    /// Adds a consumer. Before the arena exists it is left pending; else it
    /// is welcomed and joins per its policy.
    pub fn add_consumer(&mut self, sock: Arc<UnixStream>, pid: u32, hello: ConsumerHello) -> u64 {
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
                epoch_rows: 0,
                ledger: None,
                last_sent: None,
            },
        );
        if self.arena.is_some() {
            self.welcome(id);
        }
        id
    }

    /// Welcomes every pending consumer (called once the arena exists).
    pub fn welcome_pending(&mut self) {
        let pending: Vec<u64> = self
            .consumers
            .iter()
            .filter(|(_, c)| c.phase == Phase::Pending)
            .map(|(&id, _)| id)
            .collect();
        for id in pending {
            self.welcome(id);
        }
    }

    fn welcome(&mut self, id: u64) {
        let (Some(arena), Some(entry)) = (self.arena.as_ref(), self.consumers.get(&id)) else {
            return;
        };
        let partial = self.joins_mid_epoch(entry.hello.join);
        let welcome = ToConsumer::Welcome(Welcome {
            version: PROTOCOL_VERSION,
            producer_pid: self.pid,
            slot_size: arena.slot_size,
            slots: self.slots.len() as u32,
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
        });
        let sent = Ledger::create(self.slots.len()).and_then(|(ledger, ledger_fd)| {
            let frame = wire::encode(&welcome)?;
            let fds = [arena.fd.as_fd(), self.board_fd.as_fd(), ledger_fd.as_fd()];
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
                    for &(seq, rows) in &retained {
                        self.subscribe(id, seq, rows);
                    }
                    self.start_epoch_for(id, samples, false, first);
                }
                _ => self.set_phase(id, Phase::Waiting),
            },
        }
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

    /// Every batch of the current epoch (seq, rows), oldest first, if all
    /// are still in their slots.
    fn retained_epoch(&self) -> Option<Vec<(u64, u64)>> {
        let first = self.epoch.first_seq?;
        (first..self.next_seq)
            .map(|seq| {
                let slot = self.slots.iter().find(|s| s.seq == Some(seq))?;
                Some((seq, slot.rows))
            })
            .collect()
    }

    /// Sends `EpochStart` to consumer `id`: it reads the epoch's batches
    /// from `first_seq` on.
    pub fn start_epoch_for(
        &mut self,
        id: u64,
        samples: Option<u64>,
        partial: bool,
        first_seq: u64,
    ) -> bool {
        let msg = ToConsumer::EpochStart(EpochStart {
            epoch: self.epoch.number,
            samples,
            batch_size: self.batch_size.unwrap_or(1),
            partial,
            first_seq,
        });
        let Ok(frame) = wire::encode(&msg) else {
            return false;
        };
        if let Some(c) = self.consumers.get_mut(&id) {
            c.started = Some(self.epoch.number);
        }
        if !self.send_or_drop(id, &frame) {
            return false;
        }
        true
    }

    /// Makes consumer `id` a holder of batch `seq` (published to it).
    pub fn subscribe(&mut self, id: u64, seq: u64, rows: u64) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.seq == Some(seq)) {
            slot.holders.push(id);
        }
        if let Some(c) = self.consumers.get_mut(&id) {
            c.last_sent = Some(seq);
            c.epoch_rows += rows;
        }
    }

    /// Ids of the consumers in `phase`.
    pub fn ids_in(&self, phase: Phase) -> Vec<u64> {
        self.consumers
            .iter()
            .filter(|(_, c)| c.phase == phase)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Sends `frame` to every consumer, dropping those it fails for.
    pub fn broadcast(&mut self, frame: &[u8]) {
        let ids: Vec<u64> = self.consumers.keys().copied().collect();
        for id in ids {
            self.send_or_drop(id, frame);
        }
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
        StatusReport {
            name: self.name.clone(),
            pid: self.pid,
            uptime_secs: self.started.elapsed().as_secs_f64(),
            slots: self.slots.len() as u32,
            slot_size: self.arena.as_ref().map(|a| a.slot_size).unwrap_or(0),
            epoch: self.epoch.number,
            published: self.published,
            batches_per_sec: rate,
            blocked_secs: self.blocked.as_secs_f64(),
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
                    }
                    .to_owned(),
                    position: c.last_sent,
                    lag: self.held_by(id),
                    delivered: c.ledger.as_ref().map_or(0, |l| l.figures().0),
                    wait_secs: c.ledger.as_ref().map_or(0, |l| l.figures().1) as f64 / 1e9,
                })
                .collect(),
        }
    }

    /// Batches published to consumer `id` that it has not released.
    fn held_by(&self, id: u64) -> u64 {
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                s.holders.contains(&id) && s.seq.is_some_and(|q| self.still_holds(id, *i, q))
            })
            .count() as u64
    }

    /// Records one publish for the rate figure.
    pub fn note_publish(&mut self) {
        self.published += 1;
        let now = Instant::now();
        self.recent.push_back(now);
        while self.recent.len() > 64 {
            self.recent.pop_front();
        }
    }
}
