//! [`Transform`]: the augmentation config, and the torchvision geometry it
//! stands for, computed as a per-sample [`Plan`].
//!
//! - `Train` = `RandomResizedCrop(size, scale, ratio)` (bilinear, antialias)
//!   + `RandomHorizontalFlip(hflip_p)`.
//! - `Eval` = `Resize(resize)` (shorter side to `resize`, aspect kept) +
//!   `CenterCrop(crop)`.
//!
//! The arithmetic is torchvision's, line for line, Python's rounding included
//! (`round()` is round-half-to-even, `int()` truncates, `//` floors). Only
//! the random numbers differ: they come from a stream derived from
//! `(seed, epoch, sample index)`, so a sample gets the same crop whichever
//! thread runs it.

use crate::decode::Area;
use crate::rng::{Rng, STREAM_SAMPLE};
use crate::PipelineError;

/// Largest output side accepted.
const MAX_SIDE: u32 = 1 << 14;

/// How each image is turned into a fixed-size output.
#[derive(Debug, Clone, PartialEq)]
pub enum Transform {
    /// torchvision `RandomResizedCrop(size, scale, ratio)` then
    /// `RandomHorizontalFlip(hflip_p)`; output `size` x `size`.
    Train {
        /// Output side in pixels.
        size: u32,
        /// Range of the crop's area as a fraction of the image area.
        scale: (f32, f32),
        /// Range of the crop's aspect ratio (width / height).
        ratio: (f32, f32),
        /// Probability of a horizontal flip.
        hflip_p: f32,
    },
    /// torchvision `Resize(resize)` then `CenterCrop(crop)`; output `crop` x
    /// `crop`.
    Eval {
        /// Target length of the shorter side.
        resize: u32,
        /// Side of the central square crop (at most `resize`).
        crop: u32,
    },
}

impl Transform {
    /// `Train` with torchvision's defaults: `scale = (0.08, 1.0)`,
    /// `ratio = (3/4, 4/3)`, `hflip_p = 0.5`.
    pub fn train(size: u32) -> Transform {
        Transform::Train {
            size,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
            hflip_p: 0.5,
        }
    }

    /// `Eval` with the ImageNet convention: `Resize(256)` + `CenterCrop(224)`.
    pub fn eval() -> Transform {
        Transform::Eval {
            resize: 256,
            crop: 224,
        }
    }

    /// Checks the parameters.
    ///
    /// # Errors
    /// [`PipelineError::InvalidConfig`] naming the bad value.
    pub fn validate(&self) -> Result<(), PipelineError> {
        let bad = |m: String| Err(PipelineError::InvalidConfig(m));
        match *self {
            Transform::Train {
                size,
                scale,
                ratio,
                hflip_p,
            } => {
                if size == 0 || size > MAX_SIDE {
                    return bad(format!("train size {size} must be in 1..={MAX_SIDE}"));
                }
                if !(scale.0 > 0.0 && scale.0 <= scale.1 && scale.1.is_finite()) {
                    return bad(format!(
                        "train scale {scale:?} must satisfy 0 < min <= max (e.g. (0.08, 1.0))"
                    ));
                }
                if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                    return bad(format!(
                        "train ratio {ratio:?} must satisfy 0 < min <= max (e.g. (0.75, 1.333))"
                    ));
                }
                if !(0.0..=1.0).contains(&hflip_p) {
                    return bad(format!("hflip_p {hflip_p} must be in [0, 1]"));
                }
            }
            Transform::Eval { resize, crop } => {
                if resize == 0 || resize > MAX_SIDE || crop == 0 || crop > resize {
                    return bad(format!(
                        "eval resize {resize} / crop {crop} must satisfy 0 < crop <= resize <= \
                         {MAX_SIDE} (e.g. 256 / 224)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Output `(height, width)` in pixels.
    pub fn output_size(&self) -> (u32, u32) {
        match *self {
            Transform::Train { size, .. } => (size, size),
            Transform::Eval { crop, .. } => (crop, crop),
        }
    }

    /// What this transform does to sample `index` of `epoch`, an image of
    /// `width` x `height`, under `seed`. Pure and reproducible.
    pub fn plan(&self, width: u32, height: u32, seed: u64, epoch: u64, index: u64) -> Plan {
        match *self {
            Transform::Train {
                size,
                scale,
                ratio,
                hflip_p,
            } => {
                let mut rng = Rng::derive(&[STREAM_SAMPLE, seed, epoch, index]);
                let crop = random_resized_crop_params(width, height, scale, ratio, &mut rng);
                let flip = rng.next_f64() < f64::from(hflip_p);
                Plan {
                    region: Region::Crop(crop),
                    out_width: size,
                    out_height: size,
                    flip,
                }
            }
            Transform::Eval { resize, crop } => {
                let (rw, rh) = resize_output_size(width, height, resize);
                let (top, left) = center_crop_offsets(rw, rh, crop, crop);
                let region = if (rw, rh) == (width, height) {
                    Region::Crop(CropBox {
                        top,
                        left,
                        height: crop,
                        width: crop,
                    })
                } else {
                    // The crop of the resized image, expressed in source
                    // coordinates: resampling this window with the scale of
                    // the full resize gives exactly those output pixels.
                    // (Clamped: rounding must not push it past the edge.)
                    let (w, h) = (f64::from(width), f64::from(height));
                    let (sx, sy) = (w / f64::from(rw), h / f64::from(rh));
                    let (left, top) = (f64::from(left) * sx, f64::from(top) * sy);
                    Region::Window {
                        left,
                        top,
                        width: (f64::from(crop) * sx).min(w - left),
                        height: (f64::from(crop) * sy).min(h - top),
                    }
                };
                Plan {
                    region,
                    out_width: crop,
                    out_height: crop,
                    flip: false,
                }
            }
        }
    }
}

/// An integer rectangle of the source image (torchvision's `i, j, h, w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropBox {
    /// First row (`i`).
    pub top: u32,
    /// First column (`j`).
    pub left: u32,
    /// Rows (`h`).
    pub height: u32,
    /// Columns (`w`).
    pub width: u32,
}

/// The part of the source image that is resampled to the output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Region {
    /// Cut this rectangle out, then resize it on its own (pixels outside do
    /// not contribute), as `F.resized_crop` does.
    Crop(CropBox),
    /// Resample this window of the whole image, pixels outside it
    /// contributing at the edges, as a crop taken after a full resize.
    Window {
        /// Left edge, in source pixels.
        left: f64,
        /// Top edge, in source pixels.
        top: f64,
        /// Width, in source pixels.
        width: f64,
        /// Height, in source pixels.
        height: f64,
    },
}

/// One sample's geometry: resample `region` to `out_width` x `out_height`
/// (bilinear with antialiasing), then mirror left-right if `flip`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// Source region.
    pub region: Region,
    /// Output width.
    pub out_width: u32,
    /// Output height.
    pub out_height: u32,
    /// Mirror horizontally after resampling.
    pub flip: bool,
}

impl Plan {
    /// The part of a `width` x `height` source image that resampling
    /// reads: the crop, or the window widened by the bilinear filter's
    /// reach on each side (its pixels outside the window contribute at the
    /// edges) and one pixel more.
    pub(crate) fn source_area(&self, width: u32, height: u32) -> Area {
        match self.region {
            Region::Crop(c) => Area {
                rows: c.top..c.top.saturating_add(c.height).min(height),
                cols: c.left..c.left.saturating_add(c.width).min(width),
                scale: 8,
            },
            Region::Window {
                left,
                top,
                width: w,
                height: h,
            } => Area {
                rows: reach(top, h, self.out_height, height),
                cols: reach(left, w, self.out_width, width),
                scale: 8,
            },
        }
    }
}

/// The source pixels `[start, start + len)` resampled to `out` pixels
/// read, of `size`: fast_image_resize's bounds (filter radius 1 for
/// bilinear, times the scale when it is over 1) and one pixel more.
fn reach(start: f64, len: f64, out: u32, size: u32) -> std::ops::Range<u32> {
    let radius = (len / f64::from(out.max(1))).max(1.0);
    let first = (start - radius).floor() - 1.0;
    let end = (start + len + radius).ceil() + 1.0;
    let clamp = |x: f64| x.clamp(0.0, f64::from(size)) as u32;
    clamp(first)..clamp(end)
}

/// Python's `int(round(x))` (round half to even) for non-negative `x`.
fn py_round(x: f64) -> i64 {
    x.round_ties_even() as i64
}

/// torchvision `RandomResizedCrop.get_params`: ten tries at a crop of random
/// area (fraction `scale` of the image) and log-uniform aspect `ratio`, then
/// the central crop clamped to the ratio range.
pub(crate) fn random_resized_crop_params(
    width: u32,
    height: u32,
    scale: (f32, f32),
    ratio: (f32, f32),
    rng: &mut Rng,
) -> CropBox {
    let (w_img, h_img) = (i64::from(width), i64::from(height));
    let area = (w_img * h_img) as f64;
    let log_ratio = (f64::from(ratio.0).ln(), f64::from(ratio.1).ln());
    for _ in 0..10 {
        let target_area = area * rng.uniform(f64::from(scale.0), f64::from(scale.1));
        let aspect = rng.uniform(log_ratio.0, log_ratio.1).exp();
        let w = py_round((target_area * aspect).sqrt());
        let h = py_round((target_area / aspect).sqrt());
        if 0 < w && w <= w_img && 0 < h && h <= h_img {
            let top = rng.below((h_img - h + 1) as u64) as u32;
            let left = rng.below((w_img - w + 1) as u64) as u32;
            return CropBox {
                top,
                left,
                height: h as u32,
                width: w as u32,
            };
        }
    }
    // Fallback to central crop.
    let in_ratio = w_img as f64 / h_img as f64;
    let (lo, hi) = (
        f64::from(ratio.0.min(ratio.1)),
        f64::from(ratio.0.max(ratio.1)),
    );
    let (w, h) = if in_ratio < lo {
        (w_img, py_round(w_img as f64 / lo).clamp(1, h_img))
    } else if in_ratio > hi {
        (py_round(h_img as f64 * hi).clamp(1, w_img), h_img)
    } else {
        (w_img, h_img)
    };
    CropBox {
        top: ((h_img - h) / 2) as u32,
        left: ((w_img - w) / 2) as u32,
        height: h as u32,
        width: w as u32,
    }
}

/// torchvision `Resize(size)` with an int: the shorter side becomes `size`,
/// the longer `int(size * long / short)`. Returns `(width, height)`.
pub fn resize_output_size(width: u32, height: u32, size: u32) -> (u32, u32) {
    let (short, long) = if width <= height {
        (width, height)
    } else {
        (height, width)
    };
    let short = short.max(1);
    let new_long = ((u64::from(size) * u64::from(long)) as f64 / f64::from(short)) as u32;
    if width <= height {
        (size, new_long)
    } else {
        (new_long, size)
    }
}

/// torchvision `CenterCrop` offsets `(top, left)`:
/// `int(round((h - crop_h) / 2.0))`, likewise for the width. The crop must
/// fit (`crop_w <= width`, `crop_h <= height`); larger crops give 0.
pub fn center_crop_offsets(width: u32, height: u32, crop_w: u32, crop_h: u32) -> (u32, u32) {
    let off = |full: u32, crop: u32| py_round(f64::from(full.saturating_sub(crop)) / 2.0) as u32;
    (off(height, crop_h), off(width, crop_w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_rounding_is_half_to_even() {
        assert_eq!(py_round(0.5), 0);
        assert_eq!(py_round(1.5), 2);
        assert_eq!(py_round(2.5), 2);
        assert_eq!(py_round(2.6), 3);
    }

    #[test]
    fn resize_keeps_aspect_and_truncates() {
        assert_eq!(resize_output_size(500, 375, 256), (341, 256)); // 256*500/375 = 341.33
        assert_eq!(resize_output_size(375, 500, 256), (256, 341));
        assert_eq!(resize_output_size(300, 300, 256), (256, 256));
        assert_eq!(resize_output_size(257, 1000, 256), (256, 996)); // 996.10
    }

    #[test]
    fn center_crop_rounds_like_python() {
        // (341 - 224) / 2 = 58.5 -> 58 ; (256 - 224) / 2 = 16
        assert_eq!(center_crop_offsets(341, 256, 224, 224), (16, 58));
        // (227 - 224) / 2 = 1.5 -> 2
        assert_eq!(center_crop_offsets(227, 224, 224, 224), (0, 2));
    }

    #[test]
    fn fallback_is_central_and_clamped_to_ratio() {
        // scale > 1 can never fit: always the fallback.
        let mut rng = Rng::derive(&[1]);
        let wide = random_resized_crop_params(1000, 100, (2.0, 3.0), (0.75, 4.0 / 3.0), &mut rng);
        assert_eq!(
            wide,
            CropBox {
                top: 0,
                left: 433,
                height: 100,
                width: 133
            }
        );
        let tall = random_resized_crop_params(100, 1000, (2.0, 3.0), (0.75, 4.0 / 3.0), &mut rng);
        assert_eq!(
            tall,
            CropBox {
                top: 433,
                left: 0,
                height: 133,
                width: 100
            }
        );
        let square = random_resized_crop_params(90, 100, (2.0, 3.0), (0.75, 4.0 / 3.0), &mut rng);
        assert_eq!(
            square,
            CropBox {
                top: 0,
                left: 0,
                height: 100,
                width: 90
            }
        );
    }

    #[test]
    fn eval_windows_stay_inside_the_image() {
        for resize in [224, 256] {
            let t = Transform::Eval { resize, crop: 224 };
            for w in (1..700).step_by(7) {
                for h in (1..700).step_by(11) {
                    match t.plan(w, h, 0, 0, 0).region {
                        Region::Window {
                            left,
                            top,
                            width,
                            height,
                        } => {
                            assert!(left >= 0.0 && left + width <= f64::from(w), "{w}x{h}");
                            assert!(top >= 0.0 && top + height <= f64::from(h), "{w}x{h}");
                        }
                        Region::Crop(c) => {
                            assert_eq!(w.min(h), resize, "{w}x{h}");
                            assert!(c.left + c.width <= w && c.top + c.height <= h);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn validation_names_the_bad_value() {
        assert!(Transform::train(224).validate().is_ok());
        assert!(Transform::eval().validate().is_ok());
        let e = Transform::Eval {
            resize: 200,
            crop: 224,
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("224"), "{e}");
        let mut t = Transform::train(224);
        if let Transform::Train { hflip_p, .. } = &mut t {
            *hflip_p = 1.5;
        }
        assert!(t.validate().is_err());
        assert!(Transform::train(0).validate().is_err());
    }
}
