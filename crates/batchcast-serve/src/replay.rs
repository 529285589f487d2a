//! `--replay FILE.csv`: a timestamped dataset served as if it arrived.
//! The stream starts with the trace's first timestamp; at each epoch
//! boundary the rows the replay clock has passed join, as a watched
//! folder's new files do (arrival time: the row's timestamp).
//!
//! The clock, at the boundary before the `k`-th epoch after the first:
//! - by default, the next timestamp still to join (one time step of the
//!   trace per epoch);
//! - `--replay-per-epoch D`: the first timestamp + `k * D` seconds;
//! - `--replay-speedup X`: the first timestamp + `X` times the wall
//!   seconds since the source opened (`inf`: all of it at the first
//!   boundary).
//!
//! The first two depend on nothing but the epoch: the same trace gives
//! the same epochs on every run.

use std::path::PathBuf;
use std::time::Instant;

use crate::error::{Result, ServeError};

/// The `--replay` flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ReplayArgs {
    /// Replay a timestamped dataset as if it arrived: a CSV with the
    /// header `path,label,timestamp` (path relative to the CSV's folder,
    /// label a class index, timestamp seconds since the Unix epoch). The
    /// first epoch serves the rows of the first timestamp; at each epoch
    /// boundary the rows the replay clock has passed join (by default the
    /// clock moves to the next timestamp each epoch).
    #[arg(long, conflicts_with_all = ["data", "synthetic", "watch"])]
    pub replay: Option<PathBuf>,
    /// With --replay: the clock moves by this many seconds of the trace
    /// per epoch.
    #[arg(long, requires = "replay", conflicts_with = "replay_speedup")]
    pub replay_per_epoch: Option<f64>,
    /// With --replay: the clock runs this many times faster than the wall
    /// clock (`inf`: every row joins at the first boundary).
    #[arg(long, requires = "replay")]
    pub replay_speedup: Option<f64>,
}

impl ReplayArgs {
    /// The clock these flags ask for, started now.
    pub(crate) fn clock(&self) -> Result<ReplayClock> {
        let positive = |v: f64, flag: &str| {
            if v > 0.0 && !v.is_nan() {
                Ok(v)
            } else {
                Err(ServeError::invalid(format!(
                    "{flag} must be a positive number, not {v}"
                )))
            }
        };
        Ok(match (self.replay_per_epoch, self.replay_speedup) {
            (Some(d), _) => ReplayClock::PerEpoch(positive(d, "--replay-per-epoch")?, 0),
            (None, Some(x)) => {
                ReplayClock::Speedup(positive(x, "--replay-speedup")?, Instant::now())
            }
            (None, None) => ReplayClock::Step,
        })
    }

    /// The flags again, for [`crate::SourceArgs::to_flags`].
    pub(crate) fn push_flags(&self, f: &mut Vec<String>) {
        if let Some(p) = &self.replay {
            f.extend(["--replay".into(), p.display().to_string()]);
        }
        if let Some(d) = self.replay_per_epoch {
            f.extend(["--replay-per-epoch".into(), d.to_string()]);
        }
        if let Some(x) = self.replay_speedup {
            f.extend(["--replay-speedup".into(), x.to_string()]);
        }
    }
}

/// Where the replay clock stands at each epoch boundary; see the module.
#[derive(Debug, Clone)]
pub(crate) enum ReplayClock {
    /// The next timestamp still to join.
    Step,
    /// Seconds per epoch, and the boundaries passed so far.
    PerEpoch(f64, u64),
    /// Times the wall clock, since this instant.
    Speedup(f64, Instant),
}

impl ReplayClock {
    /// The clock at the next boundary, for a trace that began at `first`
    /// and whose next row to join is at `next`.
    pub(crate) fn at_boundary(&mut self, first: f64, next: Option<f64>) -> f64 {
        match self {
            ReplayClock::Step => next.unwrap_or(f64::INFINITY),
            ReplayClock::PerEpoch(d, k) => {
                *k += 1;
                first + *d * *k as f64
            }
            ReplayClock::Speedup(x, _) if x.is_infinite() => f64::INFINITY,
            ReplayClock::Speedup(x, since) => first + *x * since.elapsed().as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deterministic_clocks_move_by_the_epoch() {
        let mut step = ReplayClock::Step;
        assert_eq!(step.at_boundary(10.0, Some(20.0)), 20.0);
        assert_eq!(step.at_boundary(10.0, None), f64::INFINITY);
        let mut per = ReplayClock::PerEpoch(5.0, 0);
        assert_eq!(per.at_boundary(10.0, Some(99.0)), 15.0);
        assert_eq!(per.at_boundary(10.0, Some(99.0)), 20.0);
        let mut inf = ReplayClock::Speedup(f64::INFINITY, Instant::now());
        assert_eq!(inf.at_boundary(10.0, Some(99.0)), f64::INFINITY);
    }

    #[test]
    fn a_clock_that_does_not_move_is_refused() {
        for (d, x) in [
            (Some(0.0), None),
            (None, Some(-1.0)),
            (Some(f64::NAN), None),
        ] {
            let args = ReplayArgs {
                replay: Some("t.csv".into()),
                replay_per_epoch: d,
                replay_speedup: x,
            };
            let err = args.clock().unwrap_err().to_string();
            assert!(err.contains("positive"), "{err}");
        }
    }
}
