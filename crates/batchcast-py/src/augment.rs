//! `_native.Augmenter`: a consumer's own augmentation of a decoded stream
//! (`batchcast serve --decode-only`), run by the native pipeline's
//! [`Augmenter`] on its threads with the GIL released.
//!
//! Arrays come in through DLPack (NumPy arrays, torch tensors): the decoded
//! batch `(n, h, w, 3)` `uint8`, and an output array the Python side has
//! just made for this call, of `n` augmented images.

use batchcast_pipeline::{Augmenter, DType, Layout, OutputFormat, Transform};
use pyo3::prelude::*;

use crate::dlpack::import;
use crate::errors::Exc;

/// Per-consumer augmentation on native threads.
#[pyclass(name = "Augmenter", module = "batchcast._native", frozen)]
pub(crate) struct PyAugmenter {
    inner: Augmenter,
}

fn invalid(py: Python<'_>, msg: String) -> PyErr {
    Exc::InvalidArgument.err(py, msg, &[])
}

#[pymethods]
impl PyAugmenter {
    /// `RandomResizedCrop(size, scale, ratio)` + `RandomHorizontalFlip(hflip_p)`,
    /// written as `layout` (`"nchw"`/`"nhwc"`) `uint8`, or `float32`
    /// normalised with `mean` and `std` when they are given.
    #[new]
    #[pyo3(signature = (size, *, scale=(0.08, 1.0), ratio=(0.75, 4.0 / 3.0), hflip_p=0.5,
                        layout="nchw", mean=None, std=None, threads=2, seed=0))]
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
    ) -> PyResult<PyAugmenter> {
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
        let transform = Transform::Train {
            size,
            scale,
            ratio,
            hflip_p,
        };
        let inner = Augmenter::new(transform, OutputFormat { layout, dtype }, threads)
            .map_err(|e| invalid(py, e.to_string()))?
            .with_seed(seed);
        Ok(PyAugmenter { inner })
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
        let src = import(images, "images")?;
        let dst = import(out, "out")?;
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
        let (n, h, w) = (
            usize::try_from(n).map_err(|_| invalid(py, "batch too large".into()))?,
            u32::try_from(h).map_err(|_| invalid(py, "image too tall".into()))?,
            u32::try_from(w).map_err(|_| invalid(py, "image too wide".into()))?,
        );
        let needed = n.saturating_mul(self.inner.image_bytes());
        if dst.nbytes != needed {
            return Err(invalid(
                py,
                format!(
                    "out holds {} bytes; {n} augmented images take {needed}",
                    dst.nbytes
                ),
            ));
        }
        if src.addr < dst.addr.saturating_add(dst.nbytes)
            && dst.addr < src.addr.saturating_add(src.nbytes)
        {
            return Err(invalid(py, "out overlaps images; give a new array".into()));
        }
        let keys: Vec<u64> = (0..n as u64).map(|i| first_key.wrapping_add(i)).collect();
        let (src_addr, src_len, dst_addr, dst_len) = (src.addr, src.nbytes, dst.addr, dst.nbytes);
        let inner = &self.inner;
        let result = py.detach(move || {
            // SAFETY: both capsules (held in `src` and `dst` for this whole
            // call) keep their arrays alive and unmoved; `import` checked
            // that each is a C-contiguous CPU array of exactly these many
            // bytes. `out` is the private array the Python side made for
            // this call, so nothing else writes it meanwhile, and it does
            // not overlap `images`, a batch received from the producer.
            let (images, out) = unsafe {
                (
                    std::slice::from_raw_parts(src_addr as *const u8, src_len),
                    std::slice::from_raw_parts_mut(dst_addr as *mut u8, dst_len),
                )
            };
            inner.augment(epoch, images, w, h, &keys, out)
        });
        drop((src, dst));
        result.map_err(|e| invalid(py, e.to_string()))
    }
}
