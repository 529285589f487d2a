//! A baseline JPEG decoder that reproduces libjpeg-turbo's default output
//! (what PIL, hence torchvision's loader, gives) bit for bit: islow IDCT,
//! fancy chroma upsampling, 16-bit fixed-point YCbCr -> RGB.
//!
//! It covers what photo datasets are made of: 8-bit baseline / extended
//! sequential Huffman JPEGs, grayscale or YCbCr with 4:4:4, 4:2:2 or 4:2:0
//! chroma, in one interleaved scan, with or without restart markers.
//! Anything else is reported [`Outcome::Unsupported`] before any work, for
//! the general decoder to take.

mod bound;
mod colour;
mod error;
mod header;
mod huffman;
mod idct;

use std::cell::RefCell;
use std::ops::Range;

use crate::decode::{check_size, Area, DecodeError, RgbImage};
pub(crate) use bound::check as check_limits;
use error::JpegError;
use header::{Frame, Parsed};
use huffman::BitReader;

/// What [`decode`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `out` holds the image.
    Decoded,
    /// A valid kind of JPEG this decoder does not handle; `out` untouched.
    Unsupported,
}

/// Buffers reused across images on a thread.
#[derive(Default)]
struct Scratch {
    /// One plane per component, whole blocks.
    planes: [Vec<u8>; 3],
    up_cb: Vec<u8>,
    up_cr: Vec<u8>,
    colsum: Vec<u16>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Scratch planes larger than this are released after use.
const KEEP_BYTES: usize = 64 << 20;

/// Decodes a JPEG to RGB into `out` if it is of a kind this decoder
/// handles. Only the pixels of `area(width, height)` are guaranteed; see
/// [`crate::decode::decode_rgb_area_into`].
///
/// # Errors
/// Corrupt or truncated data.
pub(crate) fn decode(
    bytes: &[u8],
    out: &mut RgbImage,
    area: impl FnOnce(u32, u32) -> Area,
) -> Result<Outcome, DecodeError> {
    let frame = match header::parse(bytes)? {
        Parsed::Baseline(frame) => frame,
        Parsed::Unsupported => return Ok(Outcome::Unsupported),
    };
    let (width, height) = check_size(frame.width, frame.height)?;
    let wanted = area(width, height);
    // At `n/8` of the size, each block gives `n` x `n` pixels.
    let n = usize::from(wanted.scale.clamp(1, 8));
    let (width, height) = crate::decode::scaled_size(width, height, wanted.scale);
    out.width = width;
    out.height = height;
    // An empty range asks for nothing useful: decode all of that axis.
    let clip = |r: Range<u32>, size: u32| {
        let (a, b) = (r.start.min(size), r.end.min(size));
        if a < b {
            a as usize..b as usize
        } else {
            0..size as usize
        }
    };
    let rows = Wanted {
        rows: clip(wanted.rows, height),
        cols: clip(wanted.cols, width),
        block: n,
    };
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let result = dispatch(&frame, bytes, &rows, out, &mut scratch);
            for plane in &mut scratch.planes {
                if plane.capacity() > KEEP_BYTES {
                    *plane = Vec::new();
                }
            }
            result
        }
        Err(_) => dispatch(&frame, bytes, &rows, out, &mut Scratch::default()),
    })?;
    Ok(Outcome::Decoded)
}

/// The pixels of the image to produce: non-empty ranges inside it, of
/// the image at `block/8` of its size.
struct Wanted {
    rows: Range<usize>,
    cols: Range<usize>,
    /// Pixels per block side: 8, or fewer for a reduced-size decode.
    block: usize,
}

fn dispatch(
    f: &Frame,
    bytes: &[u8],
    rows: &Wanted,
    out: &mut RgbImage,
    s: &mut Scratch,
) -> Result<(), JpegError> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `decode_avx2` only requires AVX2, which this CPU has (checked
        // just above).
        return unsafe { decode_avx2(f, bytes, rows, out, s) };
    }
    decode_frame(f, bytes, rows, out, s)
}

/// [`decode_frame`] compiled for AVX2 (the IDCT and the colour loops
/// vectorise 8 lanes wide; results are identical).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_avx2(
    f: &Frame,
    bytes: &[u8],
    rows: &Wanted,
    out: &mut RgbImage,
    s: &mut Scratch,
) -> Result<(), JpegError> {
    decode_frame(f, bytes, rows, out, s)
}

#[inline(always)]
fn decode_frame(
    f: &Frame,
    bytes: &[u8],
    wanted: &Wanted,
    out: &mut RgbImage,
    s: &mut Scratch,
) -> Result<(), JpegError> {
    let bs = wanted.block;
    let luma = &f.components[0];
    // The decoded image's size, at `bs/8` of the frame's (set by `decode`).
    let (w, h) = (out.width as usize, out.height as usize);
    let (cw, ch) = (w.div_ceil(luma.h), h.div_ceil(luma.v));
    let mcu_rows = needed_mcu_rows(f, &wanted.rows, ch, bs, bytes.ends_with(&[0xff, 0xd9]));
    let xs = wanted.cols.clone();
    let chroma = chroma_cols(&xs, luma.h, cw);
    let mcu_cols = needed_mcu_cols(f, &xs, &chroma, bs);
    decode_scan(f, bytes, mcu_rows, mcu_cols, bs, s)?;
    out.data.resize(w * h * 3, 0);
    let rows = out
        .data
        .chunks_exact_mut(w * 3)
        .map(|row| &mut row[xs.start * 3..xs.end * 3])
        .enumerate()
        .skip(wanted.rows.start)
        .take(wanted.rows.len());
    let stride = |c: &header::Component| f.width.div_ceil(8 * luma.h) * c.h * bs;
    let ys = stride(luma);
    if f.components.len() == 1 {
        for (y, row) in rows {
            colour::gray_to_rgb_row(&s.planes[0][y * ys + xs.start..y * ys + xs.end], row);
        }
        return Ok(());
    }
    let cs = stride(&f.components[1]);
    let Scratch {
        planes: [yp, cbp, crp],
        up_cb,
        up_cr,
        colsum,
    } = s;
    up_cb.resize(2 * cw, 0);
    up_cr.resize(2 * cw, 0);
    // Chroma upsampled from the columns `chroma`: pixel `x` is at
    // `x - 2 * chroma.start` of `up_cb` / `up_cr`.
    let off = if luma.h == 2 { 2 * chroma.start } else { 0 };
    let up = xs.start - off..xs.end - off;
    fn plane_row<'a>(plane: &'a [u8], stride: usize, r: usize, cols: &Range<usize>) -> &'a [u8] {
        &plane[r * stride + cols.start..r * stride + cols.end]
    }
    let crow = |p, r| plane_row(p, cs, r, &chroma);
    for (y, row) in rows {
        let yrow = &yp[y * ys + xs.start..y * ys + xs.end];
        match (luma.h, luma.v) {
            (2, 1) => {
                colour::upsample_h2v1(crow(cbp, y), up_cb);
                colour::upsample_h2v1(crow(crp, y), up_cr);
            }
            (2, 2) => {
                let near = y / 2;
                let far = if y % 2 == 0 {
                    near.saturating_sub(1)
                } else {
                    (near + 1).min(ch - 1)
                };
                colour::upsample_h2v2(crow(cbp, near), crow(cbp, far), colsum, up_cb);
                colour::upsample_h2v2(crow(crp, near), crow(crp, far), colsum, up_cr);
            }
            _ => {
                // No upsampling: `chroma` is `xs`.
                colour::ycc_to_rgb_row(yrow, crow(cbp, y), crow(crp, y), row);
                continue;
            }
        }
        colour::ycc_to_rgb_row(yrow, &up_cb[up.clone()], &up_cr[up.clone()], row);
    }
    Ok(())
}

/// The chroma columns (of `cw`) that the pixel columns `xs` need, chroma
/// being `h` times narrower: those under them, and for `h` = 2 one more
/// each side (the triangle filter's neighbours; their own upsampled values,
/// taken as an edge, are not used). Upsampling treats the ends of the range
/// as edges, which they are only at the image's own: a range of fewer than
/// 3 columns (box-upsampled) is widened to the whole row.
fn chroma_cols(xs: &Range<usize>, h: usize, cw: usize) -> Range<usize> {
    if h == 1 {
        return xs.clone();
    }
    let cols = (xs.start / 2).saturating_sub(1)..((xs.end - 1) / 2 + 2).min(cw);
    if cols.len() < 3 {
        0..cw
    } else {
        cols
    }
}

/// The MCU columns holding the pixel columns `xs` and the chroma columns
/// `chroma` (`bs` pixels per block side).
fn needed_mcu_cols(f: &Frame, xs: &Range<usize>, chroma: &Range<usize>, bs: usize) -> Range<usize> {
    let h = f.components[0].h;
    let mcu_w = bs * h;
    let first = (xs.start / mcu_w).min(chroma.start * h / mcu_w);
    let last = ((xs.end - 1) / mcu_w).max((chroma.end * h - 1) / mcu_w);
    first..last + 1
}

/// The MCU rows to inverse-transform for the `wanted` image rows (`ch`:
/// chroma rows in the image): those holding the wanted rows, or for 4:2:0
/// chroma their chroma rows and one more each side (the upsampling's
/// neighbours). Entropy decoding can stop after the last one only when the
/// file is `complete` (ends with EOI): otherwise the whole scan is read, so
/// a truncated file is refused whatever rows are wanted.
fn needed_mcu_rows(
    f: &Frame,
    wanted: &Range<usize>,
    ch: usize,
    bs: usize,
    complete: bool,
) -> Range<usize> {
    let luma = &f.components[0];
    let chroma = if luma.v == 2 {
        (wanted.start / 2).saturating_sub(1)..((wanted.end - 1) / 2 + 2).min(ch)
    } else {
        wanted.clone()
    };
    let mcu_h = bs * luma.v;
    let first = (wanted.start / mcu_h).min(chroma.start / bs);
    let last = ((wanted.end - 1) / mcu_h).max((chroma.end - 1) / bs);
    first..if complete { last + 1 } else { usize::MAX }
}

/// Entropy-decodes the scan up to the end of MCU row `mcu_rows.end` (or
/// the whole scan), and inverse-transforms the blocks of the MCUs in
/// `mcu_rows` and `mcu_cols` into `s.planes` (whole blocks of `bs` x `bs`
/// pixels, so planes are padded to the MCU grid).
#[inline(always)]
fn decode_scan(
    f: &Frame,
    bytes: &[u8],
    mcu_rows: Range<usize>,
    mcu_cols: Range<usize>,
    bs: usize,
    s: &mut Scratch,
) -> Result<(), JpegError> {
    let luma = &f.components[0];
    let (mcux, mcuy) = (f.width.div_ceil(8 * luma.h), f.height.div_ceil(8 * luma.v));
    let mut tables = Vec::with_capacity(f.components.len());
    for (ci, c) in f.components.iter().enumerate() {
        let missing = JpegError::MissingHuffmanTable(ci);
        let dc = f.dc[c.td].as_ref().ok_or(missing)?;
        let ac = f.ac[c.ta].as_ref().ok_or(missing)?;
        let stride = mcux * c.h * bs;
        s.planes[ci].resize(stride * mcuy * c.v * bs, 0);
        tables.push((dc, ac, &f.qt[c.tq], stride));
    }
    let mut reader = BitReader::new(bytes, f.scan_start);
    let mut preds = [0i32; 3];
    let mut until_restart = f.restart_interval;
    for my in 0..mcuy.min(mcu_rows.end) {
        // Stop at the end of the data rather than decode padding to the end.
        if reader.overran() {
            return Err(JpegError::Truncated);
        }
        let row_wanted = mcu_rows.contains(&my);
        for mx in 0..mcux {
            let transform = row_wanted && mcu_cols.contains(&mx);
            if f.restart_interval > 0 {
                if until_restart == 0 {
                    reader.restart()?;
                    preds = [0; 3];
                    until_restart = f.restart_interval;
                }
                until_restart -= 1;
            }
            for (ci, c) in f.components.iter().enumerate() {
                let (dc, ac, q, stride) = tables[ci];
                for by in 0..c.v {
                    for bx in 0..c.h {
                        let mut coef = [[0i32; 8]; 8];
                        let has_ac = reader.block(dc, ac, q, &mut preds[ci], &mut coef)?;
                        if !transform {
                            continue;
                        }
                        let at = ((my * c.v + by) * stride + mx * c.h + bx) * bs;
                        let dst = &mut s.planes[ci][at..];
                        if bs < 8 {
                            idct::idct_scaled(&coef, bs, dst, stride);
                        } else if has_ac {
                            idct::idct_block(&coef, dst, stride);
                        } else {
                            idct::idct_dc_only(coef[0][0], dst, stride);
                        }
                    }
                }
            }
        }
    }
    if reader.overran() {
        return Err(JpegError::Truncated);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use crate::decode::{decode_rgb, decode_rgb_area_into, Area, RgbImage};
    use jpeg_encoder::{ColorType, Encoder, SamplingFactor};

    /// A `w` x `h` JPEG of textured gradients at quality 90.
    fn jpeg(w: u16, h: u16, sampling: SamplingFactor, gray: bool, restart: u16) -> Vec<u8> {
        let mut px = Vec::new();
        for y in 0..u32::from(h) {
            for x in 0..u32::from(w) {
                let n = (x * 7919 + y * 104_729) % 23;
                px.extend([(x * 3 + n) as u8, (y * 5 + n) as u8, ((x ^ y) * 9) as u8]);
            }
        }
        encode(px, w, h, sampling, gray, restart, 90)
    }

    /// Encodes the RGB pixels `px` (`w` x `h`): in colour at `sampling`, or
    /// as grey (their red channel); a restart interval if `restart` > 0.
    fn encode(
        px: Vec<u8>,
        w: u16,
        h: u16,
        sampling: SamplingFactor,
        gray: bool,
        restart: u16,
        quality: u8,
    ) -> Vec<u8> {
        let (data, colour) = if gray {
            (px.iter().step_by(3).copied().collect(), ColorType::Luma)
        } else {
            (px, ColorType::Rgb)
        };
        let mut out = Vec::new();
        let mut enc = Encoder::new(&mut out, quality);
        enc.set_sampling_factor(sampling);
        if restart > 0 {
            enc.set_restart_interval(restart);
        }
        enc.encode(&data, w, h, colour).unwrap();
        out
    }

    /// Decodes `rows` x `cols` of `bytes` at `scale/8` of its size into a
    /// buffer of garbage.
    fn decode_area(bytes: &[u8], rows: Range<u32>, cols: Range<u32>, scale: u8) -> RgbImage {
        let mut part = RgbImage {
            data: vec![0x5a; 1 << 16],
            ..RgbImage::default()
        };
        decode_rgb_area_into(bytes, &mut part, &Default::default(), |_, _| Area {
            rows,
            cols,
            scale,
        })
        .unwrap();
        part
    }

    #[test]
    fn decoding_an_area_gives_those_pixels_of_the_full_decode() {
        use SamplingFactor::{F_1_1, F_2_1, F_2_2};
        let cases = [
            jpeg(61, 75, F_2_2, false, 0),
            jpeg(61, 75, F_2_2, false, 3),
            jpeg(150, 40, F_2_2, false, 0),
            jpeg(40, 50, F_2_1, false, 0),
            jpeg(101, 20, F_2_1, false, 2),
            jpeg(40, 50, F_1_1, false, 0),
            jpeg(33, 41, F_1_1, true, 0),
            jpeg(3, 5, F_2_2, false, 0),
        ];
        for (bytes, scale) in cases.iter().flat_map(|b| [8, 7, 4, 1].map(|n| (b, n))) {
            let full = decode_area(bytes, 0..u32::MAX, 0..u32::MAX, scale);
            let (w, h) = (full.width as usize, full.height as usize);
            let spans = |n: usize| {
                let mut v = vec![(0, 1), (0, n), (n - 1, n), (n / 2, n / 2 + 1)];
                for a in [1, 2, 3, 5, 7, 15, 16, 17, 31, 33, 47] {
                    for len in [1, 2, 3, 4, 9, 20] {
                        if a + len <= n {
                            v.push((a, a + len));
                        }
                    }
                }
                v
            };
            let rows = [
                (0, 1),
                (0, 17),
                (15, 16),
                (16, 17),
                (17, 19),
                (h - 1, h),
                (0, h),
            ];
            for (a, b) in rows.into_iter().filter(|&(_, b)| b <= h) {
                for (c, d) in spans(w) {
                    let part = decode_area(bytes, a as u32..b as u32, c as u32..d as u32, scale);
                    assert_eq!((part.width, part.height), (full.width, full.height));
                    for y in a..b {
                        let px = (y * w + c) * 3..(y * w + d) * 3;
                        assert_eq!(
                            part.data[px.clone()],
                            full.data[px],
                            "rows {a}..{b} cols {c}..{d} of {w}x{h} at {scale}/8, row {y}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_truncated_file_is_refused_even_if_the_wanted_rows_are_intact() {
        let bytes = jpeg(64, 64, SamplingFactor::F_2_2, false, 0);
        let cut = &bytes[..bytes.len() - 200];
        let mut out = RgbImage::default();
        let head = |w, _| Area {
            rows: 0..8,
            cols: 0..w,
            scale: 8,
        };
        let e = decode_rgb_area_into(cut, &mut out, &Default::default(), head).unwrap_err();
        assert_eq!(e, crate::DecodeError::Jpeg("truncated JPEG data".into()));
        assert_eq!(e.to_string(), "corrupt JPEG: truncated JPEG data");
    }

    #[test]
    fn a_reduced_size_decode_is_the_full_decode_averaged_down() {
        use SamplingFactor::{F_1_1, F_2_1, F_2_2};
        // Smooth content, as photographs are at the scale of a block.
        let smooth = |w: u16, h: u16, sampling, gray| {
            let mut px = Vec::new();
            for y in 0..f64::from(h) as usize {
                for x in 0..usize::from(w) {
                    let (x, y) = (x as f64, y as f64);
                    px.extend([
                        (128.0 + 90.0 * (x / 23.0).sin() * (y / 31.0).cos()) as u8,
                        (128.0 + 80.0 * ((x + y) / 40.0).cos()) as u8,
                        (60.0 + x / 3.0 + y / 5.0) as u8,
                    ]);
                }
            }
            encode(px, w, h, sampling, gray, 0, 95)
        };
        for bytes in [
            smooth(200, 120, F_2_2, false),
            smooth(93, 77, F_2_1, false),
            smooth(64, 48, F_1_1, false),
            smooth(50, 70, F_1_1, true),
        ] {
            let full = decode_rgb(&bytes).unwrap();
            let (w, h) = (full.width as usize, full.height as usize);
            for n in [1u8, 2, 4, 5, 6, 7] {
                let small = decode_area(&bytes, 0..u32::MAX, 0..u32::MAX, n);
                let (sw, sh) = crate::decode::scaled_size(w as u32, h as u32, n);
                assert_eq!((small.width, small.height), (sw, sh));
                // Each reduced pixel against the mean of the full pixels
                // under it (away from the image's padded right and bottom
                // edges).
                let k = 8.0 / f64::from(n);
                let (mut sum, mut count, mut worst) = (0.0, 0.0, 0.0f64);
                for y in 0..(h as f64 / k) as usize {
                    for x in 0..(w as f64 / k) as usize {
                        for c in 0..3 {
                            let (mut acc, mut m) = (0.0, 0.0);
                            for fy in (y as f64 * k) as usize..((y + 1) as f64 * k).ceil() as usize
                            {
                                for fx in
                                    (x as f64 * k) as usize..((x + 1) as f64 * k).ceil() as usize
                                {
                                    acc += f64::from(full.data[(fy * w + fx) * 3 + c]);
                                    m += 1.0;
                                }
                            }
                            let d = (f64::from(small.data[(y * sw as usize + x) * 3 + c])
                                - acc / m)
                                .abs();
                            sum += d;
                            count += 1.0;
                            worst = worst.max(d);
                        }
                    }
                }
                let mean = sum / count;
                assert!(
                    mean < 2.5 && worst < 25.0,
                    "{w}x{h} at {n}/8: mean {mean:.2}, worst {worst:.1}"
                );
            }
        }
    }
}
