//! The published simulator's bids: what a job offers for one free GPU
//! under each policy, and the order in which bids win.

use std::cmp::Ordering;

use crate::error::SimError;

/// A policy of the published simulator (its class names at 2953d56; Dally's
/// at 4cd660e), which prices the GPUs offered to each job that wants some.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bidder {
    /// `SJF`: the shortest remaining run time on the GPUs it would hold.
    Sjf,
    /// `SRSF`: the least service received, one-GPU seconds of work done
    /// (batchcast's `las`).
    Las,
    /// `Tiresias`: the least GPU time received (no queue levels).
    Tiresias,
    /// `Gandiva`: the highest throughput `n * s` it would reach.
    Gandiva,
    /// `Dally` (at 4cd660e, with that commit's chunk rules): the lowest
    /// progress rate, with delay scheduling when consolidated (see
    /// [`DallySetup`](super::DallySetup)).
    Dally,
}

impl Bidder {
    /// By batchcast's policy name (`sjf`, `las`, `tiresias`, `gandiva`) or
    /// the published class name (`SJF`, `SRSF`, `Tiresias`, `Gandiva`).
    pub fn by_name(name: &str) -> Result<Bidder, SimError> {
        Ok(match name {
            "sjf" | "SJF" => Bidder::Sjf,
            "las" | "SRSF" => Bidder::Las,
            "tiresias" | "Tiresias" => Bidder::Tiresias,
            "gandiva" | "Gandiva" => Bidder::Gandiva,
            "dally" | "Dally" => Bidder::Dally,
            "srsf" => {
                return Err(SimError::Config(
                    "the published simulator's SRSF ranks by service received: pick las".into(),
                ))
            }
            other => {
                return Err(SimError::Config(format!(
                    "policy {other:?} is not in the published simulator (--model bidding); \
                     pick sjf, las, tiresias, gandiva or dally, or drop --model bidding"
                )))
            }
        })
    }

    /// batchcast's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Bidder::Sjf => "sjf",
            Bidder::Las => "las",
            Bidder::Tiresias => "tiresias",
            Bidder::Gandiva => "gandiva",
            Bidder::Dally => "dally",
        }
    }
}

/// What a job's bid depends on.
pub(crate) struct Asking {
    /// Iterations left.
    pub remaining: i64,
    /// Iterations done.
    pub done: i64,
    /// Seconds of one iteration on one GPU.
    pub tpi: f64,
    /// GPU time received (Tiresias).
    pub service: f64,
}

/// The value of `job`'s bid for a GPU that would give it `n` GPUs at
/// throughput fraction `s`; higher wins.
pub(crate) fn value(b: Bidder, job: &Asking, n: usize, s: f64) -> f64 {
    match b {
        Bidder::Sjf => -(job.remaining as f64 * job.tpi * s / n as f64),
        Bidder::Las => -(job.done as f64 * job.tpi),
        Bidder::Tiresias => -job.service,
        Bidder::Gandiva => n as f64 * s,
        // Dally's own loop bids; it never calls this.
        Bidder::Dally => 0.0,
    }
}

/// One bid: value, GPUs the job already has for its next chunk, when it
/// last got or lost GPUs, its numeric id (else its trace position).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bid {
    pub value: f64,
    pub holding: usize,
    pub last: f64,
    pub id: i64,
    pub job: usize,
}

/// The published order: higher value, then fewer GPUs held, then the
/// longer wait since the last assignment, then the lower job id.
pub(crate) fn better(a: &Bid, b: &Bid) -> Ordering {
    b.value
        .total_cmp(&a.value)
        .then(a.holding.cmp(&b.holding))
        .then(a.last.total_cmp(&b.last))
        .then(a.id.cmp(&b.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_to_fewer_gpus_then_the_longer_wait_then_the_lower_id() {
        let b = |value, holding, last, id| Bid {
            value,
            holding,
            last,
            id,
            job: 0,
        };
        // Each pair: the bid that wins, the bid it beats.
        let wins = [
            (b(2.0, 3, 0.0, 9), b(1.0, 0, 0.0, 1)),
            (b(1.0, 0, 5.0, 9), b(1.0, 1, 0.0, 1)),
            (b(1.0, 1, 0.0, 9), b(1.0, 1, 5.0, 1)),
            (b(1.0, 1, 0.0, 1), b(1.0, 1, 0.0, 2)),
        ];
        for (winner, loser) in &wins {
            assert_eq!(
                better(winner, loser),
                Ordering::Less,
                "{winner:?} beats {loser:?}"
            );
        }
        assert!(Bidder::by_name("srsf").is_err());
        assert_eq!(Bidder::by_name("SRSF").unwrap(), Bidder::Las);
    }
}
