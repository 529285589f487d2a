//! torchvision's `adjust_hue` of a `uint8` tensor image
//! (`_functional_tensor.adjust_hue`) on an RGB8 HWC buffer, bit for bit:
//! `x / 255` in `f32`, `_rgb2hsv`, the hue shifted and wrapped with
//! `% 1.0`, `_hsv2rgb`, and back with `* 255.999`, truncated
//! (`convert_image_dtype`).
//!
//! Eight pixels at a time ([`super::lanes`]) and without branches: every
//! `if` of torch's formulas is a choice between two values computed for
//! every lane, as torch itself computes them over a tensor. Every build
//! gives the bytes of the plain scalar form (tested).

use super::lanes::{map_pixels, truncate_u8, Lanes, PixelMap, LANES};

/// `adjust_hue(img, factor)`, `factor` in [-0.5, 0.5]: the hue shifted by
/// `factor` turns.
pub(crate) fn hue(image: &mut [u8], factor: f64) {
    map_pixels(image, HueShift::new(factor));
}

/// The hue shifted by `shift` turns.
struct HueShift {
    /// `x / 255` of every uint8 value, the same f32 division, done once.
    unit: [f32; 256],
    shift: f32,
}

impl HueShift {
    fn new(factor: f64) -> HueShift {
        HueShift {
            unit: std::array::from_fn(|v| v as f32 / 255.0),
            shift: factor as f32,
        }
    }
}

impl PixelMap for HueShift {
    #[inline(always)]
    fn map(&self, rgb: [Lanes<u8>; 3]) -> [Lanes<u8>; 3] {
        let (unit, shift) = (&self.unit, self.shift);
        // Three loops, so the middle one (pure f32) vectorises: the table
        // lookups and the conversions stay out of it.
        let mut x = [[0f32; LANES]; 3];
        for c in 0..3 {
            for i in 0..LANES {
                x[c][i] = unit[usize::from(rgb[c][i])];
            }
        }
        let mut y = [[0f32; LANES]; 3];
        for i in 0..LANES {
            let [h, s, v] = rgb_to_hsv([x[0][i], x[1][i], x[2][i]]);
            let px = hsv_to_rgb([rem_one(h + shift), s, v]);
            for c in 0..3 {
                y[c][i] = px[c];
            }
        }
        // convert_image_dtype(float -> uint8): `x * 255.999`, truncated
        // (every value is in [0, 1]).
        let mut out = [[0u8; LANES]; 3];
        for c in 0..3 {
            for i in 0..LANES {
                out[c][i] = truncate_u8(y[c][i] * 255.999f32);
            }
        }
        out
    }
}

/// torch's `x % 1.0` on floats (`fmod`, moved into [0, 1) when negative)
/// for `x` in (-1, 2), without a libm call: `x - 1` is exact for x in
/// [1, 2) (Sterbenz), which is what `fmod` returns; a negative `x` is
/// its own `fmod`, plus 1 (rounded, as torch adds it).
#[inline(always)]
fn rem_one(x: f32) -> f32 {
    let wrapped = if x >= 1.0 { x - 1.0 } else { x + 1.0 };
    if (0.0..1.0).contains(&x) {
        x
    } else {
        wrapped
    }
}

/// The larger of two values that are never NaN (a compare and a select,
/// which vectorise, where `f32::max` also orders NaNs).
#[inline(always)]
fn max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn min(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

/// `_rgb2hsv`, term for term (it follows Pillow's `rgb2hsv`), on values in
/// [0, 1].
#[inline(always)]
fn rgb_to_hsv([r, g, b]: [f32; 3]) -> [f32; 3] {
    let maxc = max(max(r, g), b);
    let minc = min(min(r, g), b);
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

/// `_hsv2rgb`, term for term, for `h` in [0, 1]: sector `i = floor(6 h)
/// % 6` picks each channel from `v`, `p`, `q`, `t`.
#[inline(always)]
fn hsv_to_rgb([h, s, v]: [f32; 3]) -> [f32; 3] {
    // floor(h * 6) for h in [0, 1] (truncation, as torch's floor there).
    let i = (h * 6.0).floor();
    let f = h * 6.0 - i;
    let p = (v * (1.0 - s)).clamp(0.0, 1.0);
    let q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
    let t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0);
    // i is 0..=6, compared as a float; sector 6 (h = 1) is sector 0.
    let k = if i >= 6.0 { i - 6.0 } else { i };
    let pick = |vs: [f32; 2], q_at: f32, t_at: f32| {
        if k == vs[0] || k == vs[1] {
            v
        } else if k == q_at {
            q
        } else if k == t_at {
            t
        } else {
            p
        }
    };
    // Sectors 0..6 give [v,t,p] [q,v,p] [p,v,t] [p,q,v] [t,p,v] [v,p,q].
    [
        pick([0.0, 5.0], 1.0, 4.0),
        pick([1.0, 2.0], 3.0, 0.0),
        pick([3.0, 4.0], 5.0, 2.0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::noise;

    /// `_hsv2rgb` as torch writes it: a gather by sector.
    fn hsv_to_rgb_by_sector([h, s, v]: [f32; 3]) -> [f32; 3] {
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

    /// One pixel the plain way: scalar code, `f32::max`, a `match`.
    fn hue_pixel(px: [u8; 3], shift: f32) -> [u8; 3] {
        let [r, g, b] = px.map(|x| f32::from(x) / 255.0);
        let maxc = r.max(g).max(b);
        let minc = r.min(g).min(b);
        let eqc = maxc == minc;
        let cr = maxc - minc;
        let s = cr / if eqc { 1.0 } else { maxc };
        let div = if eqc { 1.0 } else { cr };
        let (rc, gc, bc) = ((maxc - r) / div, (maxc - g) / div, (maxc - b) / div);
        let h = if maxc == r {
            bc - gc
        } else if maxc == g {
            2.0 + rc - bc
        } else {
            4.0 + gc - rc
        };
        // torch adds the two zero terms too: h + 0.0 + 0.0 is h.
        let h = (h / 6.0 + 1.0) % 1.0;
        let h = h + shift;
        let h = if h >= 1.0 {
            h - 1.0
        } else if h < 0.0 {
            h + 1.0
        } else {
            h
        };
        hsv_to_rgb_by_sector([h, s, maxc]).map(|x| (x * 255.999) as u8)
    }

    #[test]
    fn every_build_equals_the_plain_scalar_form_bit_for_bit() {
        // A grid of the colour cube (its corners and edges included), and
        // noise; lengths that leave every tail size.
        let step = 15u8;
        let mut cube = Vec::new();
        for r in (0..=255u8).step_by(step as usize) {
            for g in (0..=255u8).step_by(step as usize) {
                for b in (0..=255u8).step_by(step as usize) {
                    cube.extend([r, g, b]);
                }
            }
        }
        cube.extend(noise(20_000 + 7, 5));
        for shift in [-0.5, -0.37, -0.1, 0.0, 1e-3, 0.25, 1.0 / 3.0, 0.5] {
            let want: Vec<u8> = cube
                .chunks_exact(3)
                .flat_map(|px| hue_pixel([px[0], px[1], px[2]], shift as f32))
                .collect();
            for len in [cube.len(), cube.len() - 3, 3 * 5] {
                let mut dispatched = cube[..len].to_vec();
                hue(&mut dispatched, shift);
                assert_eq!(dispatched, want[..len], "shift {shift}, {len} bytes");
                let mut portable = cube[..len].to_vec();
                super::super::lanes::map_portable(&mut portable, HueShift::new(shift));
                assert_eq!(portable, want[..len], "shift {shift}, {len} bytes");
            }
        }
    }

    #[test]
    fn sector_picks_equal_the_gather() {
        let mut r = crate::rng::Rng::derive(&[4]);
        for _ in 0..20_000 {
            let hsv = [
                r.uniform(0.0, 1.0),
                r.uniform(0.0, 1.0),
                r.uniform(0.0, 1.0),
            ]
            .map(|x| x as f32);
            assert_eq!(hsv_to_rgb(hsv), hsv_to_rgb_by_sector(hsv), "{hsv:?}");
        }
        for h in [
            0.0f32,
            1.0 / 6.0,
            0.5,
            5.0 / 6.0,
            1.0 - f32::EPSILON / 2.0,
            1.0,
        ] {
            let hsv = [h, 0.7, 0.9];
            assert_eq!(hsv_to_rgb(hsv), hsv_to_rgb_by_sector(hsv), "{hsv:?}");
        }
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
