//! Turning what the producer sent and published into events: the socket's
//! control messages are queued, and [`Consumer::advance`] reads the board
//! and acts on them in the order the producer meant them (see the consumer
//! module's documentation for why the board's `published` counter is read
//! before the socket). Batches are taken one consumer batch at a time; an
//! epoch's end waits for the batches published before it; a shutdown lets
//! what was published before it be read; an eviction drops what the epoch
//! still had pending.

use super::{Consumer, Event, MAX_HELD_TRIGGERS};
use crate::error::{Error, Result};
use crate::wire::{self, Fill, OnEvict, ShutdownReason, ToConsumer};

impl Consumer {
    /// Reads everything the producer has sent and published so far, and
    /// turns it into events.
    pub(super) fn drain(&mut self) -> Result<()> {
        if self.finished.is_some() {
            return Ok(());
        }
        // Before the socket: see the consumer module's documentation.
        let published = self.link.board.published();
        let eof = self.read_socket()?;
        // The answer to this consumer's `Start`, or, to a parked one, the
        // producer's own at its shutdown.
        let started = self
            .control
            .iter()
            .position(|m| matches!(m, ToConsumer::Started));
        if let Some(i) = started {
            self.control.remove(i);
            self.awaiting_start = false;
            self.parked = false;
        }
        if !self.awaiting_start {
            self.advance(published)?;
        }
        // A clean shutdown may still wait in the queue behind batches not
        // taken yet (they are taken lazily).
        let shutdown = self
            .control
            .iter()
            .any(|m| matches!(m, ToConsumer::Shutdown(_)));
        if eof && self.finished.is_none() && !shutdown {
            self.lose_producer();
            if self.gone {
                return Err(self.gone_error());
            }
        }
        Ok(())
    }

    /// Queues every control message the socket holds now; true when the
    /// producer closed its end.
    fn read_socket(&mut self) -> Result<bool> {
        loop {
            // Decode after every read: the reader holds at most one largest
            // frame and reads nothing more until it is decoded.
            let fill = self.reader.fill(&self.link.sock, false, None)?;
            while let Some(msg) = self.reader.next_frame::<ToConsumer>()? {
                self.control.push_back(msg);
            }
            match fill {
                Fill::Data => continue,
                Fill::WouldBlock => return Ok(false),
                Fill::Eof => return Ok(true),
            }
        }
    }

    /// Reads the board up to `published` and acts on control messages, in
    /// the order the producer meant them.
    fn advance(&mut self, mut published: u64) -> Result<()> {
        loop {
            self.bound_epoch();
            // Lazily: one consumer batch at a time; the rest waits.
            if self.holds_batches() || !self.take_published(published) {
                return Ok(());
            }
            let Some(msg) = self.control.pop_front() else {
                return Ok(());
            };
            match msg {
                ToConsumer::EpochStart(es) if self.cursor.is_none() => self.epoch_started(es)?,
                ToConsumer::EpochEnd {
                    epoch,
                    samples,
                    end_seq,
                } => self.epoch_end(epoch, samples, end_seq, &mut published)?,
                ToConsumer::Boundary(b) => self.boundary(b)?,
                ToConsumer::Shutdown(reason) => {
                    self.shut_down(reason);
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

    /// An epoch's end bounds what is read of the board for it (a boundary
    /// announced before it does not hide it).
    fn bound_epoch(&mut self) {
        let next = self
            .control
            .iter()
            .find(|m| !matches!(m, ToConsumer::Boundary(_)));
        if let (Some(c), Some(ToConsumer::EpochEnd { end_seq, .. })) = (self.cursor.as_mut(), next)
        {
            c.end = Some(*end_seq);
        }
    }

    /// Takes the epoch's batches published up to `published`, until one
    /// consumer batch waits to be handed out; false when one does (or the
    /// producer evicted this consumer), so that the rest waits.
    fn take_published(&mut self, published: u64) -> bool {
        let Some(cursor) = self.cursor.filter(|_| !self.cut_off) else {
            return true;
        };
        let limit = cursor.end.map_or(published, |end| end.min(published));
        for seq in cursor.next..limit {
            let taken = self.take_batch(seq);
            if let Some(c) = self.cursor.as_mut() {
                c.next = seq + 1;
            }
            if !taken || self.holds_batches() {
                return false;
            }
        }
        true
    }

    /// The producer ended `epoch` at batch `end_seq`: its batches not read
    /// yet are read first (the message goes back to the queue's front),
    /// then its tail, its triggers and its end become events.
    fn epoch_end(
        &mut self,
        epoch: u64,
        samples: u64,
        end_seq: u64,
        published: &mut u64,
    ) -> Result<()> {
        let Some(cursor) = self.cursor.as_mut() else {
            return Err(Error::Protocol("an epoch ended that never began".into()));
        };
        if cursor.next < end_seq {
            // Its batches were published before it was sent: read them
            // first.
            cursor.end = Some(end_seq);
            *published = (*published).max(self.link.board.published());
            if *published < end_seq {
                return Err(Error::Protocol(format!(
                    "the epoch ended at batch {end_seq}, but only {published} were published"
                )));
            }
            self.control.push_front(ToConsumer::EpochEnd {
                epoch,
                samples,
                end_seq,
            });
            return Ok(());
        }
        if self.cursor.take().is_some_and(|c| c.behind) {
            // An epoch this consumer had already, its triggers with it.
            self.triggers.clear();
            return Ok(());
        }
        if let Some(tail) = self.assembler.as_mut().and_then(|a| a.finish()) {
            self.rows += tail.as_ref().map_or(0, |b| b.rows());
            self.events.push_back(tail.map(Event::Batch));
        }
        self.assembler = None;
        // Resumed, the producer counts only what it published.
        let samples = if self.resumed {
            self.epoch_taken
        } else {
            samples
        };
        self.epoch_ended(epoch);
        self.hand_out_triggers();
        self.events
            .push_back(Ok(Event::EpochEnd { epoch, samples }));
        Ok(())
    }

    /// The producer shut down cleanly: what was published before the
    /// shutdown is still read; an unfinished epoch's last partial batch is
    /// dropped.
    fn shut_down(&mut self, reason: ShutdownReason) {
        if let Some(cursor) = self.cursor {
            // At most a ring's worth: the board (shared memory) says how
            // far, and no more can still be there.
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

    /// Queues the triggers held back for the epoch being read, in order.
    fn hand_out_triggers(&mut self) {
        let fired = std::mem::take(&mut self.triggers);
        self.events
            .extend(fired.into_iter().map(|t| Ok(Event::Trigger(t))));
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
        self.epoch_ended(epoch);
        match self.opts.on_evict {
            OnEvict::Error => self.fell_behind = Some((epoch, behind, budget)),
            OnEvict::Rejoin => {
                self.opts.warn.emit(&format!(
                    "consumer of {:?} fell {behind} batches behind (budget \
                     {budget}) and was evicted from epoch {epoch}; the epoch ends short after \
                     {} samples and it rejoins at the next epoch",
                    self.name, self.rows
                ));
                self.hand_out_triggers();
                if in_epoch {
                    self.events.push_back(Ok(Event::EpochEnd {
                        epoch,
                        samples: self.rows,
                    }));
                }
            }
        }
    }
}
