//! The wait for the first consumers: before its first epoch a producer
//! waits until as many consumers as it was asked for (`--consumers N`,
//! Python's `wait_for_consumers=N`) and as many trainers as `batchcast run`
//! announced ([`CONSUMERS_ENV`]) are attached, so that every one of them
//! sees the first epoch whole. `batchcast serve` ([`crate::run`]) and
//! Python's `Producer` (through the binding) both wait with
//! [`StartWait::wait`] and fail with the same [`TooFewConsumers`].

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use batchcast::Producer;

pub use batchcast::CONSUMERS_ENV;

/// [`CONSUMERS_ENV`] holds something other than a number of consumers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{CONSUMERS_ENV}='{value}' is not a number of consumers; `batchcast run` sets it to the \
     workload's number of trainers: unset it, or set a whole number"
)]
pub struct ConsumersEnvError {
    /// The value found (lossily decoded when not UTF-8).
    pub value: String,
}

/// Fewer consumers than waited for attached before the first epoch.
///
/// Its `Display` is the message both faces print: `error: ...` from
/// `batchcast serve`, `batchcast.NoConsumers` from Python.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.message())]
pub struct TooFewConsumers {
    /// Consumers attached when the wait ended.
    pub attached: usize,
    /// Consumers waited for.
    pub wanted: usize,
    /// Seconds waited.
    pub secs: f64,
    /// True when `wanted` is the workload's number of trainers, from
    /// [`CONSUMERS_ENV`] (more than the producer itself asked for).
    pub from_runner: bool,
}

impl TooFewConsumers {
    fn message(&self) -> String {
        let TooFewConsumers {
            attached,
            wanted,
            secs,
            from_runner,
        } = *self;
        if from_runner {
            format!(
                "only {attached} of the workload's {wanted} trainers attached within {secs:.1} s \
                 ({CONSUMERS_ENV}={wanted}, set by `batchcast run`); see the other runs' output \
                 for a trainer that did not start or connects elsewhere, or raise the idle \
                 timeout (--idle-timeout, idle_timeout=) to wait longer"
            )
        } else if wanted <= 1 {
            // The core's own message for a producer that no consumer joined.
            batchcast::Error::NoConsumers { secs }.to_string()
        } else {
            format!(
                "only {attached} of {wanted} consumers attached within {secs:.1} s; start the \
                 training processes, or raise the idle timeout (--idle-timeout, idle_timeout=)"
            )
        }
    }
}

/// How many consumers a producer waits for before its first epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StartWait {
    /// Consumers the producer asked for (`--consumers N`, Python's
    /// `wait_for_consumers=N`).
    pub asked: usize,
    /// Trainers `batchcast run` announced in [`CONSUMERS_ENV`] (0: none).
    pub trainers: usize,
}

impl StartWait {
    /// `asked` consumers, and the trainers [`CONSUMERS_ENV`] announces.
    pub fn from_env(asked: usize) -> Result<Self, ConsumersEnvError> {
        Ok(StartWait {
            asked,
            trainers: trainers_from_env()?,
        })
    }

    /// Consumers waited for: the larger of the two counts (0: no wait).
    pub fn wanted(self) -> usize {
        self.asked.max(self.trainers)
    }

    /// True when the runner's count is the one waited for.
    pub fn from_runner(self) -> bool {
        self.trainers > self.asked
    }

    /// Waits until [`StartWait::wanted`] consumers are attached, for at
    /// most `within` (None: until interrupted), in 100 ms slices that call
    /// `interrupted` so that an interrupt ends the wait at once. Ok(true)
    /// once they are attached (at once when none is wanted), Ok(false)
    /// when interrupted.
    pub fn wait(
        self,
        producer: &Producer,
        within: Option<Duration>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<bool, TooFewConsumers> {
        let wanted = self.wanted();
        // A deadline past what the clock can count is none.
        let deadline = within.and_then(|t| Instant::now().checked_add(t));
        while !producer.wait_for_consumers(wanted, Some(Duration::from_millis(100))) {
            if interrupted() {
                return Ok(false);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(TooFewConsumers {
                    attached: producer.consumers(),
                    wanted,
                    secs: within.map_or(0.0, |t| t.as_secs_f64()),
                    from_runner: self.from_runner(),
                });
            }
        }
        Ok(true)
    }
}

/// The number of trainers `batchcast run` gave the workload (0: none given,
/// or the variable is empty).
pub fn trainers_from_env() -> Result<usize, ConsumersEnvError> {
    parse_trainers(std::env::var_os(CONSUMERS_ENV).as_deref())
}

/// A value of [`CONSUMERS_ENV`] as a number of trainers.
fn parse_trainers(raw: Option<&OsStr>) -> Result<usize, ConsumersEnvError> {
    let value = raw.map(OsStr::to_string_lossy).unwrap_or_default();
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Ok(0);
    }
    trimmed.parse().map_err(|_| ConsumersEnvError {
        value: trimmed.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn too_few(attached: usize, wanted: usize, from_runner: bool) -> String {
        TooFewConsumers {
            attached,
            wanted,
            secs: 0.5,
            from_runner,
        }
        .to_string()
    }

    #[test]
    fn the_message_names_the_figures_and_where_the_count_came_from() {
        assert_eq!(
            too_few(1, 2, true),
            "only 1 of the workload's 2 trainers attached within 0.5 s (BATCHCAST_CONSUMERS=2, \
             set by `batchcast run`); see the other runs' output for a trainer that did not \
             start or connects elsewhere, or raise the idle timeout (--idle-timeout, \
             idle_timeout=) to wait longer"
        );
        assert_eq!(
            too_few(1, 3, false),
            "only 1 of 3 consumers attached within 0.5 s; start the training processes, or \
             raise the idle timeout (--idle-timeout, idle_timeout=)"
        );
        assert_eq!(
            too_few(0, 1, false),
            batchcast::Error::NoConsumers { secs: 0.5 }.to_string()
        );
    }

    #[test]
    fn the_larger_count_is_waited_for() {
        let start = StartWait {
            asked: 1,
            trainers: 3,
        };
        assert_eq!(start.wanted(), 3);
        assert!(start.from_runner());
        let start = StartWait {
            asked: 2,
            trainers: 2,
        };
        assert_eq!(start.wanted(), 2);
        assert!(!start.from_runner());
        assert_eq!(StartWait::default().wanted(), 0);
    }

    #[test]
    fn the_runners_count_is_a_whole_number_or_nothing() {
        let parse = |v: &str| parse_trainers(Some(OsStr::new(v)));
        assert_eq!(parse_trainers(None), Ok(0));
        assert_eq!(parse(""), Ok(0));
        assert_eq!(parse(" 3 "), Ok(3));
        let err = parse("two").unwrap_err();
        assert_eq!(err.value, "two");
        assert!(
            err.to_string()
                .starts_with("BATCHCAST_CONSUMERS='two' is not a number"),
            "{err}"
        );
        assert!(parse("-1").is_err());
    }
}
