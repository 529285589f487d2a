//! [`Pipeline`]: fills caller-provided batch buffers on a pool of worker
//! threads.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rayon::prelude::*;

use crate::limits::DecodeLimits;
use crate::worker::{Job, SampleError};
use crate::writer::Writer;
use crate::{Dataset, OutputFormat, PipelineError, Transform};

/// What to do with a sample that cannot be read or decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnError {
    /// Leave it out of the batch (the batch is compacted, see
    /// [`Pipeline::fill_batch`]), report it, warn through the skip callback
    /// and count it.
    #[default]
    Skip,
    /// Fail the whole batch with [`PipelineError::Sample`] naming the file.
    Fail,
}

/// A sample left out of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedSample {
    /// Its index in the dataset.
    pub index: usize,
    /// Where it lives (file path, or `shard.tar:member`).
    pub path: String,
    /// What went wrong.
    pub reason: String,
}

/// The outcome of [`Pipeline::fill_batch`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Rows written at the start of the buffers; publish only these.
    pub rows_written: usize,
    /// Samples left out (only with [`OnError::Skip`]), in batch order.
    pub skipped: Vec<SkippedSample>,
}

/// Called once per skipped sample, from the thread calling `fill_batch`.
pub type SkipCallback = Arc<dyn Fn(&SkippedSample) + Send + Sync>;

/// A dataset, a transform and an output format, with the worker threads that
/// produce batches from them.
pub struct Pipeline {
    dataset: Dataset,
    transform: Transform,
    output: OutputFormat,
    writer: Writer,
    on_error: OnError,
    limits: DecodeLimits,
    /// Decode JPEGs at a reduced DCT scale where an `Eval` resize allows.
    dct_scaling: bool,
    seed: u64,
    workers: usize,
    pool: rayon::ThreadPool,
    on_skip: SkipCallback,
    skipped_total: AtomicU64,
    decoded_total: AtomicU64,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("dataset", &self.dataset.root())
            .field("samples", &self.dataset.len())
            .field("transform", &self.transform)
            .field("output", &self.output)
            .field("on_error", &self.on_error)
            .field("max_pixels", &self.limits.max_pixels)
            .field("dct_scaling", &self.dct_scaling)
            .field("seed", &self.seed)
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Validates the configuration and starts `workers` threads (named
    /// `bc-pipeline-N`). The augmentation seed is 0 until
    /// [`with_seed`](Self::with_seed); the pixel budget is PIL's default
    /// until [`with_max_pixels`](Self::with_max_pixels); skipped samples are reported on stderr
    /// until [`with_skip_callback`](Self::with_skip_callback).
    ///
    /// # Errors
    /// `workers == 0`, an invalid transform or output format, or threads that
    /// cannot be started.
    pub fn new(
        dataset: Dataset,
        transform: Transform,
        output: OutputFormat,
        workers: usize,
        on_error: OnError,
    ) -> Result<Pipeline, PipelineError> {
        let pool = crate::worker::checked_pool(
            &transform,
            &output,
            workers,
            "the pipeline needs at least 1 worker thread",
            "bc-pipeline",
        )?;
        Ok(Pipeline {
            dataset,
            writer: output.writer(),
            transform,
            output,
            on_error,
            limits: DecodeLimits::default(),
            dct_scaling: false,
            seed: 0,
            workers,
            pool,
            on_skip: Arc::new(|s: &SkippedSample| {
                eprintln!(
                    "batchcast-pipeline: skipping sample {} ({}): {}",
                    s.index, s.path, s.reason
                );
            }),
            skipped_total: AtomicU64::new(0),
            decoded_total: AtomicU64::new(0),
        })
    }

    /// Sets the seed of the augmentations: sample `i` of epoch `e` gets the
    /// same random crop and flip for the same seed, on any thread.
    pub fn with_seed(mut self, seed: u64) -> Pipeline {
        self.seed = seed;
        self
    }

    /// Decodes a JPEG at 1/2, 1/4 or 1/8 of its size straight from its DCT
    /// coefficients (as libjpeg's `scale_denom` and PIL's `draft()` do)
    /// when the transform is [`Transform::Eval`] and the image's shorter
    /// side stays at least `resize` at that size; the resize then starts
    /// from the smaller image. Off by default: the output then differs
    /// from a full decode and resize (what torchvision gives) by under a
    /// level on average, more at hard edges. Measured on photo-like JPEGs
    /// of about 1000x750 stored at 256: 2.4 instead of 3.1 ms an image
    /// (Huffman decoding, which no scale skips, is most of what is left).
    /// Crops ([`Transform::Train`]) always decode at full size.
    pub fn with_dct_scaling(mut self, on: bool) -> Pipeline {
        self.dct_scaling = on;
        self
    }

    /// Sets the pixel budget: a file declaring more than `max_pixels`
    /// pixels is refused (skipped or failed, per [`OnError`]) from its
    /// header, before anything is allocated for it. The default,
    /// [`DEFAULT_MAX_PIXELS`](crate::DEFAULT_MAX_PIXELS), is PIL's
    /// `Image.MAX_IMAGE_PIXELS`.
    pub fn with_max_pixels(mut self, max_pixels: u64) -> Pipeline {
        self.limits.max_pixels = max_pixels;
        self
    }

    /// The decode limits (the pixel budget).
    pub fn limits(&self) -> &DecodeLimits {
        &self.limits
    }

    /// Replaces the default warning (a line on stderr) for skipped samples.
    pub fn with_skip_callback(
        mut self,
        callback: impl Fn(&SkippedSample) + Send + Sync + 'static,
    ) -> Pipeline {
        self.on_skip = Arc::new(callback);
        self
    }

    /// The dataset.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// The dataset, to grow it between batches ([`Watcher::rescan`](crate::Watcher::rescan)).
    pub fn dataset_mut(&mut self) -> &mut Dataset {
        &mut self.dataset
    }

    /// The transform.
    pub fn transform(&self) -> &Transform {
        &self.transform
    }

    /// The output format.
    pub fn output(&self) -> &OutputFormat {
        &self.output
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The augmentation seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Shape of one output image (`[H, W, 3]` or `[3, H, W]`).
    pub fn image_shape(&self) -> [usize; 3] {
        let (h, w) = self.transform.output_size();
        self.output.shape(h, w)
    }

    /// Bytes of one output image; row `k` of a batch starts at
    /// `k * image_bytes()`.
    pub fn image_bytes(&self) -> usize {
        let (h, w) = self.transform.output_size();
        self.output.image_bytes(h, w)
    }

    /// Samples skipped since this pipeline was made.
    pub fn skipped_total(&self) -> u64 {
        self.skipped_total.load(Ordering::Relaxed)
    }

    /// Samples read and decoded (or attempted, for those skipped) since this
    /// pipeline was made: the decode work done.
    pub fn decoded_total(&self) -> u64 {
        self.decoded_total.load(Ordering::Relaxed)
    }

    /// Produces the samples `indices` of `epoch` into `images` (row `k` at
    /// `k * image_bytes()`) and their labels into `labels`, decoding and
    /// augmenting in parallel, each worker writing its rows in place.
    ///
    /// With [`OnError::Skip`] a bad sample is left out and the good rows are
    /// moved up to close the gap: the first `rows_written` rows of `images`
    /// and `labels` are the batch, in `indices` order minus the skipped ones.
    /// Rows after `rows_written` are unspecified.
    ///
    /// # Errors
    /// Buffers smaller than `indices.len()` rows, an index out of range, or
    /// with [`OnError::Fail`] the first bad sample (in batch order); the
    /// buffers' contents are unspecified after an error.
    pub fn fill_batch(
        &self,
        epoch: u64,
        indices: &[usize],
        images: &mut [u8],
        labels: &mut [i64],
    ) -> Result<BatchReport, PipelineError> {
        let row = self.image_bytes();
        let n = indices.len();
        let needed = n.saturating_mul(row);
        if images.len() < needed {
            return Err(PipelineError::BufferTooSmall {
                what: "images",
                needed,
                got: images.len(),
            });
        }
        if labels.len() < n {
            return Err(PipelineError::BufferTooSmall {
                what: "labels",
                needed: n,
                got: labels.len(),
            });
        }
        let len = self.dataset.len();
        if let Some(&index) = indices.iter().find(|&&i| i >= len) {
            return Err(PipelineError::IndexOutOfRange { index, len });
        }
        if n == 0 || row == 0 {
            return Ok(BatchReport::default());
        }
        self.decoded_total.fetch_add(n as u64, Ordering::Relaxed);
        let job = Job {
            dataset: &self.dataset,
            transform: &self.transform,
            writer: &self.writer,
            limits: &self.limits,
            dct_scaling: self.dct_scaling,
            raw: self.output.is_raw(),
            seed: self.seed,
            epoch,
        };
        let results: Vec<Result<(), SampleError>> = self.pool.install(|| {
            images[..needed]
                .par_chunks_mut(row)
                .zip(indices.par_iter())
                .map(|(out, &index)| job.run(index, out))
                .collect()
        });
        self.compact(indices, results, images, labels, row)
    }

    /// Writes labels and closes the gaps left by failed samples.
    fn compact(
        &self,
        indices: &[usize],
        results: Vec<Result<(), SampleError>>,
        images: &mut [u8],
        labels: &mut [i64],
        row: usize,
    ) -> Result<BatchReport, PipelineError> {
        let mut report = BatchReport::default();
        for (k, (result, &index)) in results.into_iter().zip(indices).enumerate() {
            let name = || self.dataset.sample_name(index).unwrap_or_default();
            match result {
                Ok(()) => {
                    let w = report.rows_written;
                    if w != k {
                        images.copy_within(k * row..(k + 1) * row, w * row);
                    }
                    labels[w] = self.dataset.label(index).unwrap_or(-1);
                    report.rows_written += 1;
                }
                Err(e) if self.on_error == OnError::Fail => {
                    return Err(PipelineError::Sample {
                        index,
                        path: name(),
                        reason: e.to_string(),
                    });
                }
                Err(e) => {
                    let skipped = SkippedSample {
                        index,
                        path: name(),
                        reason: e.to_string(),
                    };
                    (self.on_skip)(&skipped);
                    self.skipped_total.fetch_add(1, Ordering::Relaxed);
                    report.skipped.push(skipped);
                }
            }
        }
        Ok(report)
    }
}
