//! The figures `batchcast status` prints.

use std::time::{Duration, Instant};

use super::{Phase, State};
use crate::status::{ConsumerStatus, StatusReport};

impl State {
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
        let behind = self.behind();
        StatusReport {
            name: self.name.clone(),
            pid: self.pid,
            uptime_secs: self.started.elapsed().as_secs_f64(),
            slots: (self.slots.len() - self.slots.lag_slots()) as u32,
            slot_size: self.shm.as_ref().map_or(0, |s| s.slot_size),
            epoch: self.epoch.number,
            published: self.published,
            batches_per_sec: rate,
            blocked_secs: self.blocked.as_secs_f64(),
            lag_slots: self.slots.lag_slots() as u64,
            lag_slots_used: self.slots.lag_in_use() as u64,
            lag_policy: self.lag_policy.name().to_owned(),
            evictions: self.evictions,
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
                        Phase::Evicted => "evicted",
                        Phase::Left => "left",
                    }
                    .to_owned(),
                    position: c.last_sent,
                    lag: self.held_by(id),
                    behind: behind.get(&id).copied().unwrap_or(0),
                    evictions: c.evictions,
                    delivered: c.ledger.as_ref().map_or(0, |l| l.figures().0),
                    wait_secs: c.ledger.as_ref().map_or(0, |l| l.figures().1) as f64 / 1e9,
                })
                .collect(),
            omitted_consumers: 0,
        }
    }
}
