//! Consumers joining (welcomed, placed per their join policy, a
//! catch-up joiner's replay) and leaving with batches still alive.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use super::{ConsumerEntry, Phase, State};
use crate::ledger::Ledger;
use crate::wire::{
    self, ConsumerHello, JoinPolicy, Position, ToConsumer, Welcome, PROTOCOL_VERSION,
};

impl State {
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
                phase: Phase::Pending,
                started: None,
                joined_at: None,
                epoch_rows: 0,
                ledger: None,
                last_sent: None,
                evictions: 0,
                parked: hello.deferred.then(Default::default),
                hello,
            },
        );
        if self.shm.is_some() {
            self.welcome(id);
        }
        self.has_consumer(id).then_some(id)
    }

    pub(super) fn welcome(&mut self, id: u64) {
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
            resumable: self.identity.is_some(),
            identity: self.identity.clone(),
            mirrors: shm.mirrors.iter().map(|(spec, _)| spec.clone()).collect(),
        });
        let sent = Ledger::create(self.slots.len()).and_then(|(ledger, ledger_fd)| {
            let frame = wire::encode(&welcome)?;
            let holds_fd = shm.holds.share_fd()?;
            let fixed = [
                shm.arena_fd.as_fd(),
                shm.board_fd.as_fd(),
                ledger_fd.as_fd(),
                holds_fd.as_fd(),
            ];
            let mirrors = shm.mirrors.iter().map(|(_, fd)| fd.as_fd());
            let fds: Vec<_> = fixed.into_iter().chain(mirrors).collect();
            wire::send_frame_with_fds(&*entry.sock, &frame, &fds)?;
            Ok(ledger)
        });
        match sent {
            Ok(ledger) => {
                if let Some(c) = self.consumers.get_mut(&id) {
                    c.ledger = Some(ledger);
                }
                self.join(id);
                self.pin_current_epoch(id);
            }
            Err(_) => self.remove_consumer(id),
        }
    }

    /// Places a welcomed consumer per its join policy.
    pub(super) fn join(&mut self, id: u64) {
        let Some((policy, start)) = self
            .consumers
            .get(&id)
            .map(|c| (c.hello.join, c.hello.start))
        else {
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
        if let Some(want) = start.filter(|w| w.epoch <= self.epoch.number) {
            self.join_at(id, want);
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

    /// Places a consumer restored at `want` (not a later epoch than the
    /// current one, which has published batches): at the retained batch
    /// holding its row, so that it skips only the rows before it in that
    /// batch; else (an earlier epoch, or that batch is gone) at the next
    /// epoch, where the consumer warns of what it cannot have.
    fn join_at(&mut self, id: u64, want: Position) {
        let found = (want.epoch == self.epoch.number)
            .then(|| self.retained_from(want.row))
            .flatten();
        let Some((first, first_row, retained)) = found else {
            self.set_phase(id, Phase::Waiting);
            return;
        };
        let skipped = first_row.saturating_sub(self.epoch.start_row);
        let samples = self.epoch.samples.map(|n| n.saturating_sub(skipped));
        self.set_phase(id, Phase::Following);
        // Held before the consumer is told, as a catch-up joiner's.
        for &(i, rows) in &retained {
            self.subscribe(id, i, rows);
        }
        self.start_epoch_at(id, samples, true, first, first_row);
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

    /// Consumer `id` was closed with batches still alive: it keeps only
    /// the slots of those and gets nothing more (see [`Phase::Left`]).
    pub fn leave(&mut self, id: u64) {
        if self.cut_off(id).is_some() {
            self.set_phase(id, Phase::Left);
        }
    }
}
