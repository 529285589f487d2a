//! `--trigger`: when the producer tells every consumer, at an epoch
//! boundary, that the data that arrived since the last firing calls for a
//! retraining (or any other reaction of the trainer's).
//!
//! [`TriggerSpec`] is the text form (`amount=N`, `time=10m`, `every-epoch`,
//! `any(...)`, `all(...)`); [`Trigger`] is its state over a run: it counts
//! the samples that arrived since its last firing, with their arrival
//! range, and decides at each boundary whether it fires.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use batchcast::TriggerFired;

use crate::error::ServeError;

/// The accepted forms, for messages.
pub const TRIGGER_FORMS: &str = "amount=N (N samples arrived), time=D (D since the last \
     firing: 90s, 10m, 2h or seconds), every-epoch, any(T,T,...) or all(T,T,...)";

/// Deepest nesting of `any`/`all` accepted.
const MAX_DEPTH: usize = 8;
/// Longest `--trigger` text accepted, in bytes (it is the trigger's id).
const MAX_LEN: usize = batchcast::MAX_TRIGGER_ID;

/// When a trigger fires, at an epoch boundary.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerSpec {
    /// At least this many samples arrived since the last firing.
    Amount(u64),
    /// At least this long since the last firing (or since serving began).
    Time(Duration),
    /// At every boundary.
    EveryEpoch,
    /// When any of these would fire.
    Any(Vec<TriggerSpec>),
    /// When all of these would fire.
    All(Vec<TriggerSpec>),
}

fn refuse(text: &str, why: &str) -> ServeError {
    ServeError::invalid(format!(
        "--trigger {text:?}: {why}; use one of {TRIGGER_FORMS}"
    ))
}

/// `90s`, `10m`, `2h` or a number of seconds.
fn duration(whole: &str, text: &str) -> Result<Duration, ServeError> {
    let (num, unit) = match text.char_indices().last() {
        Some((i, 's')) => (&text[..i], 1.0),
        Some((i, 'm')) => (&text[..i], 60.0),
        Some((i, 'h')) => (&text[..i], 3600.0),
        _ => (text, 1.0),
    };
    let secs: f64 = num
        .trim()
        .parse()
        .map_err(|_| refuse(whole, &format!("{text:?} is not a duration")))?;
    Duration::try_from_secs_f64(secs * unit)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| refuse(whole, &format!("{text:?} is not a positive duration")))
}

/// Splits `a,b(c,d),e` at its top-level commas.
fn split_top(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

impl TriggerSpec {
    fn parse_at(whole: &str, text: &str, depth: usize) -> Result<TriggerSpec, ServeError> {
        let text = text.trim();
        if depth > MAX_DEPTH {
            return Err(refuse(whole, "any(...)/all(...) nested too deep"));
        }
        for (name, all) in [("any(", false), ("all(", true)] {
            if let Some(inner) = text.strip_prefix(name) {
                let inner = inner
                    .strip_suffix(')')
                    .ok_or_else(|| refuse(whole, &format!("{text:?} lacks its closing ')'")))?;
                let parts = split_top(inner)
                    .into_iter()
                    .map(|p| Self::parse_at(whole, p, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(if all {
                    TriggerSpec::All(parts)
                } else {
                    TriggerSpec::Any(parts)
                });
            }
        }
        if text == "every-epoch" {
            return Ok(TriggerSpec::EveryEpoch);
        }
        if let Some(n) = text.strip_prefix("amount=") {
            return match n.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(TriggerSpec::Amount(n)),
                _ => Err(refuse(
                    whole,
                    &format!("{n:?} is not a whole number above 0"),
                )),
            };
        }
        if let Some(d) = text.strip_prefix("time=") {
            return Ok(TriggerSpec::Time(duration(whole, d.trim())?));
        }
        Err(refuse(whole, &format!("{text:?} is no trigger")))
    }

    /// Whether it fires, given the samples that arrived since the last
    /// firing and the time since then.
    fn fires(&self, arrived: u64, since: Duration) -> bool {
        match self {
            TriggerSpec::Amount(n) => arrived >= *n,
            TriggerSpec::Time(d) => since >= *d,
            TriggerSpec::EveryEpoch => true,
            TriggerSpec::Any(parts) => parts.iter().any(|p| p.fires(arrived, since)),
            TriggerSpec::All(parts) => parts.iter().all(|p| p.fires(arrived, since)),
        }
    }
}

impl FromStr for TriggerSpec {
    type Err = ServeError;

    fn from_str(text: &str) -> Result<TriggerSpec, ServeError> {
        if text.len() > MAX_LEN {
            let start: String = text.chars().take(40).collect();
            return Err(refuse(&start, &format!("longer than {MAX_LEN} bytes")));
        }
        Self::parse_at(text, text, 0)
    }
}

impl fmt::Display for TriggerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, name: &str, parts: &[TriggerSpec]| {
            write!(f, "{name}(")?;
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    write!(f, ",")?;
                }
                write!(f, "{p}")?;
            }
            write!(f, ")")
        };
        match self {
            TriggerSpec::Amount(n) => write!(f, "amount={n}"),
            TriggerSpec::Time(d) => write!(f, "time={}s", d.as_secs_f64()),
            TriggerSpec::EveryEpoch => write!(f, "every-epoch"),
            TriggerSpec::Any(p) => list(f, "any", p),
            TriggerSpec::All(p) => list(f, "all", p),
        }
    }
}

/// A trigger over a run: what arrived since its last firing.
#[derive(Debug)]
pub struct Trigger {
    spec: TriggerSpec,
    fired: u64,
    since: Instant,
    /// The source's own clock at the last firing (or the start), where
    /// the source has one (a replayed trace).
    clock_since: Option<f64>,
    arrived: u64,
    arrivals: Option<(f64, f64)>,
}

impl Trigger {
    /// A trigger that has not fired; its time counts from now.
    pub fn new(spec: TriggerSpec) -> Trigger {
        Trigger {
            spec,
            fired: 0,
            since: Instant::now(),
            clock_since: None,
            arrived: 0,
            arrivals: None,
        }
    }

    /// Counts `n` samples that arrived, between the times `range`.
    pub fn arrived(&mut self, n: u64, range: Option<(f64, f64)>) {
        self.arrived += n;
        self.arrivals = match (self.arrivals, range) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (a, b) => a.or(b),
        };
    }

    /// Measures `time=D` on the source's own clock (a replayed trace's
    /// time, seconds since the Unix epoch), which reads `now` at the start,
    /// instead of wall time.
    pub fn start_clock(&mut self, now: Option<f64>) {
        self.clock_since = now;
    }

    /// At the boundary before `epoch`: the firing, if it fires (and then
    /// it starts counting afresh). `time=D` counts wall time, or the
    /// source's clock, at `now`, when [`Trigger::start_clock`] gave one.
    pub fn at_boundary(&mut self, epoch: u64, now: Option<f64>) -> Option<TriggerFired> {
        let elapsed = match (self.clock_since, now) {
            (Some(from), Some(to)) => {
                Duration::try_from_secs_f64((to - from).max(0.0)).unwrap_or(Duration::MAX)
            }
            _ => self.since.elapsed(),
        };
        if !self.spec.fires(self.arrived, elapsed) {
            return None;
        }
        self.fired += 1;
        self.since = Instant::now();
        if self.clock_since.is_some() {
            self.clock_since = now;
        }
        Some(TriggerFired {
            id: self.spec.to_string(),
            seq: self.fired,
            epoch,
            samples: std::mem::take(&mut self.arrived),
            arrivals: self.arrivals.take(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_parse_and_print() {
        for (text, shown) in [
            ("amount=400", "amount=400"),
            ("time=10m", "time=600s"),
            ("time=1.5h", "time=5400s"),
            ("time=90", "time=90s"),
            ("every-epoch", "every-epoch"),
            ("any(amount=10, time=30s)", "any(amount=10,time=30s)"),
            (
                "all(amount=5,any(every-epoch,time=2h))",
                "all(amount=5,any(every-epoch,time=7200s))",
            ),
        ] {
            let spec: TriggerSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), shown);
            assert_eq!(shown.parse::<TriggerSpec>().unwrap(), spec);
        }
    }

    #[test]
    fn malformed_forms_are_refused_with_the_accepted_ones() {
        for (text, why) in [
            ("amount=0", "whole number above 0"),
            ("amount=-3", "whole number above 0"),
            ("time=0s", "positive duration"),
            ("time=soon", "not a duration"),
            ("any(amount=3", "closing"),
            ("sometimes", "no trigger"),
            ("any(amount=3,nope)", "no trigger"),
        ] {
            let err = text.parse::<TriggerSpec>().unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
            assert!(err.contains("every-epoch"), "{err}");
        }
        let deep = format!("{}amount=1{}", "any(".repeat(20), ")".repeat(20));
        let err = deep.parse::<TriggerSpec>().unwrap_err().to_string();
        assert!(err.contains("too deep"), "{err}");
        let long = format!("any({})", vec!["amount=1"; 60].join(","));
        assert!(long
            .parse::<TriggerSpec>()
            .unwrap_err()
            .to_string()
            .contains("longer than"));
    }

    #[test]
    fn it_fires_on_what_arrived_since_its_last_firing() {
        let mut t = Trigger::new("amount=400".parse().unwrap());
        t.arrived(300, Some((10.0, 20.0)));
        assert_eq!(t.at_boundary(1, None), None);
        t.arrived(200, Some((5.0, 30.0)));
        let fired = t.at_boundary(2, None).unwrap();
        assert_eq!((fired.seq, fired.epoch, fired.samples), (1, 2, 500));
        assert_eq!(fired.arrivals, Some((5.0, 30.0)));
        assert_eq!(t.at_boundary(3, None), None);
        let mut every = Trigger::new("all(every-epoch,amount=1)".parse().unwrap());
        assert_eq!(every.at_boundary(1, None), None);
        every.arrived(1, None);
        assert_eq!(every.at_boundary(2, None).unwrap().arrivals, None);
        let mut time = Trigger::new("any(time=1h,amount=2)".parse().unwrap());
        assert_eq!(time.at_boundary(1, None), None);
    }

    #[test]
    fn time_counts_the_sources_clock_when_it_has_one() {
        let mut t = Trigger::new("time=10s".parse().unwrap());
        t.start_clock(Some(100.0));
        assert_eq!(t.at_boundary(1, Some(109.0)), None);
        assert_eq!(t.at_boundary(2, Some(110.0)).unwrap().seq, 1);
        assert_eq!(t.at_boundary(3, Some(119.0)), None);
        assert_eq!(t.at_boundary(4, Some(121.0)).unwrap().seq, 2);
    }
}
