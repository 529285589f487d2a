//! Epochs as the publisher drives them: beginning and ending one,
//! boundaries, and the `EpochStart` each following consumer gets.

use super::{Epoch, Phase, State};
use crate::error::{Error, Result};
use crate::wire::{self, Boundary, EpochStart, JoinPolicy, ToConsumer};

/// The slot and rows of retained batches, oldest first.
pub(super) type Retained = Vec<(usize, u64)>;

impl State {
    /// True between `begin_epoch` and `end_epoch`.
    pub fn epoch_open(&self) -> bool {
        self.epoch.open
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

    pub(super) fn started_this_epoch(&self, id: u64) -> bool {
        self.consumers.get(&id).and_then(|c| c.started) == Some(self.epoch.number)
    }

    /// True when a consumer joining now under `policy` starts mid-epoch:
    /// what [`State::join`] decides, told in the welcome it precedes.
    pub(super) fn joins_mid_epoch(&self, policy: JoinPolicy) -> bool {
        policy == JoinPolicy::Now && self.epoch.open && self.epoch.published_rows > 0
    }

    /// Rows left in the current epoch, when known.
    pub(super) fn partial_samples(&self) -> Option<u64> {
        self.epoch
            .samples
            .map(|n| n.saturating_sub(self.epoch.published_rows))
    }

    /// The slot and rows of every batch of the current epoch, oldest
    /// first, if all are still retained.
    pub(super) fn retained_epoch(&self) -> Option<Retained> {
        self.retained_since(self.epoch.first_seq?)
    }

    /// The batch of the current epoch holding its row `row` (or its last
    /// published batch, when `row` lies past it), that batch's first row, and
    /// the slot and rows of it and every later batch, oldest first, if all
    /// are still retained.
    pub(super) fn retained_from(&self, row: u64) -> Option<(u64, u64, Retained)> {
        let number = self.epoch.number;
        let mark = self
            .marks
            .iter()
            .rev()
            .find(|m| m.epoch == number && m.row <= row)?;
        Some((mark.seq, mark.row, self.retained_since(mark.seq)?))
    }

    /// The slot and rows of batches `first..` published so far, if all are
    /// still retained.
    fn retained_since(&self, first: u64) -> Option<Retained> {
        (first..self.next_seq)
            .map(|seq| {
                let i = self.slots.find(seq)?;
                Some((i, self.slots.get(i).rows))
            })
            .collect()
    }

    /// Sends `EpochStart` to consumer `id`: it reads the epoch's batches
    /// from `first_seq` on.
    pub(super) fn start_epoch_for(
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
        self.start_epoch_at(id, samples, partial, first_seq, first_row)
    }

    /// Sends `EpochStart` to consumer `id`: it reads the epoch's batches
    /// from `first_seq` on, whose first row is the epoch's row `first_row`.
    pub(super) fn start_epoch_at(
        &mut self,
        id: u64,
        samples: Option<u64>,
        partial: bool,
        first_seq: u64,
        first_row: u64,
    ) -> bool {
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
}
