//! Consumers connected `deferred` (a trainer that builds its loader, then
//! reads its checkpoint): placed at once per their join policy, as any
//! consumer, but parked until their `Start`. While parked, what the
//! producer would send them is queued instead (so that a `Start` with a
//! saved position can replace it), and one placed at the next epoch holds
//! the current epoch's retained batches, so that the position it may ask
//! for is still there. `Start(None)` sends the queue and lets those
//! batches go; `Start(Some(position))` drops the queue and every batch it
//! holds, and places it at that position, as a hello's `start` would.
//! Either way `Started` follows: a consumer reads the board only once it
//! has it, since the queue's epoch ends came late (see `crate::consumer`).

use super::{Phase, State};
use crate::wire::{self, Position, ToConsumer};

/// Most frames queued for a parked consumer (a few per epoch); one more
/// removes it, as a failed send would.
const MAX_QUEUED: usize = 256;

/// What a parked consumer has not been sent, and what it holds for its
/// start.
#[derive(Debug, Default)]
pub(super) struct Parked {
    /// Frames for it, in order.
    queue: Vec<Vec<u8>>,
    /// Batches (slot, sequence number) of the current epoch it holds only
    /// so that they stay retained until it starts.
    pins: Vec<(usize, u64)>,
}

impl State {
    /// Queues `frame` for consumer `id` if it is parked: Some(true) when
    /// queued, Some(false) when its queue is full; None when not parked.
    pub(super) fn queue_if_parked(&mut self, id: u64, frame: &[u8]) -> Option<bool> {
        let parked = self.consumers.get_mut(&id)?.parked.as_mut()?;
        if parked.queue.len() >= MAX_QUEUED {
            return Some(false);
        }
        parked.queue.push(frame.to_vec());
        Some(true)
    }

    /// A parked consumer just placed at the next epoch holds the current
    /// epoch's retained batches.
    pub(super) fn pin_current_epoch(&mut self, id: u64) {
        let waiting = self
            .consumers
            .get(&id)
            .is_some_and(|c| c.parked.is_some() && c.phase == Phase::Waiting);
        if !waiting || !self.epoch.open {
            return;
        }
        let number = self.epoch.number;
        let pins: Vec<(usize, u64)> = self
            .marks
            .iter()
            .filter(|m| m.epoch == number)
            .filter_map(|m| self.slots.find(m.seq).map(|i| (i, m.seq)))
            .collect();
        for &(i, _) in &pins {
            self.slots.add_holder(i, id);
            if let Some(shm) = &self.shm {
                shm.holds.add(i);
            }
        }
        if let Some(p) = self.consumers.get_mut(&id).and_then(|c| c.parked.as_mut()) {
            p.pins = pins;
        }
    }

    /// A deferred consumer starts (`ToProducer::Start`): at `start` if
    /// given, else where it was placed. False when it was not parked (a
    /// second start, or one without `deferred`): a message out of place.
    pub fn start(&mut self, id: u64, start: Option<Position>) -> bool {
        let Some(parked) = self.consumers.get_mut(&id).and_then(|c| c.parked.take()) else {
            return false;
        };
        let placed = self.consumers.get(&id).map(|c| c.phase);
        let replace = start.is_some() && matches!(placed, Some(Phase::Waiting | Phase::Following));
        // Its pins, or, to be placed again, every batch it holds: it has
        // read none of them.
        let pins = parked.pins;
        let keep = |i: usize, seq: u64| !replace && !pins.contains(&(i, seq));
        let dropped = self.slots.drop_holder(id, &keep);
        if let Some(shm) = &self.shm {
            for i in dropped {
                shm.holds.forget(i);
            }
        }
        if replace {
            if let Some(c) = self.consumers.get_mut(&id) {
                c.hello.start = start;
                c.joined_at = None;
                c.last_sent = None;
            }
            self.set_phase(id, Phase::Waiting);
            self.join(id);
        } else {
            for frame in parked.queue {
                if !self.send_or_drop(id, &frame) {
                    return true;
                }
            }
        }
        if let Ok(frame) = wire::encode(&ToConsumer::Started) {
            self.send_or_drop(id, &frame);
        }
        true
    }
}
