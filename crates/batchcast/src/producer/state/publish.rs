//! Publishing: taking a slot (paced to the most advanced consumer),
//! giving one back, and publishing a batch to every follower.

use std::time::{Duration, Instant};

use super::{front, position, Mark, Phase, State};

impl State {
    /// Adds time the publisher spent blocked on a full window (every slot
    /// held, or the fastest consumer a window behind).
    pub fn note_blocked(&mut self, took: Duration) {
        self.blocked += took;
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
    pub(super) fn awaited_read(&self) -> Option<u64> {
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
}
