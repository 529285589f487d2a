//! Lag and eviction: how far each consumer is behind, and cutting off
//! the laggards.

use std::collections::BTreeMap;

use super::{front, position, Phase, State};
use crate::wire::{self, OnEvict, ToConsumer};

impl State {
    /// The lag budget in batches: how far behind the most advanced consumer
    /// a consumer must be to count as a laggard.
    fn lag_budget(&self) -> u64 {
        self.slots.lag_slots().max(1) as u64
    }

    /// How far each following consumer is behind the [`front`].
    pub(super) fn behind(&self) -> BTreeMap<u64, u64> {
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

    /// Stops consumer `id` from reading the board (bumps its eviction
    /// generation), *then* keeps it as a holder only of the slots it has
    /// acquired and not released (it may have views of them; see
    /// `crate::ledger`). Returns the new generation; None when it has no
    /// ledger (not welcomed) or is gone.
    pub(super) fn cut_off(&mut self, id: u64) -> Option<u64> {
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

    /// Batches published to consumer `id` that it has not released.
    pub(super) fn held_by(&self, id: u64) -> u64 {
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
