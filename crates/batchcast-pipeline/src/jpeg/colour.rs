//! Chroma upsampling and YCbCr -> RGB, as libjpeg(-turbo) does them by
//! default (what PIL decodes with), bit for bit:
//!
//! - "fancy" (triangle) upsampling, `jdsample.c`: each output sample is 3/4
//!   of the nearer input sample and 1/4 of the further one. 2x1 rounds with
//!   alternating biases 1 and 2 (`>> 2`); 2x2 sums columns vertically
//!   unrounded (`3 * near + far`) and rounds once horizontally with biases
//!   8 and 7 (`>> 4`). Edge samples are replicated; components of at most two
//!   samples per row are box-upsampled instead, as libjpeg does.
//! - `jdcolor.c`'s 16-bit fixed-point conversion, computed rather than
//!   looked up (same values as its tables) so it vectorises.

const SCALEBITS: u32 = 16;
const ONE_HALF: i32 = 1 << (SCALEBITS - 1);
// FIX(x) = (x * 2^16 + 0.5) truncated.
const FIX_1_40200: i32 = 91881;
const FIX_1_77200: i32 = 116_130;
const FIX_0_71414: i32 = 46802;
const FIX_0_34414: i32 = 22554;

/// Converts one row of full-resolution Y, Cb, Cr samples to RGB.
#[inline(always)]
pub(crate) fn ycc_to_rgb_row(y: &[u8], cb: &[u8], cr: &[u8], out: &mut [u8]) {
    let n = out.len() / 3;
    let (y, cb, cr) = (&y[..n], &cb[..n], &cr[..n]);
    for (i, px) in out.chunks_exact_mut(3).enumerate() {
        let (l, b, r) = (
            i32::from(y[i]),
            i32::from(cb[i]) - 128,
            i32::from(cr[i]) - 128,
        );
        let red = l + ((FIX_1_40200 * r + ONE_HALF) >> SCALEBITS);
        let green = l + ((ONE_HALF - FIX_0_34414 * b - FIX_0_71414 * r) >> SCALEBITS);
        let blue = l + ((FIX_1_77200 * b + ONE_HALF) >> SCALEBITS);
        px[0] = red.clamp(0, 255) as u8;
        px[1] = green.clamp(0, 255) as u8;
        px[2] = blue.clamp(0, 255) as u8;
    }
}

/// Replicates a row of gray samples to RGB.
#[inline(always)]
pub(crate) fn gray_to_rgb_row(y: &[u8], out: &mut [u8]) {
    for (px, &g) in out.chunks_exact_mut(3).zip(y) {
        px.copy_from_slice(&[g, g, g]);
    }
}

/// Doubles a row of `input.len()` chroma samples horizontally into
/// `out[..2 * input.len()]` (libjpeg `h2v1_fancy_upsample`).
#[inline(always)]
pub(crate) fn upsample_h2v1(input: &[u8], out: &mut [u8]) {
    let n = input.len();
    let out = &mut out[..2 * n];
    if n <= 2 {
        box_upsample(input, out);
        return;
    }
    let at = |i: usize| u16::from(input[i]);
    out[0] = input[0];
    out[1] = ((at(0) * 3 + at(1) + 2) >> 2) as u8;
    for (i, pair) in out[2..2 * n - 2].chunks_exact_mut(2).enumerate() {
        let (prev, this, next) = (at(i), at(i + 1) * 3, at(i + 2));
        pair[0] = ((this + prev + 1) >> 2) as u8;
        pair[1] = ((this + next + 2) >> 2) as u8;
    }
    out[2 * n - 2] = ((at(n - 1) * 3 + at(n - 2) + 1) >> 2) as u8;
    out[2 * n - 1] = input[n - 1];
}

/// Doubles a chroma row both ways: one of the two output rows of input row
/// `near`, `far` being the adjacent input row on that output row's side
/// (`near` itself at the image edge). Writes `out[..2 * near.len()]`
/// (libjpeg `h2v2_fancy_upsample`).
#[inline(always)]
pub(crate) fn upsample_h2v2(near: &[u8], far: &[u8], colsum: &mut Vec<u16>, out: &mut [u8]) {
    let n = near.len();
    let out = &mut out[..2 * n];
    if n <= 2 {
        box_upsample(near, out);
        return;
    }
    colsum.clear();
    colsum.extend(
        near.iter()
            .zip(&far[..n])
            .map(|(&a, &b)| u16::from(a) * 3 + u16::from(b)),
    );
    let c = &colsum[..n];
    out[0] = ((c[0] * 4 + 8) >> 4) as u8;
    out[1] = ((c[0] * 3 + c[1] + 7) >> 4) as u8;
    for (i, pair) in out[2..2 * n - 2].chunks_exact_mut(2).enumerate() {
        let (last, this, next) = (c[i], c[i + 1] * 3, c[i + 2]);
        pair[0] = ((this + last + 8) >> 4) as u8;
        pair[1] = ((this + next + 7) >> 4) as u8;
    }
    out[2 * n - 2] = ((c[n - 1] * 3 + c[n - 2] + 8) >> 4) as u8;
    out[2 * n - 1] = ((c[n - 1] * 4 + 7) >> 4) as u8;
}

fn box_upsample(input: &[u8], out: &mut [u8]) {
    for (pair, &v) in out.chunks_exact_mut(2).zip(input) {
        pair.fill(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libjpeg's `ycc_rgb_convert`, with its tables.
    fn libjpeg_ycc(y: u8, cb: u8, cr: u8) -> [u8; 3] {
        let fix = |x: f64| (x * 65536.0 + 0.5) as i32;
        let (xb, xr) = (i32::from(cb) - 128, i32::from(cr) - 128);
        let cr_r = (fix(1.402) * xr + ONE_HALF) >> 16;
        let cb_b = (fix(1.772) * xb + ONE_HALF) >> 16;
        let g = (-fix(0.34414) * xb + ONE_HALF + -fix(0.71414) * xr) >> 16;
        let l = i32::from(y);
        [l + cr_r, l + g, l + cb_b].map(|v| v.clamp(0, 255) as u8)
    }

    #[test]
    fn colour_conversion_equals_libjpeg_tables_everywhere() {
        assert_eq!(FIX_1_40200, (1.402f64 * 65536.0 + 0.5) as i32);
        assert_eq!(FIX_1_77200, (1.772f64 * 65536.0 + 0.5) as i32);
        for y in (0..=255u8).step_by(5) {
            let cb: Vec<u8> = (0..=255).collect();
            for cr in 0..=255u8 {
                let mut out = vec![0u8; 256 * 3];
                ycc_to_rgb_row(&[y; 256], &cb, &[cr; 256], &mut out);
                for (b, px) in out.chunks(3).enumerate() {
                    assert_eq!(px, libjpeg_ycc(y, b as u8, cr), "y {y} cb {b} cr {cr}");
                }
            }
        }
        let mut out = [0u8; 3];
        ycc_to_rgb_row(&[76], &[85], &[255], &mut out); // pure red
        assert_eq!(out, [254, 0, 0]);
    }

    #[test]
    fn h2v1_is_three_quarters_near_one_quarter_far_with_alternating_bias() {
        let mut out = [0u8; 8];
        upsample_h2v1(&[0, 100, 200, 40], &mut out);
        // 0 | 3*0+100+2 >> 2 = 25 | 300+0+1 >> 2 = 75 | 300+200+2 >> 2 = 125 | ...
        assert_eq!(out, [0, 25, 75, 125, 175, 160, 80, 40]);
        upsample_h2v1(&[9, 200], &mut out[..4]);
        assert_eq!(&out[..4], &[9, 9, 200, 200]); // two samples: box
    }

    #[test]
    fn h2v2_rounds_once_after_both_directions() {
        let mut colsum = Vec::new();
        let mut out = [0u8; 6];
        let (near, far) = ([10u8, 11, 12], [13u8, 13, 13]);
        upsample_h2v2(&near, &far, &mut colsum, &mut out);
        // column sums 43, 46, 49
        let c = [43u16, 46, 49];
        let expect = [
            (c[0] * 4 + 8) >> 4,
            (c[0] * 3 + c[1] + 7) >> 4,
            (c[1] * 3 + c[0] + 8) >> 4,
            (c[1] * 3 + c[2] + 7) >> 4,
            (c[2] * 3 + c[1] + 8) >> 4,
            (c[2] * 4 + 7) >> 4,
        ]
        .map(|v| v as u8);
        assert_eq!(out, expect);
        // Flat input stays flat.
        upsample_h2v2(&[77; 3], &[77; 3], &mut colsum, &mut out);
        assert_eq!(out, [77; 6]);
    }
}
