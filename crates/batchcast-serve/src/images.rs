//! Image datasets through the native pipeline (`batchcast-pipeline`): each
//! batch is decoded, augmented and collated straight into the producer's
//! slot, as `(images, labels)`: images `u8` or `f32`, NCHW (what PyTorch
//! models take) or NHWC; labels `i64`. With `--select` an epoch is only the
//! selected samples (only they are decoded), and with `--select-weights`
//! each batch is `(images, labels, weights)`, weights `f32`. With `--watch`
//! the files added to the dataset's folder join at the next epoch boundary
//! ([`BatchSource::grow`]), never mid-epoch; with `--replay` the rows of
//! a timestamped trace join there as the replay clock passes them.

use std::path::Path;

use batchcast::{DType, LeafSpec, Node};
use batchcast_pipeline::{
    DType as PixelType, Dataset, Layout, OnError, OutputFormat, Pipeline, Replay, Sampler,
    SelectSpec, Selection, Transform, Watcher, DEFAULT_MAX_PIXELS, DEFAULT_WATCH_MAX_FILES,
};

use crate::error::{Result, ServeError};
use crate::replay::ReplayClock;
use crate::source::{Arrived, BatchSource};

/// How images are read and augmented.
#[derive(Debug, Clone, clap::Args)]
pub struct ImageArgs {
    /// `train` (RandomResizedCrop + horizontal flip) or `eval` (Resize +
    /// CenterCrop), with torchvision's semantics.
    #[arg(long, default_value = "train")]
    pub transform: String,
    /// Output side in pixels (eval resizes the shorter side to size * 8/7
    /// first, as 256/224 in the ImageNet recipe).
    #[arg(long, default_value_t = 224)]
    pub image_size: u32,
    /// `nchw` (PyTorch) or `nhwc`.
    #[arg(long, default_value = "nchw")]
    pub layout: String,
    /// `u8` (raw pixels) or `f32` (ToTensor + ImageNet Normalize).
    #[arg(long, default_value = "u8")]
    pub dtype: String,
    /// Seed of the shuffle and the augmentations.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep the dataset's order (default: a seeded permutation per epoch).
    #[arg(long)]
    pub no_shuffle: bool,
    /// Drop each epoch's last, smaller batch.
    #[arg(long)]
    pub drop_last: bool,
    /// What to do with an undecodable file: `skip` (warn with its name and
    /// go on) or `fail`.
    #[arg(long, default_value = "skip")]
    pub on_error: String,
    /// Largest image decoded, in pixels (width x height): a file declaring
    /// more is refused from its header, before anything is allocated for
    /// it (skipped, or fatal with --on-error fail). The default is PIL's
    /// decompression-bomb limit, Image.MAX_IMAGE_PIXELS.
    #[arg(long, default_value_t = DEFAULT_MAX_PIXELS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pixels: u64,
    /// Publish decoded images for consumers that augment their own copy
    /// (`batchcast.Consumer(transform=...)`): each image's shorter side
    /// resized to --store-size and centre-cropped to a square, as `u8`
    /// NHWC (--transform, --layout and --dtype do not apply).
    #[arg(long)]
    pub decode_only: bool,
    /// Side of the stored square with --decode-only (default: --image-size).
    #[arg(long, requires = "decode_only")]
    pub store_size: Option<u32>,
    /// With --decode-only or --transform eval: decode a JPEG whose shorter
    /// side is at least 2, 4 or 8 times the resize at 1/2, 1/4 or 1/8 of
    /// its size straight from its DCT coefficients (as PIL's draft() does),
    /// then resize from there: about a fifth less CPU for photos twice the
    /// store size. Pixels differ from a full decode and resize by under a
    /// level on average (more at hard edges).
    #[arg(long)]
    pub dct_scale: bool,
    /// Serve a selection of the samples each epoch, computed once for
    /// every consumer from --seed and the epoch: `random:R` (a fresh
    /// uniform subset each epoch), `label-balanced:R` (spread evenly over
    /// the classes), `rs2:R` (RS2: fresh each epoch, no sample again until
    /// all have been served; `rs2:R,replace` draws each epoch afresh) or
    /// `scores=FILE,keep=P` (the top P % by a score, FILE a 1-D
    /// float32/float64 .npy with one score per sample in dataset order),
    /// `new-data` (only what arrived since the last --trigger firing) or
    /// `freshness:R` (R of the epoch from what arrived since the last
    /// firing, the rest from before it).
    /// R is a fraction (0.25) or a percentage (25, 25%). Only the selected
    /// samples are decoded; an epoch's length is the selection's.
    #[arg(long, value_parser = parse_select)]
    pub select: Option<SelectSpec>,
    /// With a --select that defines per-sample weights (label-balanced:
    /// the class's share of the dataset over its share of the selection),
    /// deliver them as a third leaf of each batch, `f32`.
    #[arg(long, requires = "select")]
    pub select_weights: bool,
    /// Watch the dataset's folder: files added to it (new images in class
    /// folders, new class folders, new .tar shards) join at the next epoch
    /// boundary, never mid-epoch; a new class gets the next label. Each
    /// sample's arrival time is its file's mtime, or the time the folder's
    /// batchcast-arrivals.csv (`path,timestamp` rows) gives its file.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: most files (samples) and folders kept track of.
    #[arg(long, requires = "watch", default_value_t = DEFAULT_WATCH_MAX_FILES as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub watch_max_files: u64,
}

/// `--select` as clap reads it.
fn parse_select(text: &str) -> std::result::Result<SelectSpec, batchcast_pipeline::PipelineError> {
    text.parse()
}

impl Default for ImageArgs {
    fn default() -> Self {
        ImageArgs {
            transform: "train".into(),
            image_size: 224,
            layout: "nchw".into(),
            dtype: "u8".into(),
            seed: 0,
            no_shuffle: false,
            drop_last: false,
            on_error: "skip".into(),
            max_pixels: DEFAULT_MAX_PIXELS,
            decode_only: false,
            store_size: None,
            dct_scale: false,
            select: None,
            select_weights: false,
            watch: false,
            watch_max_files: DEFAULT_WATCH_MAX_FILES as u64,
        }
    }
}

/// An image dataset served through the native pipeline.
pub struct Images {
    pipeline: Pipeline,
    sampler: Sampler,
    /// The samples each epoch serves (all when None); the sampler orders
    /// positions in it.
    selection: Option<Selection>,
    /// Deliver the selection's per-sample weights as a third leaf.
    weights: bool,
    shape: [usize; 3],
    dtype: DType,
    /// How the dataset grows (`--watch`, `--replay`).
    growing: Option<Growing>,
    /// A replayed trace's clock as of the last boundary.
    clock: Option<f64>,
    /// What the sampler and the selection are made from, again when the
    /// dataset grows.
    plan: Plan,
}

/// How the dataset takes in new samples at epoch boundaries.
enum Growing {
    /// New files of its folder (`--watch`).
    Watch(Box<Watcher>),
    /// The rows of a trace the clock has passed (`--replay`).
    Replay(Replay, ReplayClock),
}

/// How an epoch's samples are chosen and ordered, from the dataset.
struct Plan {
    select: Option<SelectSpec>,
    /// The first sample that arrived since the last trigger.
    mark: usize,
    seed: u64,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
}

impl Plan {
    /// The selection (when one is asked for) and the sampler over the
    /// samples it serves.
    fn make(&self, dataset: &Dataset) -> Result<(Option<Selection>, Sampler)> {
        let selection = match &self.select {
            Some(spec) => {
                let labels: Vec<i64> = (0..dataset.len())
                    .map(|i| dataset.label(i).unwrap_or(-1))
                    .collect();
                Some(Selection::since(spec, &labels, self.seed, self.mark)?)
            }
            None => None,
        };
        let served = selection.as_ref().map_or(dataset.len(), Selection::count);
        let sampler = Sampler::new(served, self.batch_size)?
            .with_seed(self.seed)
            .with_shuffle(self.shuffle)
            .with_drop_last(self.drop_last);
        Ok((selection, sampler))
    }
}

/// Opens `path` as a batch source.
pub fn open(path: &Path, batch_size: u64, workers: usize, args: &ImageArgs) -> Result<Images> {
    let dataset = Dataset::open(path)?;
    let growing = if args.watch {
        let max = usize::try_from(args.watch_max_files).unwrap_or(usize::MAX);
        Some(Growing::Watch(Box::new(Watcher::new(&dataset, max)?)))
    } else {
        None
    };
    build(dataset, growing, batch_size, workers, args)
}

/// Opens the trace `csv` as a batch source that grows on `clock`.
pub(crate) fn open_replay(
    csv: &Path,
    clock: ReplayClock,
    batch_size: u64,
    workers: usize,
    args: &ImageArgs,
) -> Result<Images> {
    let (dataset, replay) = Replay::open(csv)?;
    let growing = Some(Growing::Replay(replay, clock));
    build(dataset, growing, batch_size, workers, args)
}

/// The source over `dataset` that the flags describe (`growing` when it
/// takes in new samples at boundaries).
fn build(
    dataset: Dataset,
    growing: Option<Growing>,
    batch_size: u64,
    workers: usize,
    args: &ImageArgs,
) -> Result<Images> {
    let transform = transform(args)?;
    let (output, dtype) = output_format(args)?;
    let on_error = on_error(args)?;
    let plan = Plan {
        select: args.select.clone(),
        mark: 0,
        seed: args.seed,
        batch_size: batch_size as usize,
        shuffle: !args.no_shuffle,
        drop_last: args.drop_last,
    };
    let (selection, sampler) = select(&plan, &dataset, growing.is_some(), args)?;
    if args.dct_scale && !matches!(transform, Transform::Eval { .. }) {
        return Err(ServeError::invalid(
            "--dct-scale applies to a resize (--decode-only, or --transform eval); \
             random crops (--transform train) always decode at full size: drop --dct-scale",
        ));
    }
    let pipeline = Pipeline::new(dataset, transform, output, workers, on_error)?
        .with_seed(args.seed)
        .with_max_pixels(args.max_pixels)
        .with_dct_scaling(args.dct_scale);
    let shape = pipeline.image_shape();
    Ok(Images {
        pipeline,
        sampler,
        selection,
        weights: args.select_weights,
        shape,
        dtype,
        clock: match &growing {
            Some(Growing::Replay(r, _)) => Some(r.first_time()),
            _ => None,
        },
        growing,
        plan,
    })
}

/// `--transform` (with `--image-size`; with `--decode-only`, the stored
/// square of `--store-size`).
fn transform(args: &ImageArgs) -> Result<Transform> {
    let size = args.image_size;
    Ok(match args.transform.as_str() {
        // Decode once: the stored square, augmented by each consumer.
        _ if args.decode_only => {
            let side = args.store_size.unwrap_or(size);
            Transform::Eval {
                resize: side,
                crop: side,
            }
        }
        "train" => Transform::train(size),
        "eval" => Transform::Eval {
            resize: (size as u64 * 256 / 224) as u32,
            crop: size,
        },
        other => {
            return Err(ServeError::invalid(format!(
                "unknown --transform {other:?}; use train or eval"
            )))
        }
    })
}

/// `--layout` and `--dtype` (with `--decode-only`: NHWC `u8`), and the
/// dtype of the images' leaf.
fn output_format(args: &ImageArgs) -> Result<(OutputFormat, DType)> {
    let layout = match args.layout.as_str() {
        _ if args.decode_only => Layout::Nhwc,
        "nchw" => Layout::Nchw,
        "nhwc" => Layout::Nhwc,
        other => {
            return Err(ServeError::invalid(format!(
                "unknown --layout {other:?}; use nchw or nhwc"
            )))
        }
    };
    let (pixel, dtype) = match args.dtype.as_str() {
        _ if args.decode_only => (PixelType::U8, DType::U8),
        "u8" => (PixelType::U8, DType::U8),
        "f32" => (PixelType::imagenet(), DType::F32),
        other => {
            return Err(ServeError::invalid(format!(
                "unknown --dtype {other:?}; use u8 or f32"
            )))
        }
    };
    let output = OutputFormat {
        layout,
        dtype: pixel,
    };
    Ok((output, dtype))
}

/// `--on-error`.
fn on_error(args: &ImageArgs) -> Result<OnError> {
    match args.on_error.as_str() {
        "skip" => Ok(OnError::Skip),
        "fail" => Ok(OnError::Fail),
        other => Err(ServeError::invalid(format!(
            "unknown --on-error {other:?}; use skip or fail"
        ))),
    }
}

/// The first epoch's selection and sampler, once `--select` and
/// `--select-weights` are checked against each other and against a
/// `growing` dataset.
fn select(
    plan: &Plan,
    dataset: &Dataset,
    growing: bool,
    args: &ImageArgs,
) -> Result<(Option<Selection>, Sampler)> {
    if growing && matches!(args.select, Some(SelectSpec::Scores { .. })) {
        return Err(ServeError::invalid(
            "--select scores=FILE has one score per sample of the dataset as it is, which a \
             growing dataset outgrows: drop --watch or --replay, or select another way",
        ));
    }
    let (selection, sampler) = plan.make(dataset)?;
    if args.select_weights && !selection.as_ref().is_some_and(Selection::has_weights) {
        return Err(ServeError::invalid(format!(
            "--select-weights: --select {} defines no per-sample weights (label-balanced does); \
             drop --select-weights",
            args.select
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        )));
    }
    Ok((selection, sampler))
}

impl BatchSource for Images {
    fn samples_per_epoch(&self) -> u64 {
        self.sampler.num_samples() as u64
    }

    fn batches(&self, epoch: u64) -> Vec<Vec<u64>> {
        let selected = self.selection.as_ref().map(|s| s.indices(epoch));
        let index = |pos: usize| selected.as_ref().map_or(pos, |s| s[pos]) as u64;
        self.sampler
            .batches(epoch)
            .map(|b| b.into_iter().map(index).collect())
            .collect()
    }

    fn decoded(&self) -> Option<u64> {
        Some(self.pipeline.decoded_total())
    }

    fn grow(&mut self) -> Result<Option<Arrived>> {
        let growth = match self.growing.as_mut() {
            None => return Ok(None),
            Some(Growing::Watch(w)) => w.rescan(self.pipeline.dataset_mut())?,
            Some(Growing::Replay(r, clock)) => {
                let now = clock.at_boundary(r.first_time(), r.next_time());
                let growth = r.advance(self.pipeline.dataset_mut(), now);
                // Past the trace's end the clock stays at its last row.
                let last = self.pipeline.dataset().len().saturating_sub(1);
                self.clock = Some(now).filter(|t| t.is_finite()).or(r.arrival(last));
                growth
            }
        };
        if growth.added > 0 {
            let (selection, sampler) = self.plan.make(self.pipeline.dataset())?;
            self.selection = selection;
            self.sampler = sampler;
        }
        Ok(Some(Arrived {
            added: growth.added as u64,
            arrivals: growth.arrivals,
            seconds: growth.seconds,
        }))
    }

    fn clock(&self) -> Option<f64> {
        self.clock
    }

    fn triggered(&mut self, samples: u64) -> Result<()> {
        let Some(spec) = &self.plan.select else {
            return Ok(());
        };
        if samples == 0 || !matches!(spec, SelectSpec::NewData | SelectSpec::Freshness { .. }) {
            return Ok(());
        }
        let len = self.pipeline.dataset().len();
        self.plan.mark = len.saturating_sub(usize::try_from(samples).unwrap_or(len));
        let (selection, sampler) = self.plan.make(self.pipeline.dataset())?;
        self.selection = selection;
        self.sampler = sampler;
        Ok(())
    }

    fn spec(&self, rows: u64) -> (Node, Vec<LeafSpec>) {
        let [a, b, c] = self.shape.map(|d| d as u64);
        let mut tree = vec![Node::Leaf(0), Node::Leaf(1)];
        let mut leaves = vec![
            LeafSpec::array(self.dtype, vec![rows, a, b, c]),
            LeafSpec::array(DType::I64, vec![rows]),
        ];
        if self.weights {
            tree.push(Node::Leaf(2));
            leaves.push(LeafSpec::array(DType::F32, vec![rows]));
        }
        (Node::Tuple(tree), leaves)
    }

    fn fill(&self, epoch: u64, indices: &[u64], mut leaves: Vec<&mut [u8]>) -> Result<u64> {
        let missing = || ServeError::invalid("a batch has an images and a labels array");
        let weights = if self.weights {
            Some(leaves.pop().ok_or_else(missing)?)
        } else {
            None
        };
        let labels = leaves.pop().ok_or_else(missing)?;
        let images = leaves.pop().ok_or_else(missing)?;
        if labels.len() % 8 != 0 {
            return Err(ServeError::invalid(
                "the labels array is not a whole number of 8-byte labels",
            ));
        }
        // The pipeline writes i64s; they are copied into the slot's bytes
        // after (one batch of labels, a few KiB at most).
        let mut written_labels = vec![0i64; labels.len() / 8];
        let indices: Vec<usize> = indices.iter().map(|&i| i as usize).collect();
        let report = self
            .pipeline
            .fill_batch(epoch, &indices, images, &mut written_labels)?;
        for (out, label) in labels
            .chunks_exact_mut(8)
            .zip(written_labels.iter().take(report.rows_written))
        {
            out.copy_from_slice(&label.to_ne_bytes());
        }
        if let (Some(out), Some(selection)) = (weights, &self.selection) {
            // The rows written are the batch's samples less the skipped
            // ones, in order.
            let mut skipped = report.skipped.iter().map(|s| s.index).peekable();
            let written = indices.iter().filter(|&&i| {
                let gone = skipped.peek() == Some(&i);
                if gone {
                    skipped.next();
                }
                !gone
            });
            for (row, &i) in out.chunks_exact_mut(4).zip(written) {
                row.copy_from_slice(&selection.weight(i).to_ne_bytes());
            }
        }
        Ok(report.rows_written as u64)
    }
}
