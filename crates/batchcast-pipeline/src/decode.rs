//! Decoding JPEG and PNG bytes to 8-bit RGB, as PIL's `Image.open(f)
//! .convert("RGB")` does for torchvision's default loader.
//!
//! The format is recognised by its magic bytes, not the file name. PNG goes
//! through the png crate (palette expanded, 16-bit reduced to its high byte,
//! gray replicated, alpha dropped without compositing, as `convert("RGB")`
//! does; one known difference: PIL clips 16-bit *grayscale* to 255 where this
//! takes the high byte).
//!
//! JPEG: baseline files, grayscale or YCbCr 4:4:4 / 4:2:2 / 4:2:0 (what
//! photo datasets are), go through `crate::jpeg`, which reproduces
//! libjpeg-turbo (what PIL links) bit for bit. Anything else (progressive,
//! CMYK/YCCK, other subsamplings, 12-bit) goes through zune-jpeg, which
//! differs from libjpeg by a few levels.
//!
//! Measured (the 2000 generated ~500x375 4:2:0 q90 photos of
//! `pipeline-bench`, one core, decode only): zune-jpeg 790-810 images/s, but
//! its arithmetic is not libjpeg's (4:2:0 upsampling rounded twice, 14-bit
//! colour conversion; 10% of values 2 or more levels off jpeg-decoder, some
//! 7+); jpeg-decoder 510-530 images/s, starts a thread per image, and is
//! itself up to 5 levels off libjpeg-turbo (16-bit SIMD IDCT, 6-bit colour
//! conversion); `crate::jpeg` 960-1000 images/s and identical to PIL 13 /
//! libjpeg-turbo 3.2 on every value of 84 re-encoded test images (4:4:4,
//! 4:2:2, 4:2:0, gray, odd sizes, q75-100).

use std::io::Cursor;
use std::ops::Range;

use crate::jpeg::Outcome;
use crate::limits::{check_data, deflate_min_bytes, DecodeLimits};
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

/// A decoded image: 8-bit RGB, row-major, `width * height * 3` bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Pixels, `[r, g, b]` per pixel, rows top to bottom.
    pub data: Vec<u8>,
}

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Neither JPEG nor PNG magic bytes.
    #[error("not a JPEG or PNG file (first bytes {0:02x?})")]
    UnknownFormat(Vec<u8>),
    /// The JPEG decoder refused the data.
    #[error("corrupt JPEG: {0}")]
    Jpeg(String),
    /// The PNG decoder refused the data.
    #[error("corrupt PNG: {0}")]
    Png(String),
    /// A zero-sized or absurdly large image.
    #[error("unsupported image size {0}x{1}")]
    BadSize(usize, usize),
    /// The declared size is over [`DecodeLimits::max_pixels`].
    #[error(
        "the image declares {width}x{height} pixels, over the pixel budget of {max_pixels} \
         (a decompression-bomb guard, PIL's Image.MAX_IMAGE_PIXELS by default); if the file \
         is genuine, raise the budget: --max-pixels on the command line, \
         Pipeline::with_max_pixels in Rust"
    )]
    TooManyPixels {
        /// Declared width.
        width: usize,
        /// Declared height.
        height: usize,
        /// The budget.
        max_pixels: u64,
    },
    /// The file has less compressed data than any complete image of its
    /// declared size takes: truncated, or forged to look large.
    #[error(
        "the image declares {width}x{height} pixels but holds only {have} bytes of compressed \
         data, fewer than the {need} any complete image of that size takes; the file is \
         truncated or forged: re-create or remove it"
    )]
    TooLittleData {
        /// Declared width.
        width: usize,
        /// Declared height.
        height: usize,
        /// Bytes of compressed data in the file.
        have: usize,
        /// The fewest bytes a complete image of that size takes.
        need: u64,
    },
}

const PNG_MAGIC: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// Decodes a JPEG or PNG to RGB, within the default [`DecodeLimits`].
///
/// # Errors
/// Unknown format, corrupt data, or over the limits; see [`DecodeError`].
pub fn decode_rgb(bytes: &[u8]) -> Result<RgbImage, DecodeError> {
    let mut image = RgbImage::default();
    decode_rgb_into(bytes, &mut image, &DecodeLimits::default())?;
    Ok(image)
}

/// Decodes a JPEG or PNG to RGB into `out`, reusing its allocation. The
/// file's declared size is checked against `limits` before any pixel
/// memory is allocated.
///
/// # Errors
/// Unknown format, corrupt data, or over the limits; see [`DecodeError`].
/// `out` is unspecified after an error.
pub fn decode_rgb_into(
    bytes: &[u8],
    out: &mut RgbImage,
    limits: &DecodeLimits,
) -> Result<(), DecodeError> {
    decode_rgb_area_into(bytes, out, limits, Area::all)
}

/// The part of an image a caller reads: rows and columns, half-open, of
/// the image at `scale/8` of its size ([`scaled_size`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Area {
    /// Rows, top to bottom.
    pub(crate) rows: Range<u32>,
    /// Columns, left to right.
    pub(crate) cols: Range<u32>,
    /// Eighths of the full size to decode at, 1..=8: below 8, a JPEG this
    /// crate's decoder handles is decoded at reduced size straight from
    /// its DCT coefficients; any other image comes whole. The decoded
    /// image's size says which.
    pub(crate) scale: u8,
}

impl Area {
    /// The whole of a `width` x `height` image, at full size.
    pub(crate) fn all(width: u32, height: u32) -> Area {
        Area {
            rows: 0..height,
            cols: 0..width,
            scale: 8,
        }
    }
}

/// The size of a `width` x `height` image decoded at `scale/8` of it
/// (each side rounded up, as libjpeg's scaled decoding does).
pub(crate) fn scaled_size(width: u32, height: u32, scale: u8) -> (u32, u32) {
    let n = u64::from(scale.clamp(1, 8));
    let side = |x: u32| (u64::from(x) * n).div_ceil(8) as u32;
    (side(width), side(height))
}

/// [`decode_rgb_into`] for a caller that reads only part of the image:
/// `area` gets the image's `(width, height)` and returns the [`Area`] it
/// will read. Only those pixels are guaranteed; the others are
/// unspecified. (The JPEG decoder then stops entropy decoding after the
/// last row, and skips the inverse DCT and colour conversion of the rest.)
///
/// # Errors
/// As [`decode_rgb_into`].
pub(crate) fn decode_rgb_area_into(
    bytes: &[u8],
    out: &mut RgbImage,
    limits: &DecodeLimits,
    area: impl FnOnce(u32, u32) -> Area,
) -> Result<(), DecodeError> {
    // A decoder bug must not take the whole batch down: turn a panic on
    // hostile input into an error for this one file.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if bytes.starts_with(&[0xff, 0xd8]) {
            decode_jpeg(bytes, out, limits, area)
        } else if bytes.starts_with(&PNG_MAGIC) {
            decode_png(bytes, out, limits)
        } else {
            Err(DecodeError::UnknownFormat(
                bytes.iter().take(8).copied().collect(),
            ))
        }
    }));
    result.unwrap_or_else(|_| Err(DecodeError::Jpeg("decoder panicked".into())))
}

pub(crate) fn check_size(width: usize, height: usize) -> Result<(u32, u32), DecodeError> {
    match (u32::try_from(width), u32::try_from(height)) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 && width.saturating_mul(height) <= 1 << 30 => Ok((w, h)),
        _ => Err(DecodeError::BadSize(width, height)),
    }
}

fn decode_jpeg(
    bytes: &[u8],
    out: &mut RgbImage,
    limits: &DecodeLimits,
    area: impl FnOnce(u32, u32) -> Area,
) -> Result<(), DecodeError> {
    crate::jpeg::check_limits(bytes, limits)?;
    if crate::jpeg::decode(bytes, out, area)? == Outcome::Decoded {
        return Ok(());
    }
    let jerr = |e: zune_jpeg::errors::DecodeErrors| DecodeError::Jpeg(e.to_string());
    // JPEG's own maximum side; the pixel budget is the bound that matters.
    let side = usize::from(u16::MAX);
    let options = DecoderOptions::default()
        .set_max_width(side)
        .set_max_height(side);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(jerr)?;
    let (w, h) = decoder
        .dimensions()
        .ok_or_else(|| DecodeError::Jpeg("no frame header".into()))?;
    // Again from zune's own parse, in case it reads a header ours did not.
    limits.check_pixels(w, h)?;
    let (width, height) = check_size(w, h)?;
    let channels = decoder
        .output_colorspace()
        .map_or(3, |c: ColorSpace| c.num_components());
    let pixels = w * h;
    out.width = width;
    out.height = height;
    if channels == 3 {
        out.data.resize(pixels * 3, 0);
        return decoder.decode_into(&mut out.data).map_err(jerr);
    }
    let mut raw = vec![0u8; pixels * channels];
    decoder.decode_into(&mut raw).map_err(jerr)?;
    out.data.clear();
    out.data.reserve(pixels * 3);
    append_rgb(&raw, channels, &mut out.data);
    Ok(())
}

fn decode_png(bytes: &[u8], out: &mut RgbImage, limits: &DecodeLimits) -> Result<(), DecodeError> {
    let perr = |e: png::DecodingError| DecodeError::Png(e.to_string());
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().map_err(perr)?;
    let info = reader.info();
    let (w, h) = (info.width as usize, info.height as usize);
    limits.check_pixels(w, h)?;
    let raw_bits = (w as u64 * h as u64).saturating_mul(info.bits_per_pixel() as u64);
    check_data(w, h, bytes.len(), deflate_min_bytes(raw_bits / 8))?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| DecodeError::Png("image too large".into()))?;
    let mut raw = vec![0u8; size];
    let info = reader.next_frame(&mut raw).map_err(perr)?;
    let (width, height) = check_size(info.width as usize, info.height as usize)?;
    let channels = match info.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            return Err(DecodeError::Png("palette was not expanded".into()));
        }
    };
    let w = width as usize;
    let row = w * channels;
    if info.line_size < row || raw.len() < info.line_size * height as usize {
        return Err(DecodeError::Png("short image data".into()));
    }
    out.width = width;
    out.height = height;
    out.data.clear();
    out.data.reserve(w * height as usize * 3);
    for line in raw.chunks(info.line_size).take(height as usize) {
        append_rgb(&line[..row], channels, &mut out.data);
    }
    Ok(())
}

/// Appends the pixels of `raw`, of 1 (gray), 2 (gray+alpha), 3 (RGB) or 4
/// (RGBA) channels, to `out` as RGB.
fn append_rgb(raw: &[u8], channels: usize, out: &mut Vec<u8>) {
    if channels == 3 {
        out.extend_from_slice(raw);
        return;
    }
    for px in raw.chunks_exact(channels) {
        match *px {
            [g] | [g, _] => out.extend_from_slice(&[g, g, g]),
            [r, g, b] | [r, g, b, _] => out.extend_from_slice(&[r, g, b]),
            _ => out.extend_from_slice(&[0, 0, 0]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_bytes_are_refused_with_their_magic() {
        let err = decode_rgb(b"GIF89a....").unwrap_err();
        assert!(matches!(err, DecodeError::UnknownFormat(_)));
        assert!(err.to_string().contains("47"), "{err}");
    }

    #[test]
    fn corrupt_jpeg_is_an_error_not_a_panic() {
        let mut bytes = vec![0xff, 0xd8, 0xff, 0xc0, 0x00, 0x11];
        bytes.extend_from_slice(&[0xab; 40]);
        assert!(decode_rgb(&bytes).is_err());
        assert!(decode_rgb(&[0xff, 0xd8]).is_err());
    }

    #[test]
    fn gray_and_alpha_expand_to_rgb() {
        let mut out = Vec::new();
        append_rgb(&[7, 9, 200, 1], 2, &mut out);
        assert_eq!(out, [7, 7, 7, 200, 200, 200]);
        out.clear();
        append_rgb(&[1, 2, 3, 4, 5, 6, 7, 8], 4, &mut out);
        assert_eq!(out, [1, 2, 3, 5, 6, 7]);
    }
}
