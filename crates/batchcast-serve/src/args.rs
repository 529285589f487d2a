//! The command-line description of a batch source, shared by `serve`,
//! `demo` and the demo's trainers (which get the same flags back through
//! [`SourceArgs::to_flags`]), and by `python -m batchcast.serve`.

use std::path::PathBuf;

use crate::error::{Result, ServeError};
use crate::images::{self, ImageArgs};
use crate::replay::ReplayArgs;
use crate::source::{check_batch_size, BatchSource};
use crate::synthetic::Synthetic;

/// Pipeline threads by default: the machine's cores.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What to serve and how.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Dataset: an ImageFolder directory or WebDataset .tar shards.
    #[arg(long, conflicts_with = "synthetic")]
    pub data: Option<PathBuf>,
    /// Serve synthetic samples (an id and a payload made at a set CPU cost)
    /// instead of images.
    #[arg(long)]
    pub synthetic: bool,
    /// Rows per producer batch.
    #[arg(long, default_value_t = 64)]
    pub batch_size: u64,
    /// Worker threads of the pipeline.
    #[arg(long, default_value_t = default_workers())]
    pub workers: usize,
    /// How images are read and augmented.
    #[command(flatten)]
    pub images: ImageArgs,
    /// Options of the synthetic source.
    #[command(flatten)]
    pub synth: SyntheticArgs,
    /// A timestamped dataset replayed as if it arrived.
    #[command(flatten)]
    pub replay: ReplayArgs,
}

/// Options of the synthetic source.
#[derive(Debug, Clone, clap::Args)]
pub struct SyntheticArgs {
    /// Synthetic: samples per epoch.
    #[arg(long, default_value_t = 10_000)]
    pub samples: u64,
    /// Synthetic: payload bytes per sample.
    #[arg(long, default_value_t = 3 * 32 * 32)]
    pub sample_bytes: usize,
    /// Synthetic: CPU microseconds of work per sample.
    #[arg(long, default_value_t = 0.0)]
    pub work_us: f64,
    /// Synthetic: work iterations per microsecond (default: measured).
    #[arg(long, hide = true)]
    pub iters_per_us: Option<f64>,
}

impl SourceArgs {
    /// Opens the source these arguments describe.
    pub fn open(&self) -> Result<Box<dyn BatchSource>> {
        check_batch_size(self.batch_size)?;
        if self.workers == 0 {
            return Err(ServeError::invalid("--workers must be at least 1"));
        }
        if self.synthetic && self.images.select.is_some() {
            return Err(ServeError::invalid(
                "--select applies to an image dataset (--data PATH): the synthetic source has \
                 no labels or files to select from; drop --select or serve --data",
            ));
        }
        if self.synthetic && self.images.watch {
            return Err(ServeError::invalid(
                "--watch applies to an image dataset (--data DIR): the synthetic source has no \
                 folder to watch; drop --watch or serve --data",
            ));
        }
        if self.synthetic {
            let s = &self.synth;
            return Ok(Box::new(Synthetic::new(
                s.samples,
                self.batch_size,
                s.sample_bytes,
                s.work_us,
                self.workers,
                s.iters_per_us,
            )));
        }
        if let Some(csv) = &self.replay.replay {
            let clock = self.replay.clock()?;
            return Ok(Box::new(images::open_replay(
                csv,
                clock,
                self.batch_size,
                self.workers,
                &self.images,
            )?));
        }
        match &self.data {
            Some(path) => Ok(Box::new(images::open(
                path,
                self.batch_size,
                self.workers,
                &self.images,
            )?)),
            None => Err(ServeError::invalid(
                "say what to serve: --data PATH (an image dataset), --replay FILE.csv (a \
                 timestamped one) or --synthetic",
            )),
        }
    }

    /// True when the source takes in samples at epoch boundaries
    /// (`--watch`, `--replay`).
    pub fn grows(&self) -> bool {
        self.images.watch || self.replay.replay.is_some()
    }

    /// The same arguments as command-line flags.
    pub fn to_flags(&self) -> Vec<String> {
        let mut f: Vec<String> = Vec::new();
        let mut push = |k: &str, v: String| {
            f.push(k.into());
            f.push(v);
        };
        push("--batch-size", self.batch_size.to_string());
        push("--workers", self.workers.to_string());
        let s = &self.synth;
        push("--samples", s.samples.to_string());
        push("--sample-bytes", s.sample_bytes.to_string());
        push("--work-us", s.work_us.to_string());
        if let Some(i) = s.iters_per_us {
            push("--iters-per-us", i.to_string());
        }
        let im = &self.images;
        push("--transform", im.transform.clone());
        push("--image-size", im.image_size.to_string());
        push("--layout", im.layout.clone());
        push("--dtype", im.dtype.clone());
        push("--seed", im.seed.to_string());
        push("--on-error", im.on_error.clone());
        push("--max-pixels", im.max_pixels.to_string());
        if let Some(spec) = &im.select {
            push("--select", spec.to_string());
        }
        if let Some(d) = &self.data {
            push("--data", d.display().to_string());
        }
        self.replay.push_flags(&mut f);
        if self.synthetic {
            f.push("--synthetic".into());
        }
        if im.no_shuffle {
            f.push("--no-shuffle".into());
        }
        if im.drop_last {
            f.push("--drop-last".into());
        }
        if im.select_weights {
            f.push("--select-weights".into());
        }
        if im.watch {
            f.push("--watch".into());
            f.push("--watch-max-files".into());
            f.push(im.watch_max_files.to_string());
        }
        if im.decode_only {
            f.push("--decode-only".into());
            if let Some(side) = im.store_size {
                f.push("--store-size".into());
                f.push(side.to_string());
            }
        }
        f
    }
}
