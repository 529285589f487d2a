//! The durable resume point: where a restarted producer may resume
//! without any attached consumer missing a row.

use super::{position, Phase, State};

impl State {
    /// Resumes a stream (before the first epoch): welcomes say a restart
    /// resumes it, and the first epoch begun is `epoch`, from its row `row`.
    pub fn resume_at(&mut self, epoch: u64, row: u64) {
        self.epochs_begun = epoch;
        self.next_start_row = row;
    }

    /// Welcomes say that a producer restarted under this name resumes the
    /// stream, identified by `identity`.
    pub fn set_resumable(&mut self, identity: String) {
        self.identity = Some(identity);
    }

    /// The position (epoch, row) of the next row to publish: inside an
    /// open epoch, past its published rows; between epochs, the next
    /// epoch's first row.
    pub fn head(&self) -> (u64, u64) {
        if self.epoch.open {
            (
                self.epoch.number,
                self.epoch.start_row + self.epoch.published_rows,
            )
        } else {
            (self.epochs_begun, self.next_start_row)
        }
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
            return Some(self.head());
        }
        self.marks
            .iter()
            .find(|m| m.seq == low)
            .map(|m| (m.epoch, m.row))
    }
}
