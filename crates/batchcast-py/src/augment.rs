//! `_native.Augmenter`: a consumer's own augmentation of a decoded stream
//! (`batchcast serve --decode-only`), run by the native pipeline's
//! [`Augmenter`] on its threads with the GIL released.
//!
//! Arrays come in through DLPack (NumPy arrays, torch tensors): the decoded
//! batch `(n, h, w, 3)` `uint8`, and an output array the Python side has
//! just made for this call, of `n` augmented images.
//!
//! After the flip it may run an auto-augment policy (`auto=`) and then
//! `ColorJitter` (`jitter=`), natively; `Augmenter.apply_op` applies one
//! op with given parameters to an image, for parity tests.

use batchcast_pipeline::{
    apply_op, Augmenter, AutoAugment, ColorJitter, DType, Layout, Op, OutputFormat, Transform,
};
use std::sync::Arc;

use pyo3::prelude::*;

use crate::dlpack::{import, ArrayView, Imported, LeaseTracker};
use crate::errors::invalid;
use crate::outpool::OutPool;

/// Output buffers an augmenter keeps for reuse (a loop holds one or two
/// batches at a time, a prefetch one more).
const POOLED_BATCHES: usize = 4;

/// Per-consumer augmentation on native threads.
#[pyclass(name = "Augmenter", module = "batchcast._native", frozen)]
pub(crate) struct PyAugmenter {
    inner: Augmenter,
    pool: Arc<OutPool>,
    /// Normalised float32 output (else uint8).
    float: bool,
    /// Counts nothing (pooled batches are no lease on shared memory); the
    /// array views want one.
    untracked: Arc<LeaseTracker>,
}

#[pymethods]
impl PyAugmenter {
    /// `RandomResizedCrop(size, scale, ratio)` + `RandomHorizontalFlip(hflip_p)`,
    /// then `auto` (`"trivialaugmentwide"`, or `"randaugment"` with
    /// `num_ops` and `magnitude`; `num_magnitude_bins` for both), then
    /// `ColorJitter` with `jitter` = the (min, max) factor ranges of
    /// brightness, contrast, saturation and hue (`None` for an adjustment
    /// left out), written as `layout` (`"nchw"`/`"nhwc"`) `uint8`, or
    /// `float32` normalised with `mean` and `std` when they are given.
    #[new]
    ///
    /// With `resize`, the geometry is `Resize(resize)` + `CenterCrop(size)`
    /// instead (no random crop, no flip): an evaluation loader's.
    #[pyo3(signature = (size, *, scale=(0.08, 1.0), ratio=(0.75, 4.0 / 3.0), hflip_p=0.5,
                        layout="nchw", mean=None, std=None, threads=2, seed=0, jitter=None,
                        auto=None, num_ops=2, magnitude=9, num_magnitude_bins=31, resize=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        size: u32,
        scale: (f32, f32),
        ratio: (f32, f32),
        hflip_p: f32,
        layout: &str,
        mean: Option<[f32; 3]>,
        std: Option<[f32; 3]>,
        threads: usize,
        seed: u64,
        jitter: Option<[Option<(f64, f64)>; 4]>,
        auto: Option<&str>,
        num_ops: u32,
        magnitude: u32,
        num_magnitude_bins: u32,
        resize: Option<u32>,
    ) -> PyResult<PyAugmenter> {
        let output = output_format(py, layout, mean, std)?;
        let float = !matches!(output.dtype, DType::U8);
        let transform = geometry(py, size, scale, ratio, hflip_p, resize)?;
        let mut inner = Augmenter::new(transform, output, threads)
            .map_err(|e| invalid(py, e.to_string()))?
            .with_seed(seed);
        let policy = auto_policy(py, auto, num_ops, magnitude, num_magnitude_bins)?;
        if let Some(policy) = policy {
            inner = inner
                .with_auto(policy)
                .map_err(|e| invalid(py, e.to_string()))?;
        }
        if let Some([brightness, contrast, saturation, hue]) = jitter {
            let jitter = ColorJitter {
                brightness,
                contrast,
                saturation,
                hue,
            };
            inner = inner
                .with_jitter(jitter)
                .map_err(|e| invalid(py, e.to_string()))?;
        }
        Ok(PyAugmenter {
            inner,
            float,
            pool: OutPool::new(POOLED_BATCHES),
            untracked: Arc::default(),
        })
    }

    /// The ops sample `key` of `epoch` gets after its crop, in order, as
    /// `(name, parameter)` pairs that `apply_op` takes.
    fn draws(&self, epoch: u64, key: u64) -> Vec<(&'static str, f64)> {
        self.inner
            .draws(epoch, key)
            .iter()
            .map(|op| (op.name(), op.value()))
            .collect()
    }

    /// Applies one op, torchvision's name and parameter (`_apply_op`'s
    /// magnitude, or `adjust_*`'s factor), to `image`, a `uint8` array of
    /// shape `(height, width, 3)`, in place.
    #[staticmethod]
    #[pyo3(signature = (name, image, magnitude=0.0))]
    fn apply_op(
        py: Python<'_>,
        name: &str,
        image: &Bound<'_, PyAny>,
        magnitude: f64,
    ) -> PyResult<()> {
        let op = Op::parse(name, magnitude).map_err(|e| invalid(py, e.to_string()))?;
        let img = import(image, "image")?;
        let (h, w) = match img.shape.as_slice() {
            [h, w, 3] if img.dtype == batchcast::DType::U8 => (*h, *w),
            _ => {
                return Err(invalid(
                    py,
                    format!(
                        "image must be uint8 of shape (height, width, 3); got {} {:?}",
                        img.dtype.name(),
                        img.shape
                    ),
                ))
            }
        };
        if img.read_only {
            return Err(invalid(
                py,
                "image is read-only; apply_op changes it in place, give a writable copy \
                 (numpy.array(image))"
                    .into(),
            ));
        }
        let too_big = || invalid(py, "image too large".into());
        let (h, w) = (
            u32::try_from(h).map_err(|_| too_big())?,
            u32::try_from(w).map_err(|_| too_big())?,
        );
        let (addr, len) = (img.addr, img.nbytes);
        if len == 0 {
            return Ok(()); // an empty image: nothing to change (and maybe no pointer)
        }
        // One image, in place: the GIL stays held, so no Python thread
        // touches the array meanwhile.
        // SAFETY: the capsule held in `img` for this whole call keeps the
        // array alive and unmoved; `import` checked that it is a C-contiguous
        // CPU array of exactly `len` (> 0) bytes, not marked read-only. The
        // caller gives it to be changed in place, and with the GIL held no
        // other Python code reads or writes it until this returns.
        let data = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
        let result = apply_op(&op, data, w, h);
        drop(img);
        result.map_err(|e| invalid(py, e.to_string()))
    }

    /// Shape of one augmented image, in the output layout.
    fn image_shape(&self) -> (usize, usize, usize) {
        let [a, b, c] = self.inner.image_shape();
        (a, b, c)
    }

    /// Augments the decoded batch `images` (`(n, h, w, 3)` `uint8`) into
    /// `out` (`n` images of `image_shape()`, uint8 or float32 as made),
    /// sample `i` drawing from `(seed, epoch, first_key + i)`.
    fn augment(
        &self,
        py: Python<'_>,
        images: &Bound<'_, PyAny>,
        epoch: u64,
        first_key: u64,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let dst = import(out, "out")?;
        let (addr, nbytes) = (dst.addr, dst.nbytes);
        let result = self.run(py, images, epoch, first_key, addr, nbytes);
        drop(dst);
        result
    }

    /// As `augment`, into memory of the augmenter's own pool: returns an
    /// array view (`n` images of `image_shape()`, `dtype`) for
    /// `torch.from_dlpack` / `numpy.from_dlpack`. Its memory goes back to
    /// the pool when the last array made from it is freed, and is then
    /// reused without the page faults of fresh memory.
    fn augment_pooled(
        &self,
        py: Python<'_>,
        images: &Bound<'_, PyAny>,
        epoch: u64,
        first_key: u64,
    ) -> PyResult<ArrayView> {
        let n = batch_len(py, images)?;
        let bytes = n.saturating_mul(self.inner.image_bytes());
        let mut lent = self.pool.take(bytes);
        let dst = lent.bytes_mut();
        self.run(
            py,
            images,
            epoch,
            first_key,
            dst.as_mut_ptr() as usize,
            dst.len(),
        )?;
        let [a, b, c] = self.inner.image_shape();
        let shape = [n as u64, a as u64, b as u64, c as u64];
        let dtype = if self.float {
            batchcast::DType::F32
        } else {
            batchcast::DType::U8
        };
        let addr = lent.bytes().as_ptr() as usize;
        let keep = lent.into_keepalive();
        // SAFETY: the keepalive owns the buffer from here on, and a Vec's
        // heap memory does not move when the Vec does, so these `bytes`
        // bytes at `addr` stay valid while `keep` (held by the view) lives.
        let data = unsafe { std::slice::from_raw_parts(addr as *const u8, bytes) };
        ArrayView::new(keep, data, dtype, &shape, false, &self.untracked)
    }
}

/// Images in a decoded batch (its first dimension).
fn batch_len(py: Python<'_>, images: &Bound<'_, PyAny>) -> PyResult<usize> {
    let src = import(images, "images")?;
    decoded_dims(py, &src).map(|(n, _, _)| n)
}

/// `(n, height, width)` of a decoded batch, `uint8` `(n, h, w, 3)`.
fn decoded_dims(py: Python<'_>, src: &Imported<'_>) -> PyResult<(usize, u32, u32)> {
    let (n, h, w) = match src.shape.as_slice() {
        [n, h, w, 3] if src.dtype == batchcast::DType::U8 => (*n, *h, *w),
        _ => {
            return Err(invalid(
                py,
                format!(
                    "images must be a decoded batch, uint8 of shape (n, height, width, 3) \
                     (serve it with `batchcast serve --decode-only`); got {} {:?}",
                    src.dtype.name(),
                    src.shape
                ),
            ))
        }
    };
    Ok((
        usize::try_from(n).map_err(|_| invalid(py, "batch too large".into()))?,
        u32::try_from(h).map_err(|_| invalid(py, "image too tall".into()))?,
        u32::try_from(w).map_err(|_| invalid(py, "image too wide".into()))?,
    ))
}

impl PyAugmenter {
    /// Checks `images` and the destination (`dst_len` bytes at `dst_addr`,
    /// memory that only this call writes) and augments, GIL released.
    fn run(
        &self,
        py: Python<'_>,
        images: &Bound<'_, PyAny>,
        epoch: u64,
        first_key: u64,
        dst_addr: usize,
        dst_len: usize,
    ) -> PyResult<()> {
        let src = import(images, "images")?;
        let (n, h, w) = decoded_dims(py, &src)?;
        let needed = n.saturating_mul(self.inner.image_bytes());
        if dst_len != needed {
            return Err(invalid(
                py,
                format!("out holds {dst_len} bytes; {n} augmented images take {needed}"),
            ));
        }
        if src.addr < dst_addr.saturating_add(dst_len)
            && dst_addr < src.addr.saturating_add(src.nbytes)
        {
            return Err(invalid(py, "out overlaps images; give a new array".into()));
        }
        let keys: Vec<u64> = (0..n as u64).map(|i| first_key.wrapping_add(i)).collect();
        let (src_addr, src_len) = (src.addr, src.nbytes);
        let inner = &self.inner;
        let result = py.detach(move || {
            // SAFETY: the capsule held in `src` for this whole call keeps the
            // batch alive and unmoved, and `import` checked that it is a
            // C-contiguous CPU array of exactly `src_len` bytes. The
            // destination is memory the caller keeps alive for this call and
            // that nothing else writes meanwhile (a private array made for
            // it, or a pooled buffer no array views), of `dst_len` bytes,
            // and it does not overlap `images`, a batch from the producer.
            let (images, out) = unsafe {
                (
                    std::slice::from_raw_parts(src_addr as *const u8, src_len),
                    std::slice::from_raw_parts_mut(dst_addr as *mut u8, dst_len),
                )
            };
            inner.augment(epoch, images, w, h, &keys, out)
        });
        drop(src);
        result.map_err(|e| invalid(py, e.to_string()))
    }
}

/// `layout` (`"nchw"`/`"nhwc"`), `uint8`, or `float32` normalised with
/// `mean` and `std` when both are given.
fn output_format(
    py: Python<'_>,
    layout: &str,
    mean: Option<[f32; 3]>,
    std: Option<[f32; 3]>,
) -> PyResult<OutputFormat> {
    let layout = match layout {
        "nchw" => Layout::Nchw,
        "nhwc" => Layout::Nhwc,
        other => {
            return Err(invalid(
                py,
                format!("layout {other:?}: use \"nchw\" or \"nhwc\""),
            ))
        }
    };
    let dtype = match (mean, std) {
        (None, None) => DType::U8,
        (Some(mean), Some(std)) => DType::F32Normalized { mean, std },
        _ => {
            return Err(invalid(
                py,
                "give both mean and std to normalise, or neither".into(),
            ))
        }
    };
    Ok(OutputFormat { layout, dtype })
}

/// `RandomResizedCrop(size, scale, ratio)` + a flip with `hflip_p`, or
/// with `resize`, `Resize(resize)` + `CenterCrop(size)` (which takes no
/// flip).
fn geometry(
    py: Python<'_>,
    size: u32,
    scale: (f32, f32),
    ratio: (f32, f32),
    hflip_p: f32,
    resize: Option<u32>,
) -> PyResult<Transform> {
    match resize {
        None => Ok(Transform::Train {
            size,
            scale,
            ratio,
            hflip_p,
        }),
        Some(_) if hflip_p > 0.0 => Err(invalid(
            py,
            "Resize + CenterCrop takes no flip (hflip_p must be 0); use \
             RandomResizedCrop for random crops and flips"
                .into(),
        )),
        Some(resize) => Ok(Transform::Eval { resize, crop: size }),
    }
}

/// The automatic augmentation `auto` names (None: none).
fn auto_policy(
    py: Python<'_>,
    auto: Option<&str>,
    num_ops: u32,
    magnitude: u32,
    num_magnitude_bins: u32,
) -> PyResult<Option<AutoAugment>> {
    match auto {
        None => Ok(None),
        Some("trivialaugmentwide") => {
            Ok(Some(AutoAugment::TrivialAugmentWide { num_magnitude_bins }))
        }
        Some("randaugment") => Ok(Some(AutoAugment::RandAugment {
            num_ops,
            magnitude,
            num_magnitude_bins,
        })),
        Some(other) => Err(invalid(
            py,
            format!("auto {other:?}: use \"trivialaugmentwide\" or \"randaugment\""),
        )),
    }
}
