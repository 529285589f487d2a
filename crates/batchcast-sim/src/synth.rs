//! A seeded synthetic trace: Poisson arrivals, a heavy-tailed duration
//! (log-normal), GPU demands from a Philly/Helios-like mix, Zipf dataset
//! popularity and a share of communication-heavy models.

use serde::Serialize;

use crate::error::SimError;
use crate::job::{JobSpec, Slowdown};

/// The generator's knobs.
#[derive(Clone, Debug, Serialize)]
pub struct SynthConfig {
    /// Jobs.
    pub jobs: usize,
    /// Seed: the same seed gives the same trace.
    pub seed: u64,
    /// Mean seconds between arrivals.
    pub mean_interarrival: f64,
    /// Median ideal duration, seconds.
    pub median_duration: f64,
    /// Log-normal sigma of durations.
    pub duration_sigma: f64,
    /// (GPUs, weight) choices.
    pub gpu_mix: Vec<(u32, f64)>,
    /// Distinct datasets.
    pub datasets: usize,
    /// Zipf exponent of dataset popularity.
    pub zipf_s: f64,
    /// Share of communication-heavy models (large slowdowns).
    pub heavy_share: f64,
    /// CPU cores of data loading per GPU.
    pub cpu_per_gpu: f64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            jobs: 1000,
            seed: 1,
            mean_interarrival: 60.0,
            median_duration: 1800.0,
            duration_sigma: 1.5,
            gpu_mix: vec![
                (1, 0.55),
                (2, 0.15),
                (4, 0.15),
                (8, 0.1),
                (16, 0.03),
                (32, 0.02),
            ],
            datasets: 20,
            zipf_s: 1.1,
            heavy_share: 0.3,
            cpu_per_gpu: 4.0,
        }
    }
}

/// Largest synthetic trace, in jobs.
pub const MAX_SYNTH_JOBS: usize = 10_000_000;

/// SplitMix64: small, seeded, platform-independent.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (a, b) = (self.unit(), self.unit());
        (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
    }
    fn pick(&mut self, cdf: &[f64]) -> usize {
        let u = self.unit() * cdf.last().copied().unwrap_or(1.0);
        cdf.partition_point(|&c| c < u)
            .min(cdf.len().saturating_sub(1))
    }
}

fn cdf(weights: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut acc = 0.0;
    weights
        .map(|w| {
            acc += w.max(0.0);
            acc
        })
        .collect()
}

/// Generates a trace; GPU demands larger than `max_gpus` are capped.
pub fn synthetic(cfg: &SynthConfig, max_gpus: u32) -> Result<Vec<JobSpec>, SimError> {
    if cfg.jobs > MAX_SYNTH_JOBS || cfg.gpu_mix.is_empty() || cfg.datasets == 0 {
        return Err(SimError::Config(format!(
            "synthetic trace needs 1..={MAX_SYNTH_JOBS} jobs, a GPU mix and at least one dataset"
        )));
    }
    if !(cfg.mean_interarrival > 0.0 && cfg.median_duration > 0.0 && cfg.duration_sigma >= 0.0) {
        return Err(SimError::Config(
            "inter-arrival and duration must be positive".into(),
        ));
    }
    let mut rng = Rng(cfg.seed ^ 0x5EED);
    let gpu_cdf = cdf(cfg.gpu_mix.iter().map(|g| g.1));
    let ds_cdf = cdf((1..=cfg.datasets).map(|k| 1.0 / (k as f64).powf(cfg.zipf_s)));
    let mut t = 0.0;
    let mut jobs = Vec::with_capacity(cfg.jobs);
    for n in 0..cfg.jobs {
        t += -cfg.mean_interarrival * rng.unit().ln();
        let gpus = cfg.gpu_mix[rng.pick(&gpu_cdf)].0.clamp(1, max_gpus.max(1));
        let duration = (cfg.median_duration * (cfg.duration_sigma * rng.normal()).exp())
            .clamp(60.0, 30.0 * 86_400.0);
        let heavy = rng.unit() <= cfg.heavy_share;
        let slowdown = if heavy {
            Slowdown {
                cross_slot: 1.1,
                cross_machine: 1.6,
                cross_rack: 2.5,
            }
        } else {
            Slowdown {
                cross_slot: 1.0,
                cross_machine: 1.05,
                cross_rack: 1.15,
            }
        };
        let iter_time = if heavy { 0.5 } else { 0.2 };
        let ds = rng.pick(&ds_cdf);
        jobs.push(JobSpec {
            id: format!("s{n}"),
            arrival: t,
            gpus,
            iterations: (duration / iter_time).max(1.0),
            iter_time,
            slowdown,
            model: if heavy {
                "comm-heavy".into()
            } else {
                "compute-bound".into()
            },
            dataset: format!("ds{ds}"),
            cpu: cfg.cpu_per_gpu * gpus as f64,
        });
    }
    Ok(jobs)
}
