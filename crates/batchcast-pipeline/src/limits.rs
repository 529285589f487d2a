//! [`DecodeLimits`]: what one file may cost to decode, checked from its
//! header before anything is allocated.
//!
//! Two checks, the same for every decoder (our baseline JPEG decoder, the
//! zune-jpeg fallback, PNG):
//! - **A pixel budget.** A file declaring more than
//!   [`max_pixels`](DecodeLimits::max_pixels) pixels is refused. The default
//!   is PIL's `Image.MAX_IMAGE_PIXELS` (89,478,485, a 0x5555555 byte RGBA
//!   image); PIL warns above it and raises `DecompressionBombError` above
//!   twice it, we refuse above it (a skipped file is named, so the user can
//!   raise the budget; a warning nobody reads is not a bound).
//! - **Enough data for the declared size.** Every coded 8x8 block of a
//!   Huffman JPEG takes at least one bit per scan it appears in; every
//!   deflate byte expands to at most 1032 bytes. A file too small to hold
//!   the image it declares is refused at once, so a 600-byte file never
//!   costs a full-size allocation or a full-size decode of padding.

use crate::decode::DecodeError;

/// PIL's default decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`).
pub const DEFAULT_MAX_PIXELS: u64 = 89_478_485;

/// The most deflate expands: 258 bytes from a 2-bit code, about 1032:1.
const DEFLATE_MAX_RATIO: u64 = 1032;

/// Bounds on what decoding one file may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest `width * height` decoded; larger files are refused with
    /// [`DecodeError::TooManyPixels`] before any pixel memory is allocated.
    pub max_pixels: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }
}

impl DecodeLimits {
    /// Refuses a declared size over the pixel budget.
    pub(crate) fn check_pixels(&self, width: usize, height: usize) -> Result<(), DecodeError> {
        let pixels = (width as u64).saturating_mul(height as u64);
        if pixels > self.max_pixels {
            return Err(DecodeError::TooManyPixels {
                width,
                height,
                max_pixels: self.max_pixels,
            });
        }
        Ok(())
    }
}

/// Refuses a file whose `have` bytes of coded data are fewer than the
/// `need` any complete image of its declared size takes.
pub(crate) fn check_data(
    width: usize,
    height: usize,
    have: usize,
    need: u64,
) -> Result<(), DecodeError> {
    if (have as u64) < need {
        return Err(DecodeError::TooLittleData {
            width,
            height,
            have,
            need,
        });
    }
    Ok(())
}

/// The fewest compressed bytes that can inflate to `raw_bytes`.
pub(crate) fn deflate_min_bytes(raw_bytes: u64) -> u64 {
    raw_bytes / DEFLATE_MAX_RATIO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_is_pils() {
        let limits = DecodeLimits::default();
        assert_eq!(limits.max_pixels, 89_478_485);
        // 9459x9459 = 89,472,681 fits; 9460x9460 does not.
        assert!(limits.check_pixels(9459, 9459).is_ok());
        let err = limits.check_pixels(9460, 9460).unwrap_err();
        let m = err.to_string();
        assert!(m.contains("9460x9460"), "{m}");
        assert!(m.contains("89478485"), "{m}");
        assert!(m.contains("--max-pixels"), "{m}");
    }

    #[test]
    fn too_little_data_names_both_sizes() {
        let m = check_data(30000, 30000, 600, 5_000_000)
            .unwrap_err()
            .to_string();
        assert!(m.contains("30000x30000"), "{m}");
        assert!(m.contains("600"), "{m}");
        assert!(m.contains("5000000"), "{m}");
        assert!(check_data(10, 10, 600, 600).is_ok());
    }
}
