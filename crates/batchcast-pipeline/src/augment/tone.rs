//! torchvision's tone and histogram ops of a `uint8` tensor image
//! (`posterize`, `solarize`, `autocontrast`, `equalize`,
//! `adjust_sharpness`), on an RGB8 HWC buffer, with torch's arithmetic.

use super::colour::{blend, weights};
use super::round_half_even;

/// `posterize(img, bits)`: keeps the `bits` high bits of every value
/// (`img & -(2 ** (8 - bits))` on `uint8`; 0 bits is black, 8 the image).
pub(crate) fn posterize(image: &mut [u8], bits: u8) {
    let mask = (0xffu32 << (8 - u32::from(bits.min(8)))) as u8;
    for v in image.iter_mut() {
        *v &= mask;
    }
}

/// `solarize(img, threshold)`: inverts values `>= threshold` (compared in
/// `f32`, as torch promotes the `uint8` image against a Python float).
pub(crate) fn solarize(image: &mut [u8], threshold: f64) {
    let t = threshold as f32;
    for v in image.iter_mut() {
        if f32::from(*v) >= t {
            *v = 255 - *v;
        }
    }
}

/// `autocontrast(img)`: per channel, `(x - min) * (255 / (max - min))` in
/// `f32`, clamped and truncated; a flat channel is left alone. torch
/// computes `255 / t` as `t.reciprocal() * 255` (`Tensor.__rtruediv__`),
/// which rounds twice: `109 * (255 / 109)` is 254.99998, not 255.00002.
pub(crate) fn autocontrast(image: &mut [u8]) {
    for c in 0..3 {
        let channel = image.iter().skip(c).step_by(3);
        let (lo, hi) = channel.fold((u8::MAX, u8::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        if lo >= hi {
            continue; // scale = 255 / 0 is not finite: min 0, scale 1.
        }
        let (min, scale) = (
            f32::from(lo),
            (1.0 / (f32::from(hi) - f32::from(lo))) * 255.0,
        );
        for v in image.iter_mut().skip(c).step_by(3) {
            *v = ((f32::from(*v) - min) * scale).clamp(0.0, 255.0) as u8;
        }
    }
}

/// `equalize(img)`: per channel, torchvision's `_scale_channel` histogram
/// lookup table (integer arithmetic, exact).
pub(crate) fn equalize(image: &mut [u8]) {
    for c in 0..3 {
        let mut hist = [0i64; 256];
        for &v in image.iter().skip(c).step_by(3) {
            hist[usize::from(v)] += 1;
        }
        // The sum of the nonzero bins but the last, over 255.
        let last = hist.iter().rposition(|&n| n != 0).unwrap_or(0);
        let step = (hist.iter().sum::<i64>() - hist[last]) / 255;
        if step == 0 {
            continue;
        }
        let mut lut = [0u8; 256];
        let mut cum = 0i64;
        for (i, &n) in hist.iter().enumerate() {
            // lut[i] = (cumsum[i - 1] + step // 2) // step, lut[0] = 0.
            lut[i] = ((cum + step / 2) / step).clamp(0, 255) as u8;
            cum += n;
        }
        lut[0] = 0;
        for v in image.iter_mut().skip(c).step_by(3) {
            *v = lut[usize::from(*v)];
        }
    }
}

/// `adjust_sharpness(img, factor)`: a blend with the image smoothed by
/// torchvision's 3x3 kernel (`[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13`,
/// rounded half to even), whose one-pixel border is the image's own.
/// Images of 2 pixels or fewer across are returned unchanged.
pub(crate) fn sharpness(
    image: &mut [u8],
    width: usize,
    height: usize,
    factor: f64,
    blurred: &mut Vec<u8>,
) {
    if width <= 2 || height <= 2 {
        return;
    }
    blurred.clear();
    blurred.extend_from_slice(image);
    let (side, centre) = (1.0f32 / 13.0, 5.0f32 / 13.0);
    let row = width * 3;
    for y in 1..height - 1 {
        let rows = [
            &image[(y - 1) * row..y * row],
            &image[y * row..(y + 1) * row],
            &image[(y + 1) * row..(y + 2) * row],
        ];
        let out = &mut blurred[y * row..(y + 1) * row];
        for i in 3..row - 3 {
            // The nine taps in row-major order, as torch's convolution
            // accumulates them here (bit-identical in the parity tests).
            let mut acc = 0.0f32;
            for (dy, r) in rows.iter().enumerate() {
                for dx in 0..3 {
                    let k = if dy == 1 && dx == 1 { centre } else { side };
                    acc += k * f32::from(r[i + dx * 3 - 3]);
                }
            }
            out[i] = round_half_even(acc).clamp(0.0, 255.0) as u8;
        }
    }
    let w = weights(factor);
    for (v, &b) in image.iter_mut().zip(blurred.iter()) {
        *v = blend(*v, f32::from(b), w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::noise;

    #[test]
    fn identities() {
        let img = noise(64, 3);
        let mut x = img.clone();
        posterize(&mut x, 8);
        assert_eq!(x, img);
        solarize(&mut x, 256.0);
        assert_eq!(x, img);
        let mut scratch = Vec::new();
        sharpness(&mut x, 8, 8, 1.0, &mut scratch);
        assert_eq!(x, img);
        // A channel already spanning 0..=255 is left by autocontrast.
        let mut full: Vec<u8> = (0..=255u8).flat_map(|v| [v, v, 255 - v]).collect();
        let before = full.clone();
        autocontrast(&mut full);
        assert_eq!(full, before);
    }

    #[test]
    fn known_small_cases() {
        let mut x = vec![0b1011_0111, 255, 3];
        posterize(&mut x, 2);
        assert_eq!(x, [0b1000_0000, 0b1100_0000, 0]);
        posterize(&mut x, 0);
        assert_eq!(x, [0, 0, 0]);
        let mut x = vec![10, 128, 200];
        solarize(&mut x, 128.0);
        assert_eq!(x, [10, 127, 55]);
        // Autocontrast stretches 50..=150 to 0..=255; a flat channel stays.
        let mut x = vec![50, 7, 0, 100, 7, 0, 150, 7, 0];
        autocontrast(&mut x);
        assert_eq!(x, [0, 7, 0, 127, 7, 0, 255, 7, 0]);
        // torch's scale is reciprocal-then-multiply: the top of 145..=254
        // lands on 254.99998, truncated to 254.
        let mut x = vec![145, 0, 0, 254, 0, 0];
        autocontrast(&mut x);
        assert_eq!(x, [0, 0, 0, 254, 0, 0]);
        // Equalize of two equal halves: step = 2 // 255 = 0 leaves it.
        let mut x = vec![10, 10, 10, 20, 20, 20];
        equalize(&mut x);
        assert_eq!(x, [10, 10, 10, 20, 20, 20]);
        // 510 pixels at 0, 510 at 100: step 2, lut[100] = (510 + 1) // 2.
        let mut x: Vec<u8> = (0..1020)
            .flat_map(|i| [if i < 510 { 0 } else { 100 }; 3])
            .collect();
        equalize(&mut x);
        assert_eq!((x[0], x[3 * 1019]), (0, 255));
    }

    #[test]
    fn sharpness_keeps_the_border_and_smooths_inside() {
        // A single bright pixel in the middle of a 3x3 image: its blurred
        // value is 255 * 5 / 13 = 98.08 -> 98; factor 0 is the blur itself.
        let mut x = vec![0u8; 27];
        x[12..15].copy_from_slice(&[255, 255, 255]);
        let mut scratch = Vec::new();
        sharpness(&mut x, 3, 3, 0.0, &mut scratch);
        assert_eq!(&x[12..15], &[98, 98, 98]);
        assert!(x[..12].iter().chain(&x[15..]).all(|&v| v == 0));
    }
}
