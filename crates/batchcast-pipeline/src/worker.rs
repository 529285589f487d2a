//! The work done for one sample on a worker thread: read, decode, plan,
//! resample, write. Buffers are kept per thread and reused across samples so
//! the steady state allocates nothing.

use std::cell::RefCell;
use std::io;

use fast_image_resize::Resizer;

use crate::decode::{decode_rgb_area_into, scaled_size, Area, DecodeError, RgbImage};
use crate::limits::DecodeLimits;
use crate::resample::{self, ResampleError};
use crate::writer::Writer;
use crate::{Dataset, OutputFormat, PipelineError, Transform};

/// Checks `transform` and `output`, then starts `threads` worker threads
/// named `{prefix}-N`. `none` is the refusal when `threads` is 0.
pub(crate) fn checked_pool(
    transform: &Transform,
    output: &OutputFormat,
    threads: usize,
    none: &str,
    prefix: &'static str,
) -> Result<rayon::ThreadPool, PipelineError> {
    transform.validate()?;
    output.validate()?;
    if threads == 0 {
        return Err(PipelineError::InvalidConfig(none.into()));
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("{prefix}-{i}"))
        .build()
        .map_err(|e| PipelineError::ThreadPool {
            threads,
            detail: e.to_string(),
        })
}

/// Why one sample could not be produced. Its text is the reason a skipped
/// sample reports, without the file name.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SampleError {
    /// The encoded file could not be read.
    #[error("cannot read the file: {0}")]
    Read(io::Error),
    /// The file is not a decodable image within the limits.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The transform's plan did not fit the decoded image.
    #[error(transparent)]
    Resample(#[from] ResampleError),
    /// A worker's per-thread buffers were already in use on this thread.
    #[error("re-entered")]
    Reentered,
}

/// Scratch buffers larger than this are released after use, so one huge
/// image does not pin its memory in every worker for good.
const KEEP_BYTES: usize = 64 << 20;

struct Scratch {
    encoded: Vec<u8>,
    image: RgbImage,
    resized: Vec<u8>,
    resizer: Resizer,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            encoded: Vec::new(),
            image: RgbImage::default(),
            resized: Vec::new(),
            resizer: Resizer::new(),
        }
    }

    fn trim(&mut self) {
        if self.encoded.capacity() > KEEP_BYTES {
            self.encoded = Vec::new();
        }
        if self.image.data.capacity() > KEEP_BYTES {
            self.image.data = Vec::new();
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::new());
}

/// Everything a worker needs to produce samples of one batch.
pub(crate) struct Job<'a> {
    pub(crate) dataset: &'a Dataset,
    pub(crate) transform: &'a Transform,
    pub(crate) writer: &'a Writer,
    pub(crate) limits: &'a DecodeLimits,
    /// Decode at a reduced DCT scale where an `Eval` resize allows.
    pub(crate) dct_scaling: bool,
    /// The output is RGB8 HWC: resample straight into it.
    pub(crate) raw: bool,
    pub(crate) seed: u64,
    pub(crate) epoch: u64,
}

impl Job<'_> {
    /// Produces sample `index` into `out` (exactly one image's bytes).
    /// The error is a reason for the report, without the file name.
    pub(crate) fn run(&self, index: usize, out: &mut [u8]) -> Result<(), SampleError> {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => {
                let result = self.run_with(index, out, &mut scratch);
                scratch.trim();
                result
            }
            // Re-entered on this thread (a nested rayon call): use fresh buffers.
            Err(_) => self.run_with(index, out, &mut Scratch::new()),
        })
    }

    /// Eighths of a `width` x `height` image's size to decode at: with DCT
    /// scaling on, the fewest of 1, 2 or 4 that keep the shorter side at
    /// least an `Eval` resize's; else 8.
    fn decode_scale(&self, width: u32, height: u32) -> u8 {
        match self.transform {
            // 1/8, 1/4, 1/2 only: at 5/8 to 7/8 the reduced inverse DCT
            // costs about what the smaller image saves (measured no gain).
            Transform::Eval { resize, .. } if self.dct_scaling => [1, 2, 4]
                .into_iter()
                .find(|&n| {
                    let (w, h) = scaled_size(width, height, n);
                    w.min(h) >= *resize
                })
                .unwrap_or(8),
            _ => 8,
        }
    }

    fn run_with(&self, index: usize, out: &mut [u8], s: &mut Scratch) -> Result<(), SampleError> {
        self.dataset
            .read_sample(index, &mut s.encoded)
            .map_err(SampleError::Read)?;
        let plan_for = |w, h| {
            self.transform
                .plan(w, h, self.seed, self.epoch, index as u64)
        };
        // Only the part the plan reads is decoded, at the smallest size the
        // plan allows; the plan is then made for the size decoded.
        decode_rgb_area_into(&s.encoded, &mut s.image, self.limits, |w, h| {
            let scale = self.decode_scale(w, h);
            let (w, h) = scaled_size(w, h, scale);
            Area {
                scale,
                ..plan_for(w, h).source_area(w, h)
            }
        })?;
        let plan = plan_for(s.image.width, s.image.height);
        if self.raw {
            return Ok(resample::apply(&plan, s.image.view(), &mut s.resizer, out)?);
        }
        let bytes = plan.out_width as usize * plan.out_height as usize * 3;
        s.resized.resize(bytes, 0);
        resample::resample(&plan, s.image.view(), &mut s.resizer, &mut s.resized)?;
        // The writer mirrors as it writes.
        let width = plan.out_width as usize;
        self.writer.write(&s.resized, width, plan.flip, out);
        Ok(())
    }
}
