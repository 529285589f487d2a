//! torchvision's affine warps of a tensor image with `NEAREST`
//! interpolation and fill 0 (`F.affine`, `F.rotate` without `expand`), on
//! an RGB8 HWC buffer.
//!
//! As torchvision does it: the inverse matrix from
//! `_get_inverse_affine_matrix` (in `f64`, as Python), rounded to `f32`;
//! `_gen_affine_grid` (pixel centres relative to the image centre, times
//! the matrix, over half the size); then `grid_sample(mode="nearest",
//! padding_mode="zeros", align_corners=False)`: `((g + 1) * size - 1) / 2`
//! rounded half to even, 0 outside the image. All of it in `f32`.

use super::round_half_even;

/// `F.affine`'s parameters; `center` is relative to the image centre
/// (torchvision's `center_f`), angles in degrees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Affine {
    pub(crate) center: [f64; 2],
    pub(crate) angle: f64,
    pub(crate) translate: [f64; 2],
    pub(crate) scale: f64,
    pub(crate) shear: [f64; 2],
}

impl Affine {
    pub(crate) const IDENTITY: Affine = Affine {
        center: [0.0, 0.0],
        angle: 0.0,
        translate: [0.0, 0.0],
        scale: 1.0,
        shear: [0.0, 0.0],
    };

    /// `_get_inverse_affine_matrix(center, angle, translate, scale, shear)`:
    /// the map from output to input pixels, centred coordinates.
    pub(crate) fn inverse_matrix(&self) -> [f64; 6] {
        let rot = self.angle.to_radians();
        let (sx, sy) = (self.shear[0].to_radians(), self.shear[1].to_radians());
        let ([cx, cy], [tx, ty]) = (self.center, self.translate);
        let a = (rot - sy).cos() / sy.cos();
        let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
        let c = (rot - sy).sin() / sy.cos();
        let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();
        let mut m = [d, -b, 0.0, -c, a, 0.0].map(|v| v / self.scale);
        m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
        m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
        m[2] += cx;
        m[5] += cy;
        m
    }
}

/// Writes `src` (RGB8 HWC, `width` x `height`) warped by `affine` into
/// `dst` (same size), nearest neighbour, 0 outside.
pub(crate) fn warp(src: &[u8], dst: &mut [u8], width: usize, height: usize, affine: &Affine) {
    if width == 0 || height == 0 {
        return;
    }
    let m = affine.inverse_matrix().map(|v| v as f32);
    let (hw, hh) = ((0.5 * width as f64) as f32, (0.5 * height as f64) as f32);
    let (ax, bx, cx) = (m[0] / hw, m[1] / hw, m[2] / hw);
    let (ay, by, cy) = (m[3] / hh, m[4] / hh, m[5] / hh);
    let (wf, hf) = (width as f32, height as f32);
    // `linspace(-n/2 + 0.5, n/2 - 0.5, n)`: half-integers, exact in f32.
    let x0 = (-(width as f64) * 0.5 + 0.5) as f32;
    let y0 = (-(height as f64) * 0.5 + 0.5) as f32;
    for (i, out_row) in dst.chunks_exact_mut(width * 3).take(height).enumerate() {
        let y = y0 + i as f32;
        for (j, out) in out_row.chunks_exact_mut(3).enumerate() {
            let x = x0 + j as f32;
            let gx = x * ax + y * bx + cx;
            let gy = x * ay + y * by + cy;
            // grid_sample's unnormalise (align_corners=False), then nearest.
            let ix = ((gx + 1.0) * wf - 1.0) / 2.0;
            let iy = ((gy + 1.0) * hf - 1.0) / 2.0;
            let (ix, iy) = (round_half_even(ix), round_half_even(iy));
            if ix >= 0.0 && ix < wf && iy >= 0.0 && iy < hf {
                let at = (iy as usize * width + ix as usize) * 3;
                out.copy_from_slice(&src[at..at + 3]);
            } else {
                out.fill(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(w: usize, h: usize) -> Vec<u8> {
        (0..w * h)
            .flat_map(|i| [(i % 251) as u8, (i / 7) as u8, 9])
            .collect()
    }

    fn warped(src: &[u8], w: usize, h: usize, a: Affine) -> Vec<u8> {
        let mut dst = vec![7u8; src.len()];
        warp(src, &mut dst, w, h, &a);
        dst
    }

    #[test]
    fn zero_shear_translation_and_rotation_are_the_identity() {
        let (w, h) = (40, 48);
        let img = ramp(w, h);
        assert_eq!(warped(&img, w, h, Affine::IDENTITY), img);
        let shear_centre = Affine {
            center: [-20.0, -24.0],
            ..Affine::IDENTITY
        };
        assert_eq!(warped(&img, w, h, shear_centre), img);
        let full_turn = Affine {
            angle: 360.0,
            ..Affine::IDENTITY
        };
        assert_eq!(warped(&img, w, h, full_turn), img);
    }

    #[test]
    fn translation_moves_pixels_and_fills_with_zero() {
        let (w, h) = (5, 4);
        let img = ramp(w, h);
        let right = Affine {
            translate: [2.0, -1.0],
            ..Affine::IDENTITY
        };
        let out = warped(&img, w, h, right);
        for y in 0..h {
            for x in 0..w {
                let got = &out[(y * w + x) * 3..][..3];
                let (sx, sy) = (x as i64 - 2, y as i64 + 1);
                if (0..w as i64).contains(&sx) && (0..h as i64).contains(&sy) {
                    let at = (sy as usize * w + sx as usize) * 3;
                    assert_eq!(got, &img[at..at + 3], "({x}, {y})");
                } else {
                    assert_eq!(got, [0, 0, 0], "({x}, {y})");
                }
            }
        }
    }

    #[test]
    fn empty_images_are_left_alone() {
        let rot = Affine {
            angle: 30.0,
            ..Affine::IDENTITY
        };
        assert!(warped(&[], 0, 4, rot).is_empty());
        assert!(warped(&[], 4, 0, rot).is_empty());
    }

    #[test]
    fn a_quarter_turn_of_a_square_is_exact() {
        // Rotating a square by 90 degrees maps pixel centres onto pixel
        // centres: torchvision's rotate(img, 90) is rot90 counter-clockwise.
        let n = 6;
        let img = ramp(n, n);
        let rot = Affine {
            angle: -90.0, // F.rotate passes -angle to the inverse matrix
            ..Affine::IDENTITY
        };
        let out = warped(&img, n, n, rot);
        for y in 0..n {
            for x in 0..n {
                // counter-clockwise: out[y][x] = in[x][n - 1 - y]
                let at = (x * n + (n - 1 - y)) * 3;
                assert_eq!(&out[(y * n + x) * 3..][..3], &img[at..at + 3], "({x}, {y})");
            }
        }
    }
}
