//! [`SelectSpec`]: the text forms of a selection (`--select`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::PipelineError;

/// The accepted forms, for messages.
pub const SELECT_FORMS: &str = "random:R, label-balanced:R, rs2:R, rs2:R,replace, \
     scores=FILE,keep=P, new-data or freshness:R (R a fraction in (0,1] such as 0.25, or a percentage such as 25 or 25%; \
     P a percentage in (0,100])";

/// Which samples an epoch has, as the producer computes it once for every
/// consumer.
#[derive(Debug, Clone, PartialEq)]
pub enum SelectSpec {
    /// A fresh uniform subset of `ratio` of the samples each epoch.
    Random {
        /// Fraction kept, in (0, 1].
        ratio: f64,
    },
    /// `ratio` of the samples each epoch, spread as evenly over the
    /// classes as their sizes allow (a class smaller than its share gives
    /// all its members, the rest go to the others).
    LabelBalanced {
        /// Fraction kept, in (0, 1].
        ratio: f64,
    },
    /// RS2 (repeated sampling of random subsets): `ratio` of the samples
    /// each epoch; without replacement no sample repeats until every
    /// sample has been served once.
    Rs2 {
        /// Fraction kept, in (0, 1].
        ratio: f64,
        /// Draw each epoch independently (a sample may come back before
        /// others have been seen): the same draw as `random:R`.
        replace: bool,
    },
    /// The top `keep` percent by a per-sample score (one per sample, in
    /// dataset order, in a 1-D float32/float64 `.npy` file); the same
    /// samples every epoch.
    Scores {
        /// The `.npy` file.
        file: PathBuf,
        /// Percentage kept, in (0, 100].
        keep: f64,
    },
    /// Only the samples that arrived since the last trigger (all of them
    /// before the first).
    NewData,
    /// `ratio` of the epoch from the samples that arrived since the last
    /// trigger (unseen), the rest from those before (seen): as many as
    /// both allow.
    Freshness {
        /// Share of the unseen, in (0, 1].
        ratio: f64,
    },
}

fn refuse(spec: &str, why: &str) -> PipelineError {
    PipelineError::InvalidConfig(format!(
        "--select {spec:?}: {why}; use one of {SELECT_FORMS}"
    ))
}

/// A ratio: a fraction in (0, 1], or a percentage in (1, 100] with or
/// without `%`.
fn ratio(spec: &str, text: &str) -> Result<f64, PipelineError> {
    let text = text.trim();
    let (num, percent) = match text.strip_suffix('%') {
        Some(n) => (n, true),
        None => (text, false),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| refuse(spec, &format!("{text:?} is not a number")))?;
    let fraction = if percent || v > 1.0 { v / 100.0 } else { v };
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(refuse(
            spec,
            &format!("{text:?} is not a ratio in (0, 1] or a percentage in (0, 100]"),
        ));
    }
    Ok(fraction)
}

impl FromStr for SelectSpec {
    type Err = PipelineError;

    fn from_str(spec: &str) -> Result<SelectSpec, PipelineError> {
        let s = spec.trim();
        if let Some(rest) = s.strip_prefix("scores=") {
            let (file, keep) = rest
                .rsplit_once(",keep=")
                .ok_or_else(|| refuse(spec, "scores=FILE needs ,keep=P"))?;
            if file.is_empty() {
                return Err(refuse(spec, "scores= needs a file"));
            }
            let keep = ratio(spec, &format!("{}%", keep.trim().trim_end_matches('%')))?;
            return Ok(SelectSpec::Scores {
                file: PathBuf::from(file),
                keep: keep * 100.0,
            });
        }
        if s == "new-data" {
            return Ok(SelectSpec::NewData);
        }
        let (method, arg) = s
            .split_once(':')
            .ok_or_else(|| refuse(spec, "no method:ratio"))?;
        match method {
            "random" => Ok(SelectSpec::Random {
                ratio: ratio(spec, arg)?,
            }),
            "label-balanced" => Ok(SelectSpec::LabelBalanced {
                ratio: ratio(spec, arg)?,
            }),
            "freshness" => Ok(SelectSpec::Freshness {
                ratio: ratio(spec, arg)?,
            }),
            "rs2" => {
                let (r, replace) = match arg.split_once(',') {
                    Some((r, "replace")) => (r, true),
                    Some((_, other)) => {
                        return Err(refuse(
                            spec,
                            &format!("rs2 takes only \"replace\" after the ratio, not {other:?}"),
                        ))
                    }
                    None => (arg, false),
                };
                Ok(SelectSpec::Rs2 {
                    ratio: ratio(spec, r)?,
                    replace,
                })
            }
            other => Err(refuse(spec, &format!("unknown method {other:?}"))),
        }
    }
}

impl fmt::Display for SelectSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectSpec::Random { ratio } => write!(f, "random:{ratio}"),
            SelectSpec::LabelBalanced { ratio } => write!(f, "label-balanced:{ratio}"),
            SelectSpec::Rs2 { ratio, replace } => {
                write!(f, "rs2:{ratio}{}", if *replace { ",replace" } else { "" })
            }
            SelectSpec::Scores { file, keep } => {
                write!(f, "scores={},keep={keep}", file.display())
            }
            SelectSpec::NewData => write!(f, "new-data"),
            SelectSpec::Freshness { ratio } => write!(f, "freshness:{ratio}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> SelectSpec {
        s.parse().unwrap()
    }

    #[test]
    fn every_form_parses_and_prints_back() {
        assert_eq!(parse("random:0.5"), SelectSpec::Random { ratio: 0.5 });
        assert_eq!(parse("random:50%"), SelectSpec::Random { ratio: 0.5 });
        assert_eq!(
            parse("label-balanced:20"),
            SelectSpec::LabelBalanced { ratio: 0.2 }
        );
        assert_eq!(parse("random:1"), SelectSpec::Random { ratio: 1.0 });
        assert_eq!(
            parse("rs2:25%,replace"),
            SelectSpec::Rs2 {
                ratio: 0.25,
                replace: true
            }
        );
        let s = parse("scores=/d/s,keep.npy,keep=50");
        assert_eq!(
            s,
            SelectSpec::Scores {
                file: "/d/s,keep.npy".into(),
                keep: 50.0
            }
        );
        assert_eq!(parse("new-data"), SelectSpec::NewData);
        assert_eq!(parse("freshness:50"), SelectSpec::Freshness { ratio: 0.5 });
        for spec in [
            "random:0.5",
            "rs2:0.25,replace",
            "label-balanced:0.2",
            "new-data",
            "freshness:0.5",
        ] {
            assert_eq!(parse(spec).to_string(), spec);
            assert_eq!(parse(&parse(spec).to_string()), parse(spec));
        }
    }

    #[test]
    fn bad_specs_name_the_accepted_forms() {
        for bad in [
            "random",
            "random:0",
            "random:101",
            "random:-5%",
            "random:x",
            "coreset:0.5",
            "rs2:0.5,again",
            "scores=f.npy",
            "scores=,keep=5",
            "scores=f.npy,keep=0",
            "freshness:0",
            "new-data:5",
        ] {
            let m = bad.parse::<SelectSpec>().unwrap_err().to_string();
            assert!(
                m.contains("label-balanced:R") && m.contains(bad),
                "{bad}: {m}"
            );
        }
    }
}
