//! `_native.store_image`: one decoded image as `batchcast serve --decode-only
//! --store-size S` stores it (the shorter side resized to `S` with the
//! pipeline's antialiased resampler, the centre `S` x `S` cropped, RGB8
//! HWC), for a decoded stream built from a Python dataset
//! (`batchcast.DecodedImages`).
//!
//! It is the native pipeline's own work, `Transform::Eval { resize: S,
//! crop: S }` run by its [`Augmenter`] on one image, so the bytes are those
//! the CLI publishes for the same decoded pixels. Arrays come in through
//! DLPack (NumPy arrays, torch tensors); the work runs with the GIL
//! released.

use std::cell::RefCell;

use batchcast_pipeline::{
    Augmenter, DType, Layout, OutputFormat, PipelineError, Transform, DEFAULT_MAX_PIXELS,
};
use pyo3::prelude::*;

use crate::dlpack::{import, Imported};
use crate::errors::invalid;

/// The largest stored side (as `RandomResizedCrop`'s largest output).
const MAX_SIZE: u32 = 16384;

thread_local! {
    /// The last augmenter this thread used, with the process and stored
    /// side it was made for: a DataLoader calls once per image, and an
    /// augmenter starts a thread. A forked child (a DataLoader worker)
    /// inherits it without that thread, so it is only reused by the process
    /// that made it.
    static CACHED: RefCell<Option<(u32, u32, Augmenter)>> = const { RefCell::new(None) };
}

/// Why a checked image could not be stored; raised as `InvalidArgument`.
#[derive(Debug)]
enum StoreImageError {
    /// `store_image` was called again from inside itself on this thread.
    Reentered,
    /// The pipeline refused the augmenter or the image.
    Pipeline(PipelineError),
}

impl From<PipelineError> for StoreImageError {
    fn from(e: PipelineError) -> Self {
        StoreImageError::Pipeline(e)
    }
}

impl std::fmt::Display for StoreImageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreImageError::Reentered => f.write_str("store_image re-entered"),
            StoreImageError::Pipeline(e) => e.fmt(f),
        }
    }
}

/// Runs `f` with this thread's augmenter for side `size`, made if needed.
fn with_augmenter<R>(
    size: u32,
    f: impl FnOnce(&Augmenter) -> Result<R, PipelineError>,
) -> Result<R, StoreImageError> {
    CACHED.with(|cell| {
        let mut cached = cell
            .try_borrow_mut()
            .map_err(|_| StoreImageError::Reentered)?;
        let pid = std::process::id();
        let augmenter = match &mut *cached {
            Some((p, s, augmenter)) if *p == pid && *s == size => augmenter,
            slot => {
                if let Some((p, _, old)) = slot.take() {
                    if p != pid {
                        // Made by the parent: its thread does not exist
                        // here, so it is left alone rather than dropped.
                        std::mem::forget(old);
                    }
                }
                let transform = Transform::Eval {
                    resize: size,
                    crop: size,
                };
                let output = OutputFormat {
                    layout: Layout::Nhwc,
                    dtype: DType::U8,
                };
                let augmenter = Augmenter::new(transform, output, 1)?;
                &mut slot.insert((pid, size, augmenter)).2
            }
        };
        Ok(f(augmenter)?)
    })
}

/// Writes `image` (`uint8` `(height, width, 3)`, RGB) into `out` (`uint8`
/// `(size, size, 3)`) as `batchcast serve --decode-only --store-size size`
/// stores a decoded image: the shorter side resized to `size` (antialiased
/// bilinear, as torchvision's `Resize`), then the centre square cropped.
#[pyfunction]
pub(crate) fn store_image(
    py: Python<'_>,
    image: &Bound<'_, PyAny>,
    size: u32,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if !(1..=MAX_SIZE).contains(&size) {
        return Err(invalid(
            py,
            format!("size must be in 1..={MAX_SIZE}, not {size}"),
        ));
    }
    let src = import(image, "image")?;
    let dst = import(out, "out")?;
    let (w, h) = image_size(py, &src)?;
    check_out(py, &src, &dst, size)?;
    let (src_addr, src_len, dst_addr, dst_len) = (src.addr, src.nbytes, dst.addr, dst.nbytes);
    let result = py.detach(move || {
        // SAFETY: both capsules (held in `src` and `dst` for this whole
        // call) keep their arrays alive and unmoved; `import` checked that
        // each is a C-contiguous CPU array of exactly these many bytes, and
        // they do not overlap. `out` is the array the Python side made for
        // this call, so nothing else writes it meanwhile.
        let (pixels, out) = unsafe {
            (
                std::slice::from_raw_parts(src_addr as *const u8, src_len),
                std::slice::from_raw_parts_mut(dst_addr as *mut u8, dst_len),
            )
        };
        with_augmenter(size, |a| a.augment(0, pixels, w, h, &[0], out))
    });
    drop((src, dst));
    result.map_err(|e| invalid(py, e.to_string()))
}

/// The width and height of `src`, once it is a `uint8` RGB image
/// `(height, width, 3)` within the pixel budget.
fn image_size(py: Python<'_>, src: &Imported<'_>) -> PyResult<(u32, u32)> {
    if src.dtype != batchcast::DType::U8 {
        return Err(invalid(
            py,
            format!(
                "image must be uint8 (0..255 RGB), not {}; convert it first \
                 (a float tensor in [0, 1]: (x * 255).round().to(torch.uint8))",
                src.dtype.name()
            ),
        ));
    }
    let (h, w) = match src.shape.as_slice() {
        [h, w, 3] => (*h, *w),
        [_, _, c] => {
            return Err(invalid(
                py,
                format!(
                    "image has {c} channels; a stored image is RGB (3): convert it first \
                     (PIL: .convert(\"RGB\"))"
                ),
            ))
        }
        other => {
            return Err(invalid(
                py,
                format!("image must be (height, width, 3), not of shape {other:?}"),
            ))
        }
    };
    if h == 0 || w == 0 {
        return Err(invalid(py, format!("image is empty ({w}x{h} pixels)")));
    }
    if h.saturating_mul(w) > DEFAULT_MAX_PIXELS {
        return Err(invalid(
            py,
            format!(
                "image of {w}x{h} pixels is over the pixel budget of {DEFAULT_MAX_PIXELS} \
                 (PIL's Image.MAX_IMAGE_PIXELS, as `batchcast serve` uses)"
            ),
        ));
    }
    // Within the budget, each side fits a u32.
    Ok((
        u32::try_from(w).map_err(|_| invalid(py, "image too wide".into()))?,
        u32::try_from(h).map_err(|_| invalid(py, "image too tall".into()))?,
    ))
}

/// `dst` is a `uint8` `(size, size, 3)` array that does not overlap `src`.
fn check_out(py: Python<'_>, src: &Imported<'_>, dst: &Imported<'_>, size: u32) -> PyResult<()> {
    let side = size as u64;
    if dst.dtype != batchcast::DType::U8 || dst.shape != [side, side, 3] {
        return Err(invalid(
            py,
            format!(
                "out must be uint8 of shape ({size}, {size}, 3), not {} {:?}",
                dst.dtype.name(),
                dst.shape
            ),
        ));
    }
    if src.addr < dst.addr.saturating_add(dst.nbytes)
        && dst.addr < src.addr.saturating_add(src.nbytes)
    {
        return Err(invalid(py, "out overlaps image; give a new array".into()));
    }
    Ok(())
}
