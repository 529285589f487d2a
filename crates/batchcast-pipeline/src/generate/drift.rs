//! A drifting trace for `batchcast serve --replay`: the generated JPEGs of
//! [`generate_jpeg_dataset`](super::generate_jpeg_dataset) spread over
//! `steps` time steps so that the class mix shifts over time, and the
//! `trace.csv` (`path,label,timestamp`) that replays them.
//!
//! Class `c` of `C` is centred on step `c * (steps - 1) / (C - 1)`: at step
//! `s` its share of its images is proportional to `steps - |s - centre|`,
//! so early steps hold mostly the first classes and late steps the last
//! ones, every class appearing at every step. Each class's images are
//! given out in file order; the split depends only on the config.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{class_dir, generate_jpeg_dataset, GenerateConfig};
use crate::PipelineError;

/// The name of the trace written at the dataset's root.
pub const TRACE_FILE: &str = "trace.csv";

/// How the images are spread over time.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftConfig {
    /// Time steps (at least 1).
    pub steps: usize,
    /// Timestamp of the first step, seconds since the Unix epoch.
    pub start: f64,
    /// Seconds between two steps.
    pub step_seconds: f64,
}

impl Default for DriftConfig {
    /// 5 steps an hour apart, from 2026-01-01T00:00:00Z.
    fn default() -> Self {
        DriftConfig {
            steps: 5,
            start: 1_767_225_600.0,
            step_seconds: 3600.0,
        }
    }
}

/// How many of `n` images of class `class` (of `classes`) fall in each of
/// `steps` steps.
pub fn class_split(class: usize, classes: usize, n: usize, steps: usize) -> Vec<usize> {
    let centre = if classes > 1 {
        class as f64 * (steps as f64 - 1.0) / (classes as f64 - 1.0)
    } else {
        0.0
    };
    let weights: Vec<f64> = (0..steps)
        .map(|s| steps as f64 - (s as f64 - centre).abs())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut cum = 0.0;
    let mut given = 0;
    weights
        .iter()
        .map(|w| {
            cum += w;
            let upto = ((n as f64 * cum / total).round() as usize).min(n);
            let k = upto - given;
            given = upto;
            k
        })
        .collect()
}

/// Generates (or reuses) the dataset `config` describes at `dir` and
/// writes `dir/trace.csv` spreading it over `drift.steps` steps; returns
/// the trace's path.
///
/// # Errors
/// An invalid config (no step, a step that is not a positive number of
/// seconds), or what [`generate_jpeg_dataset`] or writing the trace meets.
pub fn generate_drifting_trace(
    dir: &Path,
    config: &GenerateConfig,
    drift: &DriftConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<PathBuf, PipelineError> {
    let ok = drift.steps >= 1
        && drift.start.is_finite()
        && drift.start >= 0.0
        && drift.step_seconds.is_finite()
        && drift.step_seconds > 0.0;
    if !ok {
        return Err(PipelineError::InvalidConfig(format!(
            "drifting trace {drift:?}: need steps >= 1, a start >= 0 and step_seconds > 0"
        )));
    }
    let made = generate_jpeg_dataset(dir, config, progress)?;
    let mut csv = String::from("path,label,timestamp\n");
    for class in 0..config.classes {
        let split = class_split(class, config.classes, config.images_per_class, drift.steps);
        let mut i = 0;
        for (step, &k) in split.iter().enumerate() {
            let time = drift.start + drift.step_seconds * step as f64;
            for _ in 0..k {
                csv.push_str(&format!(
                    "{}/img_{i:06}.jpg,{class},{time}\n",
                    class_dir(class)
                ));
                i += 1;
            }
        }
    }
    let path = made.path.join(TRACE_FILE);
    let tmp = made.path.join(format!(".{TRACE_FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(csv.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|e| PipelineError::write(&path, e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Replay;

    #[test]
    fn every_image_is_given_out_and_the_mix_shifts() {
        for (classes, n, steps) in [(4, 100, 5), (1, 7, 3), (10, 3, 4), (3, 10, 1)] {
            for c in 0..classes {
                let split = class_split(c, classes, n, steps);
                assert_eq!(split.iter().sum::<usize>(), n, "{classes} {n} {steps}");
            }
        }
        let first = class_split(0, 4, 100, 5);
        let last = class_split(3, 4, 100, 5);
        assert!(
            first[0] > first[4] && last[4] > last[0],
            "{first:?} {last:?}"
        );
    }

    #[test]
    fn the_trace_replays_every_generated_image() {
        let dir = tempfile::tempdir().unwrap();
        let config = GenerateConfig {
            classes: 3,
            images_per_class: 6,
            long_side: (16, 24),
            ..GenerateConfig::default()
        };
        let drift = DriftConfig {
            steps: 3,
            start: 100.0,
            step_seconds: 10.0,
        };
        let csv =
            generate_drifting_trace(&dir.path().join("d"), &config, &drift, &|_, _| {}).unwrap();
        let (mut ds, mut replay) = Replay::open(&csv).unwrap();
        assert_eq!(replay.rows(), 18);
        assert_eq!(
            (replay.first_time(), replay.next_time()),
            (100.0, Some(110.0))
        );
        let labels = |ds: &crate::Dataset| {
            (0..ds.len())
                .map(|i| ds.label(i).unwrap())
                .collect::<Vec<_>>()
        };
        let start = labels(&ds);
        assert!(
            start.iter().filter(|&&l| l == 0).count() > start.iter().filter(|&&l| l == 2).count()
        );
        replay.advance(&mut ds, f64::INFINITY);
        assert_eq!(ds.len(), 18);
    }
}
