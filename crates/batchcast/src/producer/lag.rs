//! The lag budget and what happens past it.
//!
//! Beyond its window, the arena has *lag slots*: while one consumer is
//! paused (a checkpoint save, a debugger, a full stdout pipe, SIGSTOP) the
//! producer keeps publishing into them, so the others go on and the laggard
//! still gets every batch later. They hold only batches the most advanced
//! consumer has read: the producer never runs more than a window ahead of
//! it, however large the budget. Their memory is reserved only when a lag
//! slot is first used, so the default budget costs nothing until a consumer
//! actually lags. Past the budget, [`LagPolicy`] decides.

use std::time::Duration;

use crate::error::{Error, Result};

/// How much a consumer may fall behind the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagBudget {
    /// Bytes of lag slots (rounded down to whole slots).
    Bytes(u64),
    /// Lag slots, one batch each.
    Batches(u64),
}

/// The default budget: the smaller of 1 GiB and an eighth of the memory
/// available at start.
pub const DEFAULT_LAG_BYTES: u64 = 1 << 30;

impl LagBudget {
    /// Parses `512MiB`, `2G`, `1000000` (bytes), `100batches` or `0`.
    pub fn parse(s: &str) -> Result<LagBudget> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || {
            Error::InvalidArgument(format!(
                "cannot read the lag budget {s:?}; use bytes (e.g. \"512MiB\", \"2GiB\", \
                 \"1000000\") or batches (e.g. \"100batches\")"
            ))
        };
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let n: u64 = t[..digits].parse().map_err(|_| bad())?;
        let unit = t[digits..].trim();
        let scale: u64 = match unit {
            "batch" | "batches" => return Ok(LagBudget::Batches(n)),
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return Err(bad()),
        };
        n.checked_mul(scale).map(LagBudget::Bytes).ok_or_else(bad)
    }

    /// Lag slots for slots of `slot_size` bytes; `None` is the default
    /// budget, sized from `available` bytes of memory.
    pub fn slots(budget: Option<LagBudget>, slot_size: usize, available: Option<u64>) -> usize {
        let bytes = match budget {
            Some(LagBudget::Batches(n)) => return usize::try_from(n).unwrap_or(usize::MAX),
            Some(LagBudget::Bytes(b)) => b,
            None => available.map_or(DEFAULT_LAG_BYTES, |a| (a / 8).min(DEFAULT_LAG_BYTES)),
        };
        usize::try_from(bytes / slot_size.max(1) as u64).unwrap_or(usize::MAX)
    }
}

/// What the producer does when every slot, lag slots included, is held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LagPolicy {
    /// Wait for the slowest consumer (it holds the others back).
    Wait,
    /// After the producer has been blocked this long, evict every consumer
    /// at least the lag budget behind the most advanced one.
    Evict {
        /// How long the producer stays blocked before it evicts.
        stall_timeout: Duration,
    },
}

impl LagPolicy {
    /// Parses `wait` or `evict`, the latter with `stall_timeout` seconds.
    pub fn parse(s: &str, stall_timeout_secs: f64) -> Result<LagPolicy> {
        match s {
            "wait" => Ok(LagPolicy::Wait),
            "evict" => {
                if !(stall_timeout_secs.is_finite() && stall_timeout_secs >= 0.0) {
                    return Err(Error::InvalidArgument(format!(
                        "stall_timeout must be a number of seconds of at least 0, not \
                         {stall_timeout_secs}"
                    )));
                }
                Ok(LagPolicy::Evict {
                    stall_timeout: Duration::from_secs_f64(stall_timeout_secs),
                })
            }
            _ => Err(Error::InvalidArgument(format!(
                "unknown lag policy {s:?}; use \"wait\" (hold the others back) or \"evict\" \
                 (drop the laggard after stall_timeout seconds)"
            ))),
        }
    }

    /// `wait` or `evict`.
    pub fn name(&self) -> &'static str {
        match self {
            LagPolicy::Wait => "wait",
            LagPolicy::Evict { .. } => "evict",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_in_bytes_or_batches() {
        assert_eq!(
            LagBudget::parse("512MiB").unwrap(),
            LagBudget::Bytes(512 << 20)
        );
        assert_eq!(LagBudget::parse("2g").unwrap(), LagBudget::Bytes(2 << 30));
        assert_eq!(LagBudget::parse("1000").unwrap(), LagBudget::Bytes(1000));
        assert_eq!(
            LagBudget::parse("40 batches").unwrap(),
            LagBudget::Batches(40)
        );
        assert_eq!(LagBudget::parse("0").unwrap(), LagBudget::Bytes(0));
        let err = LagBudget::parse("lots").unwrap_err().to_string();
        assert!(err.contains("100batches"), "{err}");
        assert!(LagBudget::parse("99999999999TiB").is_err());
    }

    #[test]
    fn the_default_fits_the_machine() {
        let mib = 1 << 20;
        // 1 GiB of 1 MiB slots when memory is plentiful...
        assert_eq!(LagBudget::slots(None, mib, Some(64 << 30)), 1024);
        // ...an eighth of what is available when it is not.
        assert_eq!(LagBudget::slots(None, mib, Some(800 * mib as u64)), 100);
        assert_eq!(
            LagBudget::slots(Some(LagBudget::Bytes(3 * mib as u64 - 1)), mib, None),
            2
        );
        assert_eq!(LagBudget::slots(Some(LagBudget::Batches(7)), mib, None), 7);
    }

    #[test]
    fn policies_parse() {
        assert_eq!(LagPolicy::parse("wait", 0.0).unwrap(), LagPolicy::Wait);
        assert_eq!(
            LagPolicy::parse("evict", 1.5).unwrap(),
            LagPolicy::Evict {
                stall_timeout: Duration::from_millis(1500)
            }
        );
        assert!(LagPolicy::parse("evict", -1.0).is_err());
        assert!(LagPolicy::parse("drop", 1.0).is_err());
    }
}
