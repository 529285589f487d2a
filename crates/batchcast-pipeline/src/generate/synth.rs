//! The content of synthetic images: a four-corner gradient around the class
//! colour, filled rectangles and discs, a sinusoidal texture and pixel noise,
//! encoded with 4:2:0 chroma like most photos.

use jpeg_encoder::{ColorType, Encoder, SamplingFactor};

use super::GenerateConfig;
use crate::rng::{Rng, STREAM_GENERATE};
use crate::PipelineError;

/// Peak-to-peak amplitude of the per-pixel noise: sets the JPEG size (about
/// 100 KiB at 500x375, quality 90, near ImageNet's average photo).
const NOISE: f64 = 56.0;

/// Encodes image `i` of `class` as a JPEG.
pub(super) fn synth_jpeg(
    config: &GenerateConfig,
    class: usize,
    i: usize,
) -> Result<Vec<u8>, PipelineError> {
    let mut rng = Rng::derive(&[STREAM_GENERATE, config.seed, class as u64, i as u64]);
    let long = config.long_side.0
        + rng.below(u64::from(config.long_side.1 - config.long_side.0) + 1) as u32;
    let aspect = rng.uniform(f64::from(config.aspect.0), f64::from(config.aspect.1));
    let short = ((f64::from(long) / aspect).round() as u32).max(1);
    let (w, h) = if rng.next_f64() < f64::from(config.portrait_fraction) {
        (short, long)
    } else {
        (long, short)
    };
    let hue = class as f64 / config.classes as f64;
    let pixels = synth_pixels(w as usize, h as usize, hue, &mut rng);
    let mut out = Vec::with_capacity(pixels.len() / 4);
    let mut encoder = Encoder::new(&mut out, config.quality);
    encoder.set_sampling_factor(SamplingFactor::F_2_2);
    encoder
        .encode(&pixels, w as u16, h as u16, ColorType::Rgb)
        .map_err(|e| {
            PipelineError::InvalidConfig(format!("JPEG encoding of {w}x{h} failed: {e}"))
        })?;
    Ok(out)
}

/// RGB pixels: a four-corner gradient around the class colour, a few filled
/// rectangles and discs, a sinusoidal texture and uniform noise.
fn synth_pixels(w: usize, h: usize, hue: f64, rng: &mut Rng) -> Vec<u8> {
    let base = hue_to_rgb(hue);
    let corners: [[f64; 3]; 4] = std::array::from_fn(|_| {
        std::array::from_fn(|c| (base[c] + rng.uniform(-70.0, 70.0)).clamp(0.0, 255.0))
    });
    let mut img = vec![0f32; w * h * 3];
    for y in 0..h {
        let fy = y as f64 / h.max(2).saturating_sub(1) as f64;
        for x in 0..w {
            let fx = x as f64 / w.max(2).saturating_sub(1) as f64;
            for c in 0..3 {
                let top = corners[0][c] * (1.0 - fx) + corners[1][c] * fx;
                let bottom = corners[2][c] * (1.0 - fx) + corners[3][c] * fx;
                img[(y * w + x) * 3 + c] = (top * (1.0 - fy) + bottom * fy) as f32;
            }
        }
    }
    let shapes = 3 + rng.below(6);
    for _ in 0..shapes {
        let colour: [f32; 3] = std::array::from_fn(|_| rng.uniform(0.0, 255.0) as f32);
        let (cx, cy) = (rng.uniform(0.0, w as f64), rng.uniform(0.0, h as f64));
        let r = rng.uniform(0.05, 0.3) * w.min(h) as f64;
        let disc = rng.next_f64() < 0.5;
        let (x0, x1) = ((cx - r).max(0.0) as usize, ((cx + r) as usize).min(w));
        let (y0, y1) = ((cy - r).max(0.0) as usize, ((cy + r) as usize).min(h));
        for y in y0..y1 {
            for x in x0..x1 {
                let (dx, dy) = (x as f64 - cx, y as f64 - cy);
                if !disc || dx * dx + dy * dy <= r * r {
                    img[(y * w + x) * 3..][..3].copy_from_slice(&colour);
                }
            }
        }
    }
    let (fx, fy) = (rng.uniform(0.02, 0.3), rng.uniform(0.02, 0.3));
    let amp = rng.uniform(5.0, 20.0);
    let mut noise = Rng::derive(&[rng.next_u64()]);
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let texture = amp * ((x as f64 * fx).sin() * (y as f64 * fy).cos());
            let bits = noise.next_u64();
            for c in 0..3 {
                let n = ((bits >> (c * 16)) & 0xff) as f64 / 255.0 * NOISE - NOISE / 2.0;
                let v = f64::from(img[(y * w + x) * 3 + c]) + texture + n;
                out.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

/// A saturated colour of hue `h` in `[0, 1)`, as `[r, g, b]` in 0-255.
fn hue_to_rgb(h: f64) -> [f64; 3] {
    let sector = (h.rem_euclid(1.0) * 6.0) as u32;
    let f = h.rem_euclid(1.0) * 6.0 - f64::from(sector);
    let (r, g, b) = match sector {
        0 => (1.0, f, 0.0),
        1 => (1.0 - f, 1.0, 0.0),
        2 => (0.0, 1.0, f),
        3 => (0.0, 1.0 - f, 1.0),
        4 => (f, 0.0, 1.0),
        _ => (1.0, 0.0, 1.0 - f),
    };
    [r * 200.0 + 28.0, g * 200.0 + 28.0, b * 200.0 + 28.0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_deterministic() {
        let c = GenerateConfig {
            classes: 2,
            long_side: (24, 40),
            ..GenerateConfig::default()
        };
        assert_eq!(synth_jpeg(&c, 1, 2).unwrap(), synth_jpeg(&c, 1, 2).unwrap());
        assert_ne!(synth_jpeg(&c, 1, 2).unwrap(), synth_jpeg(&c, 1, 1).unwrap());
    }

    #[test]
    fn hues_are_saturated_colours() {
        assert_eq!(hue_to_rgb(0.0), [228.0, 28.0, 28.0]);
        assert_eq!(hue_to_rgb(1.0 / 3.0), [28.0, 228.0, 28.0]);
    }
}
