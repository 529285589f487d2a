//! The [`DecodeLimits`] of a JPEG, checked from its frame header before
//! either decoder (ours or zune-jpeg) allocates: the pixel budget, and the
//! least entropy-coded data an image of the declared size can have.
//!
//! The least data, from the Huffman code's shortest code (1 bit):
//! - sequential (SOF0, SOF1): every block of every component is coded once,
//!   a DC and at least one AC symbol, so at least 2 bits a block;
//! - progressive (SOF2): the first DC scan codes each block of its
//!   components, at least 1 bit a block (the bound takes the component with
//!   the fewest blocks);
//! - other processes (arithmetic, lossless): no bound here; neither decoder
//!   takes them.
//!
//! A header this walk cannot read is left to the decoders, which refuse it
//! (and zune-jpeg checks the pixel budget again from its own parse).

use crate::decode::DecodeError;
use crate::limits::{check_data, DecodeLimits};

/// What the bound needs from the first frame header.
struct Geometry {
    marker: u8,
    width: usize,
    height: usize,
    /// `(h, v)` sampling of each component.
    sampling: Vec<(usize, usize)>,
}

/// Checks `limits` against the frame header and the data after the first
/// scan header.
pub(crate) fn check(bytes: &[u8], limits: &DecodeLimits) -> Result<(), DecodeError> {
    let Some((g, data_start)) = first_scan(bytes) else {
        return Ok(());
    };
    if g.width == 0 || g.height == 0 {
        return Ok(()); // DNL or broken: the decoders refuse it
    }
    limits.check_pixels(g.width, g.height)?;
    check_data(
        g.width,
        g.height,
        bytes.len().saturating_sub(data_start),
        min_scan_bytes(&g),
    )
}

/// Fewest bytes of entropy-coded data a complete image of `g` takes.
fn min_scan_bytes(g: &Geometry) -> u64 {
    let hmax = g.sampling.iter().map(|s| s.0).max().unwrap_or(1);
    let vmax = g.sampling.iter().map(|s| s.1).max().unwrap_or(1);
    let blocks = g.sampling.iter().map(|&(h, v)| {
        let cw = (g.width * h).div_ceil(hmax);
        let ch = (g.height * v).div_ceil(vmax);
        (cw.div_ceil(8) * ch.div_ceil(8)) as u64
    });
    let bits = match g.marker {
        0xc0 | 0xc1 => blocks.map(|b| 2 * b).sum(),
        0xc2 => blocks.min().unwrap_or(0),
        _ => 0,
    };
    bits / 8
}

/// The first frame header and the offset of the first scan's data, or
/// `None` if the markers up to there cannot be read.
fn first_scan(bytes: &[u8]) -> Option<(Geometry, usize)> {
    let mut pos = 2;
    let mut frame = None;
    loop {
        while bytes.get(pos) == Some(&0xff) && bytes.get(pos + 1) == Some(&0xff) {
            pos += 1;
        }
        if *bytes.get(pos)? != 0xff {
            return None;
        }
        let marker = *bytes.get(pos + 1)?;
        pos += 2;
        if matches!(marker, 0xd0..=0xd7 | 0x01) {
            continue;
        }
        if marker == 0xd9 {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([*bytes.get(pos)?, *bytes.get(pos + 1)?]));
        let seg = bytes.get(pos + 2..pos + len).filter(|_| len >= 2)?;
        match marker {
            0xc0..=0xc3 | 0xc5..=0xc7 | 0xc9..=0xcb | 0xcd..=0xcf if frame.is_none() => {
                frame = Some(parse_sof(marker, seg)?);
            }
            0xda => return Some((frame?, pos + len)),
            _ => {}
        }
        pos += len;
    }
}

fn parse_sof(marker: u8, seg: &[u8]) -> Option<Geometry> {
    let height = usize::from(u16::from_be_bytes([*seg.get(1)?, *seg.get(2)?]));
    let width = usize::from(u16::from_be_bytes([*seg.get(3)?, *seg.get(4)?]));
    let n = usize::from(*seg.get(5)?);
    let mut sampling = Vec::with_capacity(n);
    for c in seg.get(6..6 + 3 * n)?.chunks_exact(3) {
        let (h, v) = (usize::from(c[1] >> 4), usize::from(c[1] & 15));
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
            return None;
        }
        sampling.push((h, v));
    }
    if sampling.is_empty() {
        return None;
    }
    Some(Geometry {
        marker,
        width,
        height,
        sampling,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(marker: u8, w: usize, h: usize, sampling: &[(usize, usize)]) -> Geometry {
        Geometry {
            marker,
            width: w,
            height: h,
            sampling: sampling.to_vec(),
        }
    }

    #[test]
    fn the_least_data_counts_blocks_per_component() {
        // 4:2:0, 64x64: 64 luma blocks + 16 + 16 chroma, 2 bits each.
        let yuv420 = [(2, 2), (1, 1), (1, 1)];
        assert_eq!(min_scan_bytes(&geometry(0xc0, 64, 64, &yuv420)), 24);
        // Progressive: 1 bit for each block of the smallest component.
        assert_eq!(min_scan_bytes(&geometry(0xc2, 64, 64, &yuv420)), 2);
        // Gray, odd size: ceil(9/8) * ceil(17/8) = 6 blocks.
        assert_eq!(min_scan_bytes(&geometry(0xc0, 9, 17, &[(1, 1)])), 1);
        // Arithmetic coding: no bound.
        assert_eq!(min_scan_bytes(&geometry(0xc9, 64, 64, &yuv420)), 0);
        // 30000x30000 4:2:0 needs megabytes.
        assert!(min_scan_bytes(&geometry(0xc0, 30000, 30000, &yuv420)) > 5_000_000);
    }

    #[test]
    fn unreadable_headers_are_left_to_the_decoders() {
        let limits = DecodeLimits::default();
        assert!(check(&[0xff, 0xd8], &limits).is_ok());
        assert!(check(&[0xff, 0xd8, 0xff, 0xc0, 0x00], &limits).is_ok());
        assert!(check(&[0xff, 0xd8, 0x12, 0x34], &limits).is_ok());
    }
}
