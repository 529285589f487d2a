//! Per-pixel colour operations eight pixels at a time, so the compiler
//! turns them into SIMD: [`map_pixels`] hands a [`PixelMap`] the three
//! channels of eight pixels as lanes, and runs the whole loop in an AVX2
//! build where the CPU has it (chosen at run time). (A trait rather than a
//! closure: its `#[inline(always)]` method is compiled into the AVX2 loop,
//! where a closure may be left a call to code built without AVX2.)
//!
//! The maps are written without branches (a choice between two values
//! computed for every lane, as torch computes over a tensor), in `f32`
//! operations in torch's order. Vector lanes compute exactly what scalar
//! code does with them (no fused multiply-add: AVX2 does not enable FMA),
//! so every build gives the same bytes.

/// Pixels per step.
pub(super) const LANES: usize = 8;

/// One channel of [`LANES`] pixels.
pub(super) type Lanes<T> = [T; LANES];

/// A per-pixel operation on [`LANES`] pixels at once.
pub(super) trait PixelMap {
    /// The new `[r, g, b]` of the pixels `rgb` (each a lane per pixel).
    fn map(&self, rgb: [Lanes<u8>; 3]) -> [Lanes<u8>; 3];
}

/// Replaces every pixel of the RGB8 HWC `image` by `f` of it, [`LANES`]
/// pixels per call. The last pixels
/// are padded with zeros to a whole step; what `f` makes of the padding is
/// dropped.
pub(super) fn map_pixels<F>(image: &mut [u8], f: F)
where
    F: PixelMap,
{
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `map_avx2` only requires AVX2, which this CPU has
        // (checked just above).
        return unsafe { map_avx2(image, f) };
    }
    map_portable(image, f);
}

/// [`map_portable`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2<F>(image: &mut [u8], f: F)
where
    F: PixelMap,
{
    map_portable(image, f);
}

#[inline(always)]
pub(super) fn map_portable<F>(image: &mut [u8], f: F)
where
    F: PixelMap,
{
    let mut blocks = image.chunks_exact_mut(3 * LANES);
    for block in &mut blocks {
        map_block(block, &f);
    }
    let rest = blocks.into_remainder();
    if !rest.is_empty() {
        let mut block = [0u8; 3 * LANES];
        block[..rest.len()].copy_from_slice(rest);
        map_block(&mut block, &f);
        rest.copy_from_slice(&block[..rest.len()]);
    }
}

/// `f` of the [`LANES`] pixels of `block` (`3 * LANES` bytes), in place.
#[inline(always)]
fn map_block<F>(block: &mut [u8], f: &F)
where
    F: PixelMap,
{
    let mut rgb = [[0u8; LANES]; 3];
    for (i, px) in block.chunks_exact(3).enumerate().take(LANES) {
        for c in 0..3 {
            rgb[c][i] = px[c];
        }
    }
    let out = f.map(rgb);
    for (i, px) in block.chunks_exact_mut(3).enumerate().take(LANES) {
        for c in 0..3 {
            px[c] = out[c][i];
        }
    }
}

/// `x as u8` for an `x` the caller knows is in [0, 256): truncation, as
/// `as u8` does there, without the checks for NaN and out-of-range values
/// that keep `as` from vectorising.
#[inline(always)]
pub(super) fn truncate_u8(x: f32) -> u8 {
    debug_assert!((0.0..256.0).contains(&x), "{x}");
    // SAFETY: every caller passes a finite value in [0, 256) (clamped, or a
    // product of values in [0, 1] and 255.999), which truncates to an i32
    // in 0..=255.
    unsafe { x.to_int_unchecked::<i32>() as u8 }
}
