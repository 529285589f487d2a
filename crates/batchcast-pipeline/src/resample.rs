//! Applying a [`Plan`] to a decoded image: crop, bilinear resampling with
//! antialiasing (fast_image_resize's `Convolution(Bilinear)`, the same
//! separable filter as PIL's `resize(BILINEAR)` and torch's
//! `interpolate(..., antialias=True)`), and the horizontal flip.

use fast_image_resize::images::{CroppedImage, Image, ImageRef};
use fast_image_resize::{
    CropBoxError, FilterType, ImageBufferError, PixelType, ResizeAlg, ResizeError, ResizeOptions,
    Resizer,
};

use crate::decode::RgbImage;
use crate::transform::{CropBox, Plan, Region};

/// Why a plan could not be applied: a buffer or crop that does not fit the
/// image (a bug in the plan or the caller's sizes, not bad data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResampleError {
    #[error("decoded image buffer: {0}")]
    Source(ImageBufferError),
    #[error("output buffer: {0}")]
    Output(ImageBufferError),
    #[error("crop {crop:?} of a {width}x{height} image: {source}")]
    Crop {
        crop: CropBox,
        width: u32,
        height: u32,
        source: CropBoxError,
    },
    #[error("resize: {0}")]
    Resize(ResizeError),
    #[error("crop {w}x{h}+{left}+{top} outside the image")]
    CopyOutside {
        w: usize,
        h: usize,
        left: usize,
        top: usize,
    },
}

/// A decoded RGB8 HWC image, borrowed: one the pipeline decoded, or one row
/// of a decoded batch in shared memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ImageView<'a> {
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// `width * height * 3` bytes.
    pub(crate) data: &'a [u8],
}

impl RgbImage {
    pub(crate) fn view(&self) -> ImageView<'_> {
        ImageView {
            width: self.width,
            height: self.height,
            data: &self.data,
        }
    }
}

/// Writes `plan` applied to `src` into `dst`, an RGB8 HWC buffer of exactly
/// `plan.out_width * plan.out_height * 3` bytes.
pub(crate) fn apply(
    plan: &Plan,
    src: ImageView<'_>,
    resizer: &mut Resizer,
    dst: &mut [u8],
) -> Result<(), ResampleError> {
    resample(plan, src, resizer, dst)?;
    if plan.flip {
        hflip(dst, plan.out_width as usize);
    }
    Ok(())
}

/// [`apply`] but for the flip, which the caller does (the output writer
/// mirrors as it writes).
pub(crate) fn resample(
    plan: &Plan,
    src: ImageView<'_>,
    resizer: &mut Resizer,
    dst: &mut [u8],
) -> Result<(), ResampleError> {
    let (ow, oh) = (plan.out_width, plan.out_height);
    let src_view = ImageRef::new(src.width, src.height, src.data, PixelType::U8x3)
        .map_err(ResampleError::Source)?;
    let bilinear = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    match plan.region {
        Region::Crop(c) if c.width == ow && c.height == oh => {
            // Same size: torchvision returns the crop unchanged.
            copy_rect(src, c.left, c.top, ow, oh, dst)?;
        }
        Region::Crop(c) => {
            let view = CroppedImage::new(&src_view, c.left, c.top, c.width, c.height).map_err(
                |source| ResampleError::Crop {
                    crop: c,
                    width: src.width,
                    height: src.height,
                    source,
                },
            )?;
            let mut out = Image::from_slice_u8(ow, oh, dst, PixelType::U8x3)
                .map_err(ResampleError::Output)?;
            resizer
                .resize(&view, &mut out, &bilinear)
                .map_err(ResampleError::Resize)?;
        }
        Region::Window {
            left,
            top,
            width,
            height,
        } => {
            let mut out = Image::from_slice_u8(ow, oh, dst, PixelType::U8x3)
                .map_err(ResampleError::Output)?;
            let options = bilinear.crop(left, top, width, height);
            resizer
                .resize(&src_view, &mut out, &options)
                .map_err(ResampleError::Resize)?;
        }
    }
    Ok(())
}

/// Copies a `w` x `h` rectangle at `(left, top)` of `src` into `dst`.
fn copy_rect(
    src: ImageView<'_>,
    left: u32,
    top: u32,
    w: u32,
    h: u32,
    dst: &mut [u8],
) -> Result<(), ResampleError> {
    let (sw, left, top, w, h) = (
        src.width as usize,
        left as usize,
        top as usize,
        w as usize,
        h as usize,
    );
    if left + w > sw || top + h > src.height as usize || dst.len() < w * h * 3 {
        return Err(ResampleError::CopyOutside { w, h, left, top });
    }
    for (y, row) in dst.chunks_exact_mut(w * 3).take(h).enumerate() {
        let start = ((top + y) * sw + left) * 3;
        row.copy_from_slice(&src.data[start..start + w * 3]);
    }
    Ok(())
}

/// Mirrors an RGB8 HWC image of `width` pixels per row left-right, in place.
pub(crate) fn hflip(image: &mut [u8], width: usize) {
    if width < 2 {
        return;
    }
    for row in image.chunks_exact_mut(width * 3) {
        // The left half against the right half read backwards (the middle
        // pixel of an odd row stays).
        let (left, right) = row.split_at_mut(width / 2 * 3);
        let right = &mut right[width % 2 * 3..];
        for (a, b) in left
            .chunks_exact_mut(3)
            .zip(right.chunks_exact_mut(3).rev())
        {
            let t = [a[0], a[1], a[2]];
            a.copy_from_slice(b);
            b.copy_from_slice(&t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::{CropBox, Transform};

    fn ramp(w: u32, h: u32) -> RgbImage {
        let mut data = Vec::new();
        for y in 0..h {
            for x in 0..w {
                data.extend_from_slice(&[x as u8, y as u8, 7]);
            }
        }
        RgbImage {
            width: w,
            height: h,
            data,
        }
    }

    #[test]
    fn flip_mirrors_each_row() {
        let mut img = vec![1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6];
        hflip(&mut img, 3);
        assert_eq!(img, [3, 3, 3, 2, 2, 2, 1, 1, 1, 6, 6, 6, 5, 5, 5, 4, 4, 4]);
        let mut even = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        hflip(&mut even, 2);
        assert_eq!(even, [4, 5, 6, 1, 2, 3, 10, 11, 12, 7, 8, 9]);
        let mut one = vec![1, 2, 3, 4, 5, 6];
        hflip(&mut one, 1);
        assert_eq!(one, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn same_size_crop_is_a_plain_copy() {
        let src = ramp(10, 8);
        let plan = Plan {
            region: Region::Crop(CropBox {
                top: 2,
                left: 3,
                height: 4,
                width: 5,
            }),
            out_width: 5,
            out_height: 4,
            flip: false,
        };
        let mut dst = vec![0u8; 5 * 4 * 3];
        apply(&plan, src.view(), &mut Resizer::new(), &mut dst).unwrap();
        assert_eq!(&dst[..3], &[3, 2, 7]);
        assert_eq!(&dst[dst.len() - 3..], &[7, 5, 7]);
    }

    #[test]
    fn crop_resize_ignores_pixels_outside_the_crop() {
        // Left half black, right half white; a crop of the right half only
        // must come out pure white even at its left edge.
        let (w, h) = (16u32, 8u32);
        let mut data = Vec::new();
        for _ in 0..h {
            for x in 0..w {
                let v = if x < 8 { 0 } else { 255 };
                data.extend_from_slice(&[v, v, v]);
            }
        }
        let src = RgbImage {
            width: w,
            height: h,
            data,
        };
        let plan = Plan {
            region: Region::Crop(CropBox {
                top: 0,
                left: 8,
                height: 8,
                width: 8,
            }),
            out_width: 3,
            out_height: 3,
            flip: false,
        };
        let mut dst = vec![0u8; 27];
        apply(&plan, src.view(), &mut Resizer::new(), &mut dst).unwrap();
        assert!(dst.iter().all(|&v| v == 255), "{dst:?}");
    }
    /// `src` with every pixel outside `plan.source_area` set to `junk`.
    fn outside_spoilt(plan: &Plan, src: &RgbImage, junk: u8) -> RgbImage {
        let area = plan.source_area(src.width, src.height);
        let mut out = src.clone();
        for (y, row) in out
            .data
            .chunks_exact_mut(src.width as usize * 3)
            .enumerate()
        {
            for (x, px) in row.chunks_exact_mut(3).enumerate() {
                if !area.rows.contains(&(y as u32)) || !area.cols.contains(&(x as u32)) {
                    px.fill(junk);
                }
            }
        }
        out
    }

    #[test]
    fn resampling_reads_nothing_outside_the_plans_source_area() {
        let transforms = [
            Transform::Eval {
                resize: 256,
                crop: 256,
            },
            Transform::Eval {
                resize: 256,
                crop: 224,
            },
            Transform::Eval {
                resize: 37,
                crop: 30,
            },
            Transform::Eval {
                resize: 600,
                crop: 500,
            },
            Transform::train(64),
        ];
        let mut resizer = Resizer::new();
        for (w, h) in [
            (500, 375),
            (375, 500),
            (333, 257),
            (256, 300),
            (90, 61),
            (41, 97),
        ] {
            let src = RgbImage {
                width: w,
                height: h,
                data: crate::augment::noise((w * h) as usize, u64::from(w * h)),
            };
            for t in &transforms {
                for index in 0..4 {
                    let plan = t.plan(w, h, 3, 0, index);
                    let bytes = (plan.out_width * plan.out_height * 3) as usize;
                    let mut want = vec![0u8; bytes];
                    apply(&plan, src.view(), &mut resizer, &mut want).unwrap();
                    for junk in [0, 255] {
                        let spoilt = outside_spoilt(&plan, &src, junk);
                        let mut got = vec![0u8; bytes];
                        apply(&plan, spoilt.view(), &mut resizer, &mut got).unwrap();
                        assert!(got == want, "{t:?} of {w}x{h}, sample {index}");
                    }
                }
            }
        }
    }
}
