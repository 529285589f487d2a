//! torchvision's colour adjustments of a `uint8` tensor image
//! (`torchvision.transforms._functional_tensor`), on an RGB8 HWC buffer.
//!
//! The arithmetic is torch's, in `f32` as torch computes it: a Python
//! float meeting a `float32` tensor is rounded to `f32` first, and every
//! result goes back to `uint8` by clamping to [0, 255] and truncating.
//! - `_blend(a, b, r)` = `r * a + (1 - r) * b`, where `1 - r` is computed
//!   in `f64` (Python) before the rounding;
//! - `rgb_to_grayscale` = `0.2989 r + 0.587 g + 0.114 b`, truncated;
//! - `adjust_contrast` blends with the mean of the grayscale image;
//! - `adjust_hue` is in [`super::hue`].

use super::lanes::{map_pixels, truncate_u8, Lanes, PixelMap, LANES};

/// `_blend`'s two weights as torch uses them: `ratio` and `1.0 - ratio`
/// (computed in `f64`), each rounded to `f32`.
pub(super) fn weights(ratio: f64) -> (f32, f32) {
    (ratio as f32, (1.0 - ratio) as f32)
}

/// One `_blend` value: `ratio * a + other * b`, clamped and truncated.
#[inline]
pub(super) fn blend(a: u8, b: f32, (ratio, other): (f32, f32)) -> u8 {
    // `as u8` truncates toward zero (and saturates), like `.to(torch.uint8)`
    // on values already clamped to [0, 255].
    (ratio * f32::from(a) + other * b).clamp(0.0, 255.0) as u8
}

/// `rgb_to_grayscale` of one pixel: the weighted sum in `f32`, truncated.
#[inline]
pub(crate) fn gray(px: &[u8]) -> u8 {
    gray_sum(f32::from(px[0]), f32::from(px[1]), f32::from(px[2])) as u8
}

/// `rgb_to_grayscale`'s weighted sum, before truncation.
#[inline(always)]
fn gray_sum(r: f32, g: f32, b: f32) -> f32 {
    0.2989f32 * r + 0.587f32 * g + 0.114f32 * b
}

/// Maps every value through `f`, evaluated once per possible value.
fn map_values(image: &mut [u8], f: impl Fn(u8) -> u8) {
    let lut: [u8; 256] = std::array::from_fn(|v| f(v as u8));
    for v in image.iter_mut() {
        *v = lut[usize::from(*v)];
    }
}

/// `adjust_brightness(img, factor)`: a blend with black.
pub(crate) fn brightness(image: &mut [u8], factor: f64) {
    let w = weights(factor);
    map_values(image, |v| blend(v, 0.0, w));
}

/// `adjust_contrast(img, factor)`: a blend with the mean of the grayscale
/// image (a `float32` mean, as torch takes it).
pub(crate) fn contrast(image: &mut [u8], factor: f64) {
    let pixels = image.len() / 3;
    if pixels == 0 {
        return;
    }
    let sum: u64 = image.chunks_exact(3).map(|px| u64::from(gray(px))).sum();
    // torch sums in f32, which is exact while the sum stays below 2^24
    // (every image up to 256 x 256); the division is in f32.
    let mean = sum as f32 / pixels as f32;
    let w = weights(factor);
    map_values(image, |v| blend(v, mean, w));
}

/// `adjust_saturation(img, factor)`: a blend with the grayscale image.
pub(crate) fn saturation(image: &mut [u8], factor: f64) {
    map_pixels(image, Saturate(weights(factor)));
}

/// [`saturation`] of eight pixels: [`gray`] and [`blend`] in lanes.
struct Saturate((f32, f32));

impl PixelMap for Saturate {
    #[inline(always)]
    fn map(&self, rgb: [Lanes<u8>; 3]) -> [Lanes<u8>; 3] {
        let (ratio, other) = self.0;
        let mut x = [[0f32; LANES]; 3];
        for c in 0..3 {
            for i in 0..LANES {
                x[c][i] = f32::from(rgb[c][i]);
            }
        }
        let mut out = [[0u8; LANES]; 3];
        for i in 0..LANES {
            // gray(): the weighted sum, in [0, 255), truncated.
            let g = f32::from(truncate_u8(gray_sum(x[0][i], x[1][i], x[2][i])));
            for c in 0..3 {
                out[c][i] = truncate_u8((ratio * x[c][i] + other * g).clamp(0.0, 255.0));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::noise;

    #[test]
    fn factor_one_and_hue_zero_leave_the_image() {
        let img = noise(300, 1);
        for f in [brightness, contrast, saturation] {
            let mut x = img.clone();
            f(&mut x, 1.0);
            assert_eq!(x, img);
        }
        // Hue 0 round-trips through HSV: torch's own arithmetic loses at
        // most one level there (255.999 is not 256).
        let mut x = img.clone();
        crate::augment::hue::hue(&mut x, 0.0);
        assert!(x.iter().zip(&img).all(|(a, b)| a.abs_diff(*b) <= 1));
    }

    #[test]
    fn known_small_cases() {
        // Grayscale truncates: white is 254 (the weights sum to 0.9999).
        assert_eq!(gray(&[255, 255, 255]), 254);
        assert_eq!(gray(&[100, 0, 0]), 29); // 29.89
        let mut x = vec![100, 200, 255];
        brightness(&mut x, 1.5);
        assert_eq!(x, [150, 255, 255]);
        brightness(&mut x, 0.0);
        assert_eq!(x, [0, 0, 0]);
        // Saturation 0 is the grayscale image in all three channels.
        let mut x = vec![100, 0, 0];
        saturation(&mut x, 0.0);
        assert_eq!(x, [29, 29, 29]);
        // Contrast 0 is the mean gray: (29 + 0) / 2 = 14.5 -> 14.
        let mut x = vec![100, 0, 0, 0, 0, 0];
        contrast(&mut x, 0.0);
        assert_eq!(x, [14; 6]);
        // Half a turn of hue takes red to cyan.
        let mut x = vec![255, 0, 0];
        crate::augment::hue::hue(&mut x, 0.5);
        assert_eq!(x, [0, 255, 255]);
        let mut x = vec![0, 255, 0];
        crate::augment::hue::hue(&mut x, -1.0 / 3.0);
        assert_eq!(x, [255, 0, 0]);
    }

    #[test]
    fn saturation_in_lanes_equals_the_plain_scalar_form() {
        let img = noise(10_000 + 5, 3);
        for factor in [0.0, 0.3, 0.6, 1.0, 1.4, 2.5, 7.0] {
            let w = weights(factor);
            let mut want = img.clone();
            for px in want.chunks_exact_mut(3) {
                let g = f32::from(gray(px));
                for v in px.iter_mut() {
                    *v = blend(*v, g, w);
                }
            }
            let mut got = img.clone();
            saturation(&mut got, factor);
            assert_eq!(got, want, "factor {factor}");
            let mut portable = img.clone();
            crate::augment::lanes::map_portable(&mut portable, Saturate(w));
            assert_eq!(portable, want, "factor {factor}");
        }
    }
}
