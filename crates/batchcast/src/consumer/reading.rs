//! Reading the board: where this consumer stands in the stream, what an
//! `EpochStart` means for it, and taking each batch into its events.
//!
//! A consumer's position ([`Position`]: an epoch and a row in it) counts the rows
//! it has taken from the board, whichever producer published them. A batch
//! is taken only for its rows past the position: so a consumer that
//! reattaches to a restarted producer (`super::reattach`), which resumes at
//! a point no later than any consumer's position, skips what it has, and
//! reads and drops an epoch wholly behind it, while its events go on as if
//! the producer had never stopped.

use std::sync::Arc;

use super::batch::{Batch, SlotLease};
use super::rebatch::batches_in;
use super::{Assembler, Consumer, EpochInfo, Event};
use crate::error::{Error, Result};
use crate::wire::{EpochStart, Position};

/// Where this consumer reads the board in the epoch it follows.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cursor {
    /// The epoch read.
    pub(super) epoch: u64,
    /// The next batch to read.
    pub(super) next: u64,
    /// The epoch's end, once its `EpochEnd` has arrived.
    pub(super) end: Option<u64>,
    /// The position in the epoch of batch `next`'s first row.
    pub(super) row: u64,
    /// The epoch lies wholly behind this consumer (a restarted producer
    /// resumed at an earlier epoch): its batches are read and dropped.
    pub(super) behind: bool,
}

impl Consumer {
    /// An epoch begins on the board: a new one for this consumer, one it
    /// continues after reattaching (it skips the rows it has), or one
    /// wholly behind it (read and dropped, no events).
    pub(super) fn epoch_started(&mut self, es: EpochStart) -> Result<()> {
        let mut cursor = Cursor {
            epoch: es.epoch,
            next: es.first_seq,
            end: None,
            row: es.first_row,
            behind: false,
        };
        let reattached = std::mem::take(&mut self.reattached);
        if let Some(want) = self.restore.filter(|w| es.epoch >= w.epoch) {
            self.restore = None;
            // A reattachment joins as any consumer that lost its producer.
            self.opts.start = None;
            if es.epoch == want.epoch && es.first_row <= want.row {
                // Exact: the rows before `want` are skipped.
                self.begin(&es, want.row, cursor);
                self.resumed = true;
                return Ok(());
            }
            self.pos = None;
            self.warn_unreplayable(want, &es);
            if es.first_row > 0 {
                // Joins at the next epoch's start.
                cursor.behind = true;
                self.cursor = Some(cursor);
                return Ok(());
            }
        }
        if let Some(p) = self.pos {
            let continues = self.assembler.is_some() && p.epoch == es.epoch;
            if es.epoch < p.epoch {
                cursor.behind = true;
                self.cursor = Some(cursor);
                return Ok(());
            }
            if (continues || reattached) && (es.epoch > p.epoch || es.first_row > p.row) {
                return Err(Error::Protocol(format!(
                    "the restarted producer {:?} resumed its stream at epoch {}, row {}, past this consumer's position (epoch {}, row {}): the rows between would be lost. Its state file was not the one of the producer this consumer followed (restarted with --fresh, or removed); reconnect to start afresh",
                    self.name, es.epoch, es.first_row, p.epoch, p.row
                )));
            }
            if continues {
                self.resumed = true;
                self.cursor = Some(cursor);
                return Ok(());
            }
        }
        self.begin(&es, es.first_row, cursor);
        Ok(())
    }

    /// A new epoch for this consumer, whose first row handed out is the
    /// epoch's row `first_row` (no earlier than the start's).
    fn begin(&mut self, es: &EpochStart, first_row: u64, cursor: Cursor) {
        let bs = self.opts.batch_size.unwrap_or(es.batch_size.max(1));
        let skipped = first_row - es.first_row;
        let samples = es.samples.map(|n| n.saturating_sub(skipped));
        let info = EpochInfo {
            epoch: es.epoch,
            samples,
            batches: samples.map(|n| batches_in(n, bs, self.opts.drop_last)),
            batch_size: bs,
            partial: es.partial || skipped > 0,
            first_row,
        };
        self.assembler = Some(Assembler::new(es.epoch, samples, bs, self.opts.drop_last));
        self.rows = 0;
        if !es.partial && es.samples.is_some() {
            self.welcome.samples_per_epoch = es.samples;
        }
        self.epoch_taken = 0;
        self.resumed = false;
        self.pos = Some(Position {
            epoch: es.epoch,
            row: first_row,
        });
        self.epoch = Some(info.clone());
        self.cursor = Some(cursor);
        self.events.push_back(Ok(Event::EpochStart(info)));
    }

    /// Says that a restored position cannot be replayed: the producer
    /// started this consumer past it (it no longer retains its batch, or
    /// was past its epoch).
    fn warn_unreplayable(&self, want: Position, es: &EpochStart) {
        let next = if es.first_row > 0 {
            es.epoch + 1
        } else {
            es.epoch
        };
        let per_epoch = self.welcome.samples_per_epoch;
        let rest = per_epoch.map(|n| n.saturating_sub(want.row));
        if next == want.epoch + 1 && rest == Some(0) {
            return; // the saved epoch was complete: nothing is lost
        }
        let rest = rest.map_or_else(
            || format!("the rest of epoch {} from its row {}", want.epoch, want.row),
            |n| {
                format!(
                    "{n} rows of epoch {} (from its row {})",
                    want.epoch, want.row
                )
            },
        );
        let between = match (next - want.epoch - 1, per_epoch) {
            (0, _) => String::new(),
            (k, Some(n)) => format!(" and the {} rows of the {k} epochs after it", k * n),
            (k, None) => format!(" and the {k} epochs after it"),
        };
        self.opts.warn.emit(&format!(
            "the saved position of this consumer of {:?} (epoch {}, row {}) cannot be replayed: \
             the producer is at epoch {}, row {} and no longer holds the batch with that row; \
             {rest}{between} are not delivered, and this consumer starts at epoch {next}",
            self.name, want.epoch, want.row, es.epoch, es.first_row
        ));
    }

    /// This consumer is done with `epoch`: it stands at the next one's
    /// start.
    pub(super) fn epoch_ended(&mut self, epoch: u64) {
        self.cursor = None;
        self.resumed = false;
        self.pos = Some(Position {
            epoch: epoch + 1,
            row: 0,
        });
    }

    /// Takes batch `seq` into events, an error in the place of the batch
    /// that caused it; false when the producer has evicted this consumer
    /// (the batch was not read).
    pub(super) fn take_batch(&mut self, seq: u64) -> bool {
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
        let Some(cursor) = self.cursor.as_mut() else {
            return Err(Error::Protocol("a batch arrived outside an epoch".into()));
        };
        let epoch = cursor.epoch;
        if header.epoch != epoch {
            return Err(Error::Protocol(format!(
                "batch {seq} belongs to epoch {}, not to epoch {epoch}",
                header.epoch
            )));
        }
        // The rows of this batch this consumer already has (from a producer
        // that died) are skipped: all of them in an epoch behind it.
        let rows = header.layout.rows();
        let first = cursor.row;
        cursor.row += rows;
        let skip = match self.pos {
            _ if cursor.behind => rows,
            Some(p) if p.epoch == epoch => p.row.saturating_sub(first).min(rows),
            _ => 0,
        };
        let lease = Arc::new(SlotLease {
            seq,
            slot,
            layout: header.layout,
            arena: Arc::clone(&self.arena),
            link: Arc::clone(&self.link),
        });
        if skip == rows {
            return Ok(Some(Vec::new())); // the lease drops: released
        }
        let Some(assembler) = self.assembler.as_mut() else {
            return Err(Error::Protocol("a batch arrived outside an epoch".into()));
        };
        self.pos = Some(Position {
            epoch,
            row: first + rows,
        });
        self.epoch_taken += rows - skip;
        Ok(Some(assembler.push(lease, skip)))
    }
}
