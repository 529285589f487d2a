//! [`Writer`]: puts a resampled RGB8 HWC image into the caller's buffer in
//! an [`OutputFormat`](crate::OutputFormat)'s layout and element type, in
//! one pass over the image, mirrored left-right on the way when asked (a
//! flipped sample then costs no pass of its own).
//!
//! `f32` values come from a per-channel table of the 256 normalised values
//! (computed as `ToTensor` + `Normalize` compute them), so they are the
//! same whichever loop writes them. NCHW is written a row at a time into
//! the three planes at once: each source pixel is read once.

use crate::output::Layout;

/// Per channel, the `f32` value of each of the 256 levels.
pub(crate) type Lut = [[f32; 256]; 3];

/// Converts RGB8 HWC pixels to one output format.
pub(crate) struct Writer {
    layout: Layout,
    /// `None`: `u8` output.
    lut: Option<Lut>,
}

impl Writer {
    pub(crate) fn new(layout: Layout, lut: Option<Lut>) -> Writer {
        Writer { layout, lut }
    }

    /// Writes `src` (RGB8 HWC, rows of `width` pixels) to `dst` (exactly
    /// the format's bytes for that image), mirrored left-right if `flip`.
    pub(crate) fn write(&self, src: &[u8], width: usize, flip: bool, dst: &mut [u8]) {
        if width == 0 || src.is_empty() {
            return;
        }
        let row = width * 3;
        match (&self.lut, self.layout) {
            (None, Layout::Nhwc) if !flip => dst[..src.len()].copy_from_slice(src),
            (None, Layout::Nhwc) => {
                for (s, d) in src.chunks_exact(row).zip(dst.chunks_exact_mut(row)) {
                    each_pixel(s, flip, d.chunks_exact_mut(3), |p, o| o.copy_from_slice(p));
                }
            }
            (None, Layout::Nchw) => planes(src, width, flip, dst, 1, |p, [r, g, b]| {
                (r[0], g[0], b[0]) = (p[0], p[1], p[2]);
            }),
            (Some(lut), Layout::Nhwc) => {
                for (s, d) in src.chunks_exact(row).zip(dst.chunks_exact_mut(row * 4)) {
                    each_pixel(s, flip, d.chunks_exact_mut(12), |p, o| {
                        for (c, v) in o.chunks_exact_mut(4).enumerate() {
                            v.copy_from_slice(&lut[c][usize::from(p[c])].to_ne_bytes());
                        }
                    });
                }
            }
            (Some(lut), Layout::Nchw) => planes(src, width, flip, dst, 4, |p, out| {
                for (c, o) in out.into_iter().enumerate() {
                    o.copy_from_slice(&lut[c][usize::from(p[c])].to_ne_bytes());
                }
            }),
        }
    }
}

/// Writes the three planes of `size`-byte elements of an NCHW image, a row
/// of each at a time: `put(pixel, [r, g, b])` fills one element of
/// each plane from one source pixel.
#[inline(always)]
fn planes(
    src: &[u8],
    width: usize,
    flip: bool,
    dst: &mut [u8],
    size: usize,
    mut put: impl FnMut(&[u8], [&mut [u8]; 3]),
) {
    let plane = src.len() / 3 * size;
    let (r, rest) = dst.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    let out_row = width * size;
    let rows = src
        .chunks_exact(width * 3)
        .zip(r.chunks_exact_mut(out_row))
        .zip(g.chunks_exact_mut(out_row))
        .zip(b[..plane].chunks_exact_mut(out_row));
    for (((s, r), g), b) in rows {
        let out = r
            .chunks_exact_mut(size)
            .zip(g.chunks_exact_mut(size))
            .zip(b.chunks_exact_mut(size));
        each_pixel(s, flip, out, |p, ((r, g), b)| put(p, [r, g, b]));
    }
}

/// Calls `f(pixel, o)` for the pixels of one source row (3 bytes each)
/// and the output elements `out` in order, the row read right to left if
/// `flip`.
#[inline(always)]
fn each_pixel<'a, O>(
    row: &'a [u8],
    flip: bool,
    out: impl Iterator<Item = O>,
    mut f: impl FnMut(&'a [u8], O),
) {
    let pixels = row.chunks_exact(3);
    if flip {
        pixels.rev().zip(out).for_each(|(p, o)| f(p, o));
    } else {
        pixels.zip(out).for_each(|(p, o)| f(p, o));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{DType, OutputFormat};
    use crate::resample::hflip;

    /// The writer before it wrote planes together and flipped: one pass
    /// per channel over an image already flipped.
    fn reference(format: &OutputFormat, src: &[u8], dst: &mut [u8]) {
        let pixels = src.len() / 3;
        let lut: Option<Lut> = match format.dtype {
            DType::U8 => None,
            DType::F32Normalized { mean, std } => Some(std::array::from_fn(|c| {
                std::array::from_fn(|v| (v as f32 / 255.0 - mean[c]) / std[c])
            })),
        };
        match (lut, format.layout) {
            (None, Layout::Nhwc) => dst[..src.len()].copy_from_slice(src),
            (None, Layout::Nchw) => {
                for (c, plane) in dst.chunks_exact_mut(pixels).take(3).enumerate() {
                    for (o, px) in plane.iter_mut().zip(src.chunks_exact(3)) {
                        *o = px[c];
                    }
                }
            }
            (Some(lut), Layout::Nhwc) => {
                for (i, o) in dst.chunks_exact_mut(4).take(src.len()).enumerate() {
                    o.copy_from_slice(&lut[i % 3][usize::from(src[i])].to_ne_bytes());
                }
            }
            (Some(lut), Layout::Nchw) => {
                for (c, plane) in dst.chunks_exact_mut(pixels * 4).take(3).enumerate() {
                    for (o, px) in plane.chunks_exact_mut(4).zip(src.chunks_exact(3)) {
                        o.copy_from_slice(&lut[c][usize::from(px[c])].to_ne_bytes());
                    }
                }
            }
        }
    }

    #[test]
    fn one_pass_writes_what_a_pass_per_channel_after_a_flip_wrote() {
        let formats = [Layout::Nhwc, Layout::Nchw].into_iter().flat_map(|layout| {
            [DType::U8, DType::imagenet(), DType::to_tensor()]
                .map(|dtype| OutputFormat { layout, dtype })
        });
        for format in formats {
            for (w, h) in [(1, 1), (1, 4), (2, 3), (5, 2), (17, 9)] {
                let src = crate::augment::noise(w * h, (w * 31 + h) as u64);
                for flip in [false, true] {
                    let mut flipped = src.clone();
                    if flip {
                        hflip(&mut flipped, w);
                    }
                    let bytes = format.image_bytes(h as u32, w as u32);
                    let (mut want, mut got) = (vec![0u8; bytes], vec![1u8; bytes]);
                    reference(&format, &flipped, &mut want);
                    format.writer().write(&src, w, flip, &mut got);
                    assert_eq!(got, want, "{format:?} {w}x{h} flip {flip}");
                }
            }
        }
    }
}
