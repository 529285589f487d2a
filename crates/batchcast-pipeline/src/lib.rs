//! batchcast-pipeline: a native image data pipeline that decodes, augments
//! and collates batches straight into caller-provided buffers (a batchcast
//! shared-memory slot), on a pool of worker threads.
//!
//! It does what a torchvision `ImageFolder` + `DataLoader` does, with the same
//! semantics, so a model sees what it would have been trained with:
//!
//! - [`Dataset`] opens an ImageFolder tree or WebDataset `.tar` shards and
//!   indexes them (labels as torchvision / WebDataset assign them).
//! - [`Watcher`] appends the files added to a dataset's folder since its
//!   last look (indices and labels of the known samples never move), with
//!   each sample's arrival time (its file's mtime, or its row in the
//!   folder's [`ARRIVALS_FILE`] sidecar); [`Replay`] appends the rows of a
//!   timestamped CSV trace as a replay clock passes them.
//! - [`Sampler`] gives each epoch's order (a permutation reproducible from
//!   `(seed, epoch)`, or sequential) cut into batches.
//! - [`Selection`] picks which samples an epoch has ([`SelectSpec`]:
//!   random, label-balanced, RS2, or the top share by a score), from
//!   `(seed, epoch)`, the same count every epoch.
//! - [`Transform`] is `RandomResizedCrop + RandomHorizontalFlip` (`Train`) or
//!   `Resize + CenterCrop` (`Eval`), torchvision's arithmetic to the rounding.
//! - [`OutputFormat`] is the layout (NHWC / NCHW) and element type (`u8`, or
//!   `f32` as `ToTensor` + `Normalize`) of each output image.
//! - [`Pipeline`] ties them to a thread pool: [`Pipeline::fill_batch`] turns
//!   a list of sample indices into images and `i64` labels, written in place.
//!
//! ```no_run
//! use batchcast_pipeline::{Dataset, OnError, OutputFormat, Pipeline, Sampler, Transform};
//! # fn main() -> Result<(), batchcast_pipeline::PipelineError> {
//! let dataset = Dataset::open("/data/imagenet/train".as_ref())?;
//! let sampler = Sampler::new(dataset.len(), 256)?.with_seed(1);
//! let pipeline = Pipeline::new(
//!     dataset,
//!     Transform::train(224),
//!     OutputFormat::default(),
//!     8,
//!     OnError::Skip,
//! )?
//! .with_seed(1);
//! let mut images = vec![0u8; 256 * pipeline.image_bytes()]; // a shared-memory slot, really
//! let mut labels = vec![0i64; 256];
//! for batch in sampler.batches(0) {
//!     let report = pipeline.fill_batch(0, &batch, &mut images, &mut labels)?;
//!     // publish report.rows_written rows
//! }
//! # Ok(()) }
//! ```
//!
//! # Invariants
//! - **In place.** Each worker decodes and resamples one sample into its own
//!   disjoint row of the caller's buffer; there is no intermediate batch
//!   buffer (only a per-thread scratch image, reused).
//! - **Reproducible.** Every random draw comes from a stream derived from
//!   `(seed, epoch, sample index)` (augmentation) or `(seed, epoch)`
//!   (shuffle), never from shared state: results do not depend on the number
//!   of workers or on scheduling.
//! - **Compacted on error.** With [`OnError::Skip`] a bad file is left out,
//!   the following rows move up, and [`BatchReport`] names every skipped file;
//!   the caller publishes `rows_written` rows. With [`OnError::Fail`] the
//!   batch fails with an error naming the file.
//! - **Bounded per file.** A file's declared size is checked against
//!   [`DecodeLimits`] (a pixel budget, PIL's by default, and the least data
//!   an image of that size takes) before anything is allocated for it.
//! - **Exact sizes.** [`Pipeline::image_bytes`] and [`Sampler::num_batches`]
//!   are known before any work is done.
//! - **No dependency on the `batchcast` core crate**: `batchcast-serve`
//!   joins them (its image source fills producer slots through [`Pipeline`]).
//!
//! With the `generate` feature (off by default), `generate_jpeg_dataset`
//! writes a synthetic ImageNet-like dataset for demos and benchmarks,
//! `write_scores` a `.npy` score vector for `--select scores=FILE`;
//! [`WebDatasetWriter`] writes WebDataset shards.
#![deny(missing_docs)]

mod augment;
mod dataset;
mod decode;
mod error;
#[cfg(feature = "generate")]
mod generate;
mod jpeg;
mod limits;
mod output;
mod pipeline;
mod resample;
mod rng;
mod sampler;
mod select;
mod transform;
mod worker;
mod writer;

pub use augment::{apply_op, Augmenter, AutoAugment, ColorJitter, Op, NUM_AUTO_OPS, OP_NAMES};
pub use dataset::{
    Dataset, DatasetKind, Growth, Replay, Watcher, WebDatasetWriter, ARRIVALS_FILE,
    DEFAULT_WATCH_MAX_FILES, MAX_ARRIVALS_BYTES, MAX_REPLAY_BYTES, MAX_REPLAY_LABEL,
    MAX_REPLAY_PATH, MAX_REPLAY_ROWS,
};
pub use decode::{decode_rgb, decode_rgb_into, DecodeError, RgbImage};
pub use error::PipelineError;
#[cfg(feature = "generate")]
pub use generate::{
    class_split, generate_drifting_trace, generate_jpeg_dataset, DriftConfig, GenerateConfig,
    GeneratedDataset, MARKER_FILE, TRACE_FILE,
};
pub use limits::{DecodeLimits, DEFAULT_MAX_PIXELS};
pub use output::{DType, Layout, OutputFormat};
pub use pipeline::{BatchReport, OnError, Pipeline, SkipCallback, SkippedSample};
pub use sampler::{Batches, Sampler};
#[cfg(feature = "generate")]
pub use select::write_scores;
pub use select::{SelectSpec, Selection, SELECT_FORMS};
pub use transform::{center_crop_offsets, resize_output_size, CropBox, Plan, Region, Transform};
