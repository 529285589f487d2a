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
//! - `adjust_hue` goes through `_rgb2hsv` / `_hsv2rgb` in `f32` on
//!   `x / 255` and back with `* 255.999`, truncated (`convert_image_dtype`).

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
    (0.2989f32 * f32::from(px[0]) + 0.587f32 * f32::from(px[1]) + 0.114f32 * f32::from(px[2])) as u8
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
    let w = weights(factor);
    for px in image.chunks_exact_mut(3) {
        let g = f32::from(gray(px));
        for v in px.iter_mut() {
            *v = blend(*v, g, w);
        }
    }
}

/// `adjust_hue(img, factor)`, `factor` in [-0.5, 0.5]: the hue shifted by
/// `factor` turns.
pub(crate) fn hue(image: &mut [u8], factor: f64) {
    let shift = factor as f32;
    // `x / 255` of every uint8 value, the same f32 division, done once.
    let unit: [f32; 256] = std::array::from_fn(|v| v as f32 / 255.0);
    for px in image.chunks_exact_mut(3) {
        let rgb = [0, 1, 2].map(|c| unit[usize::from(px[c])]);
        let [h, s, v] = rgb_to_hsv(rgb);
        let h = rem_one(h + shift);
        let out = hsv_to_rgb([h, s, v]);
        for (dst, x) in px.iter_mut().zip(out) {
            // convert_image_dtype(float -> uint8): `x * 255.999`, truncated.
            *dst = (x * 255.999f32) as u8;
        }
    }
}

/// torch's `x % 1.0` on floats (`fmod`, moved into [0, 1) when negative)
/// for `x` in (-1, 2), without a libm call: `x - 1` is exact for x in
/// [1, 2) (Sterbenz), which is what `fmod` returns; a negative `x` is
/// its own `fmod`, plus 1 (rounded, as torch adds it).
fn rem_one(x: f32) -> f32 {
    if x >= 1.0 {
        x - 1.0
    } else if x < 0.0 {
        x + 1.0
    } else {
        x
    }
}

/// `_rgb2hsv`, term for term (it follows Pillow's `rgb2hsv`).
fn rgb_to_hsv([r, g, b]: [f32; 3]) -> [f32; 3] {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let eqc = maxc == minc;
    let cr = maxc - minc;
    let s = cr / if eqc { 1.0 } else { maxc };
    let div = if eqc { 1.0 } else { cr };
    let rc = (maxc - r) / div;
    let gc = (maxc - g) / div;
    let bc = (maxc - b) / div;
    let hr = if maxc == r { bc - gc } else { 0.0 };
    let hg = if maxc == g && maxc != r {
        2.0 + rc - bc
    } else {
        0.0
    };
    let hb = if maxc != g && maxc != r {
        4.0 + gc - rc
    } else {
        0.0
    };
    let h = hr + hg + hb;
    // torch.fmod(h / 6 + 1, 1) of a value in (5/6, 2).
    let h = rem_one(h / 6.0 + 1.0);
    [h, s, maxc]
}

/// `_hsv2rgb`, term for term.
fn hsv_to_rgb([h, s, v]: [f32; 3]) -> [f32; 3] {
    // floor(h * 6) for h in [0, 1]: truncation, without a libm call.
    let i = ((h * 6.0) as i32) as f32;
    let f = h * 6.0 - i;
    let p = (v * (1.0 - s)).clamp(0.0, 1.0);
    let q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
    let t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0);
    match (i as i32).rem_euclid(6) {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
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
        hue(&mut x, 0.0);
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
        hue(&mut x, 0.5);
        assert_eq!(x, [0, 255, 255]);
        let mut x = vec![0, 255, 0];
        hue(&mut x, -1.0 / 3.0);
        assert_eq!(x, [255, 0, 0]);
    }

    #[test]
    fn rem_one_is_fmod_moved_into_the_unit_interval() {
        let mut r = crate::rng::Rng::derive(&[9]);
        for _ in 0..10_000 {
            let x = r.uniform(-0.99, 1.99) as f32;
            let m = x % 1.0;
            let want = if m < 0.0 { m + 1.0 } else { m };
            assert_eq!(rem_one(x).to_bits(), want.to_bits(), "{x}");
        }
        for x in [0.0f32, -0.0, 1.0, 0.5, -0.5, 1.5, 1.0 - f32::EPSILON / 2.0] {
            let m = x % 1.0;
            let want = if m < 0.0 { m + 1.0 } else { m };
            assert_eq!(rem_one(x).to_bits(), want.to_bits(), "{x}");
        }
    }

    #[test]
    fn hsv_round_trips() {
        for px in noise(500, 2).chunks_exact(3) {
            let rgb = [0, 1, 2].map(|c| f32::from(px[c]) / 255.0);
            let back = hsv_to_rgb(rgb_to_hsv(rgb));
            for (a, b) in rgb.iter().zip(back) {
                assert!((a - b).abs() < 1e-5, "{px:?}");
            }
        }
    }
}
