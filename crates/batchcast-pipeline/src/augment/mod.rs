//! [`Augmenter`]: augmentation of already-decoded images, for a consumer of
//! a decoded stream.
//!
//! A producer that decodes once (`Transform::Eval { resize: S, crop: S }`,
//! RGB8 HWC) lets every trainer augment the shared decoded batch into its
//! own memory with its own transform and seed. The geometry is the
//! pipeline's own ([`Transform::plan`] and the same resampler and output
//! writer), applied to an `S` x `S` image instead of the original file, so
//! a trainer's `RandomResizedCrop` draws its crop from the stored image:
//! the crop's area and aspect follow torchvision's distribution relative to
//! that image, which is the original's centre square at `S` pixels (the
//! part outside the centre square is not seen).
//!
//! Random draws come from `(seed, epoch, key)` per sample, where `key` is
//! the caller's sample key (its position in the epoch): results do not
//! depend on the number of threads, and two consumers with different seeds
//! draw different crops.
//!
//! After the crop, resize and flip, and before the output writer, an
//! augmenter may apply torchvision's [`AutoAugment`] policies
//! (`TrivialAugmentWide`, `RandAugment`) and then [`ColorJitter`], to the
//! `uint8` RGB image, with torchvision's arithmetic ([`Op`] lists the ops;
//! [`apply_op`] applies one with given parameters). Their draws come from
//! their own stream of `(seed, epoch, key)`, so adding them does not change
//! the crops.

mod auto;
mod colour;
mod geometry;
mod hue;
mod jitter;
mod lanes;
mod op;
mod tone;

use std::cell::RefCell;

use fast_image_resize::Resizer;
use rayon::prelude::*;

pub use auto::{AutoAugment, NUM_AUTO_OPS};
pub use jitter::ColorJitter;
pub use op::{apply_op, Op, OP_NAMES};

use crate::resample::{self, ImageView};
use crate::rng::{Rng, STREAM_COLOUR};
use crate::worker::SampleError;
use crate::writer::Writer;
use crate::{OutputFormat, PipelineError, Transform};

/// `x` rounded half to even (torch's `round` and grid_sample's nearest),
/// without the libm call `round_ties_even` is on baseline x86-64: adding
/// and taking away 1.5 * 2^23 rounds to an integer in the default rounding
/// mode, exactly, for |x| < 2^22.
#[inline]
fn round_half_even(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    if x.abs() < 4_194_304.0 {
        (x + MAGIC) - MAGIC
    } else {
        x.round_ties_even()
    }
}

/// One thread's working memory: the resizer, the resampled image, the
/// drawn ops and a copy for the ops that read the image they write.
#[derive(Default)]
struct Scratch {
    resizer: Resizer,
    rgb: Vec<u8>,
    ops: Vec<Op>,
    copy: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Augments batches of decoded RGB8 HWC images on its own thread pool.
pub struct Augmenter {
    transform: Transform,
    output: OutputFormat,
    writer: Writer,
    seed: u64,
    auto: Option<AutoAugment>,
    jitter: Option<ColorJitter>,
    pool: rayon::ThreadPool,
}

impl std::fmt::Debug for Augmenter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Augmenter")
            .field("transform", &self.transform)
            .field("output", &self.output)
            .field("seed", &self.seed)
            .field("auto", &self.auto)
            .field("jitter", &self.jitter)
            .field("threads", &self.pool.current_num_threads())
            .finish()
    }
}

impl Augmenter {
    /// An augmenter with `threads` worker threads.
    ///
    /// # Errors
    /// [`PipelineError::InvalidConfig`] for bad parameters or no thread,
    /// [`PipelineError::ThreadPool`] if the threads cannot start.
    pub fn new(
        transform: Transform,
        output: OutputFormat,
        threads: usize,
    ) -> Result<Augmenter, PipelineError> {
        let pool = crate::worker::checked_pool(
            &transform,
            &output,
            threads,
            "the augmenter needs at least 1 thread",
            "bc-augment",
        )?;
        let writer = output.writer();
        Ok(Augmenter {
            transform,
            output,
            writer,
            seed: 0,
            auto: None,
            jitter: None,
            pool,
        })
    }

    /// The same augmenter applying `auto` (after the flip, before any
    /// jitter).
    ///
    /// # Errors
    /// [`PipelineError::InvalidConfig`] for bad parameters.
    pub fn with_auto(mut self, auto: AutoAugment) -> Result<Augmenter, PipelineError> {
        auto.validate()?;
        self.auto = Some(auto);
        Ok(self)
    }

    /// The same augmenter applying `jitter` (last, before the output).
    ///
    /// # Errors
    /// [`PipelineError::InvalidConfig`] for bad ranges.
    pub fn with_jitter(mut self, jitter: ColorJitter) -> Result<Augmenter, PipelineError> {
        jitter.validate()?;
        self.jitter = Some(jitter);
        Ok(self)
    }

    /// The ops sample `key` of `epoch` gets after its crop, in order (the
    /// auto-augment ops, then the jitter's): what [`augment`](Self::augment)
    /// applies, for tests and inspection.
    pub fn draws(&self, epoch: u64, key: u64) -> Vec<Op> {
        let mut ops = Vec::new();
        self.draw(epoch, key, &mut ops);
        ops
    }

    fn draw(&self, epoch: u64, key: u64, ops: &mut Vec<Op>) {
        ops.clear();
        if self.auto.is_none() && self.jitter.is_none() {
            return;
        }
        let mut rng = Rng::derive(&[STREAM_COLOUR, self.seed, epoch, key]);
        let (w, h) = self.transform.output_size();
        if let Some(auto) = &self.auto {
            auto.draw(&mut rng, w, h, ops);
        }
        if let Some(jitter) = &self.jitter {
            jitter.draw(&mut rng, ops);
        }
    }

    /// The same augmenter drawing from `seed` (one per consumer).
    pub fn with_seed(mut self, seed: u64) -> Augmenter {
        self.seed = seed;
        self
    }

    /// Bytes of one augmented image.
    pub fn image_bytes(&self) -> usize {
        let (w, h) = self.transform.output_size();
        self.output.image_bytes(h, w)
    }

    /// Shape of one augmented image, in the output's layout.
    pub fn image_shape(&self) -> [usize; 3] {
        let (w, h) = self.transform.output_size();
        self.output.shape(h, w)
    }

    /// Augments `keys.len()` decoded images of `width` x `height` (RGB8
    /// HWC, back to back in `images`) into `out`, one image's
    /// [`image_bytes`](Self::image_bytes) per row; image `i` draws from
    /// `(seed, epoch, keys[i])`.
    ///
    /// # Errors
    /// [`PipelineError::BufferTooSmall`] when `images` or `out` is short,
    /// [`PipelineError::InvalidConfig`] for an empty image size.
    pub fn augment(
        &self,
        epoch: u64,
        images: &[u8],
        width: u32,
        height: u32,
        keys: &[u64],
        out: &mut [u8],
    ) -> Result<(), PipelineError> {
        if width == 0 || height == 0 {
            return Err(PipelineError::InvalidConfig(format!(
                "decoded images of {width}x{height} pixels"
            )));
        }
        let n = keys.len();
        let src_row = width as usize * height as usize * 3;
        let dst_row = self.image_bytes();
        for (what, needed, got) in [
            ("images", n.saturating_mul(src_row), images.len()),
            ("out", n.saturating_mul(dst_row), out.len()),
        ] {
            if got < needed {
                return Err(PipelineError::BufferTooSmall { what, needed, got });
            }
        }
        let raw = self.output.is_raw();
        let results: Vec<Result<(), SampleError>> = self.pool.install(|| {
            out[..n * dst_row]
                .par_chunks_mut(dst_row)
                .zip(images[..n * src_row].par_chunks(src_row))
                .zip(keys.par_iter())
                .map(|((dst, src), &key)| {
                    let view = ImageView {
                        width,
                        height,
                        data: src,
                    };
                    self.one(view, epoch, key, raw, dst)
                })
                .collect()
        });
        match results.into_iter().find_map(Result::err) {
            Some(e) => Err(PipelineError::InvalidConfig(format!("augmenting: {e}"))),
            None => Ok(()),
        }
    }

    fn one(
        &self,
        src: ImageView<'_>,
        epoch: u64,
        key: u64,
        raw: bool,
        dst: &mut [u8],
    ) -> Result<(), SampleError> {
        let plan = self
            .transform
            .plan(src.width, src.height, self.seed, epoch, key);
        SCRATCH.with(|cell| {
            let mut scratch = cell.try_borrow_mut().map_err(|_| SampleError::Reentered)?;
            let Scratch {
                resizer,
                rgb,
                ops,
                copy,
            } = &mut *scratch;
            self.draw(epoch, key, ops);
            let (w, h) = (plan.out_width as usize, plan.out_height as usize);
            if raw {
                resample::apply(&plan, src, resizer, dst)?;
                for op in ops.iter() {
                    op.apply(dst, w, h, copy);
                }
                return Ok(());
            }
            rgb.resize(w * h * 3, 0);
            if ops.is_empty() {
                // The writer mirrors as it writes.
                resample::resample(&plan, src, resizer, rgb)?;
                self.writer.write(rgb, w, plan.flip, dst);
                return Ok(());
            }
            // The ops see the flipped image (some of them move pixels).
            resample::apply(&plan, src, resizer, rgb)?;
            for op in ops.iter() {
                op.apply(rgb, w, h, copy);
            }
            self.writer.write(rgb, w, false, dst);
            Ok(())
        })
    }
}

/// `n` random RGB8 pixels, for the ops' unit tests.
#[cfg(test)]
pub(crate) fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut r = crate::rng::Rng::derive(&[seed]);
    (0..n * 3).map(|_| r.below(256) as u8).collect()
}

#[cfg(test)]
mod tests {
    use super::round_half_even;

    #[test]
    fn round_half_even_is_round_ties_even() {
        let mut r = crate::rng::Rng::derive(&[11]);
        let special = [
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -1.5,
            -2.5,
            0.0,
            -0.0,
            4_194_303.5,
            5e6,
            -7e9,
            0.49999997,
        ];
        let random = (0..20_000).map(|_| r.uniform(-3000.0, 3000.0) as f32);
        for x in special.into_iter().chain(random) {
            assert_eq!(round_half_even(x), x.round_ties_even(), "{x}");
        }
        assert!(round_half_even(f32::NAN).is_nan());
    }
}
