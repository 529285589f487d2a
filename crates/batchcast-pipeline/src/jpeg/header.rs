//! JPEG marker parsing up to the first scan: frame, tables, restart
//! interval, and the markers that decide the colour transform (JFIF, Adobe).
//!
//! Only what the baseline decoder handles is accepted as [`Parsed::Baseline`];
//! anything else it does not do (progressive, arithmetic coding, 12-bit,
//! CMYK, unusual sampling, a first scan without all components) is
//! [`Parsed::Unsupported`], for the general decoder to take.

use super::huffman::HuffTable;

use super::error::JpegError;

/// One component of the frame and its scan tables.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Component {
    pub(crate) id: u8,
    pub(crate) h: usize,
    pub(crate) v: usize,
    pub(crate) tq: usize,
    pub(crate) td: usize,
    pub(crate) ta: usize,
}

/// A baseline frame ready to decode.
pub(crate) struct Frame {
    pub(crate) width: usize,
    pub(crate) height: usize,
    /// 1 (grayscale) or 3 (YCbCr) components, in scan order = frame order.
    pub(crate) components: Vec<Component>,
    /// Quantisation tables in zigzag order.
    pub(crate) qt: [[u16; 64]; 4],
    pub(crate) dc: [Option<HuffTable>; 4],
    pub(crate) ac: [Option<HuffTable>; 4],
    pub(crate) restart_interval: usize,
    /// Offset of the first byte of entropy-coded data.
    pub(crate) scan_start: usize,
}

pub(crate) enum Parsed {
    Baseline(Box<Frame>),
    Unsupported,
}

fn be16(b: &[u8], at: usize) -> Result<usize, JpegError> {
    match b.get(at..at + 2) {
        Some(s) => Ok(usize::from(u16::from_be_bytes([s[0], s[1]]))),
        None => Err(JpegError::TruncatedHeader),
    }
}

/// Parses markers from SOI to the first SOS.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, JpegError> {
    let mut pos = 2; // after SOI
    let mut qt = [[0u16; 64]; 4];
    let mut dc: [Option<HuffTable>; 4] = Default::default();
    let mut ac: [Option<HuffTable>; 4] = Default::default();
    let mut restart_interval = 0;
    let (mut jfif, mut adobe_transform) = (false, None);
    let mut frame: Option<(usize, usize, Vec<Component>)> = None;
    loop {
        // Markers may be preceded by any number of 0xff fill bytes.
        while bytes.get(pos) == Some(&0xff) && bytes.get(pos + 1) == Some(&0xff) {
            pos += 1;
        }
        let (Some(&0xff), Some(&marker)) = (bytes.get(pos), bytes.get(pos + 1)) else {
            return Err(JpegError::NoMarker);
        };
        pos += 2;
        if matches!(marker, 0xd0..=0xd7 | 0x01) {
            continue; // no payload
        }
        if marker == 0xd9 {
            return Err(JpegError::NoScan);
        }
        let len = be16(bytes, pos)?;
        let Some(seg) = bytes.get(pos + 2..pos + len).filter(|_| len >= 2) else {
            return Err(JpegError::TruncatedSegment(marker));
        };
        match marker {
            0xc0 | 0xc1 => {
                if frame.is_some() {
                    return Err(JpegError::TwoFrames);
                }
                match parse_sof(seg)? {
                    Some(f) => frame = Some(f),
                    None => return Ok(Parsed::Unsupported),
                }
            }
            // Other SOFs: progressive, lossless, arithmetic, hierarchical.
            0xc2..=0xc3 | 0xc5..=0xc7 | 0xc9..=0xcb | 0xcd..=0xcf => {
                return Ok(Parsed::Unsupported)
            }
            0xc4 => parse_dht(seg, &mut dc, &mut ac)?,
            0xdb => parse_dqt(seg, &mut qt)?,
            0xdd => restart_interval = be16(seg, 0)?,
            0xe0 => jfif |= seg.starts_with(b"JFIF\0"),
            0xee if seg.starts_with(b"Adobe") && seg.len() >= 12 => {
                adobe_transform = Some(seg[11]);
            }
            0xda => {
                let Some((width, height, mut components)) = frame else {
                    return Err(JpegError::ScanBeforeFrame);
                };
                if !scan_covers_frame(seg, &mut components)? {
                    return Ok(Parsed::Unsupported);
                }
                // libjpeg's colour space guess for 3 components: YCbCr unless
                // an Adobe marker says RGB, or (no JFIF, no Adobe) the ids
                // spell R, G, B.
                if components.len() == 3 {
                    let ids: Vec<u8> = components.iter().map(|c| c.id).collect();
                    let rgb = match (jfif, adobe_transform) {
                        (true, _) => false,
                        (false, Some(t)) => t == 0,
                        (false, None) => ids == b"RGB",
                    };
                    if rgb {
                        return Ok(Parsed::Unsupported);
                    }
                }
                return Ok(Parsed::Baseline(Box::new(Frame {
                    width,
                    height,
                    components,
                    qt,
                    dc,
                    ac,
                    restart_interval,
                    scan_start: pos + len,
                })));
            }
            _ => {} // APPn, COM, DNL...: skipped
        }
        pos += len;
    }
}

/// `Ok(None)` for a valid frame the baseline decoder does not handle.
fn parse_sof(seg: &[u8]) -> Result<Option<(usize, usize, Vec<Component>)>, JpegError> {
    if seg.len() < 6 {
        return Err(JpegError::ShortFrame);
    }
    let precision = seg[0];
    let height = be16(seg, 1)?;
    let width = be16(seg, 3)?;
    let n = usize::from(seg[5]);
    if seg.len() < 6 + 3 * n || n == 0 {
        return Err(JpegError::ShortFrame);
    }
    if width == 0 || height == 0 {
        return Err(JpegError::BadSize(width, height));
    }
    if precision != 8 || !(n == 1 || n == 3) {
        return Ok(None);
    }
    let mut components = Vec::with_capacity(n);
    for c in seg[6..6 + 3 * n].chunks_exact(3) {
        let (h, v, tq) = (
            usize::from(c[1] >> 4),
            usize::from(c[1] & 15),
            usize::from(c[2]),
        );
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) || tq > 3 {
            return Err(JpegError::BadComponent);
        }
        components.push(Component {
            id: c[0],
            h,
            v,
            tq,
            td: 0,
            ta: 0,
        });
    }
    if n == 1 {
        // A single component is never interleaved: its sampling is 1x1.
        components[0].h = 1;
        components[0].v = 1;
    } else {
        let chroma_1x1 = components[1..].iter().all(|c| c.h == 1 && c.v == 1);
        let luma = (components[0].h, components[0].v);
        if !chroma_1x1 || !matches!(luma, (1, 1) | (2, 1) | (2, 2)) {
            return Ok(None);
        }
    }
    Ok(Some((width, height, components)))
}

/// Reads the table selectors of the first scan; `false` unless it is one
/// interleaved scan of every component in frame order, of the full spectrum.
fn scan_covers_frame(seg: &[u8], components: &mut [Component]) -> Result<bool, JpegError> {
    let n = usize::from(*seg.first().ok_or(JpegError::ShortScan)?);
    if seg.len() < 1 + 2 * n + 3 {
        return Err(JpegError::ShortScan);
    }
    if n != components.len() {
        return Ok(false);
    }
    for (c, sel) in components.iter_mut().zip(seg[1..].chunks_exact(2)) {
        if sel[0] != c.id {
            return Ok(false);
        }
        (c.td, c.ta) = (usize::from(sel[1] >> 4), usize::from(sel[1] & 15));
        if c.td > 3 || c.ta > 3 {
            return Err(JpegError::BadTableSelector);
        }
    }
    let spectral = &seg[1 + 2 * n..];
    Ok(spectral[0] == 0 && spectral[1] == 63 && spectral[2] == 0)
}

fn parse_dqt(mut seg: &[u8], qt: &mut [[u16; 64]; 4]) -> Result<(), JpegError> {
    while let Some((&pq_tq, rest)) = seg.split_first() {
        let (wide, id) = (pq_tq >> 4 != 0, usize::from(pq_tq & 15));
        let size = if wide { 128 } else { 64 };
        if id > 3 || rest.len() < size {
            return Err(JpegError::BadQuantTable);
        }
        for (i, q) in qt[id].iter_mut().enumerate() {
            *q = if wide {
                u16::from_be_bytes([rest[2 * i], rest[2 * i + 1]])
            } else {
                u16::from(rest[i])
            };
        }
        seg = &rest[size..];
    }
    Ok(())
}

fn parse_dht(
    mut seg: &[u8],
    dc: &mut [Option<HuffTable>; 4],
    ac: &mut [Option<HuffTable>; 4],
) -> Result<(), JpegError> {
    while seg.len() >= 17 {
        let (class, id) = (seg[0] >> 4, usize::from(seg[0] & 15));
        let mut counts = [0u8; 16];
        counts.copy_from_slice(&seg[1..17]);
        let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
        let Some(symbols) = seg.get(17..17 + total) else {
            return Err(JpegError::TruncatedHuffmanTable);
        };
        if id > 3 || class > 1 {
            return Err(JpegError::BadHuffmanTableId);
        }
        let table = HuffTable::new(&counts, symbols, class == 0)?;
        if class == 0 {
            dc[id] = Some(table);
        } else {
            ac[id] = Some(table);
        }
        seg = &seg[17 + total..];
    }
    if seg.is_empty() {
        Ok(())
    } else {
        Err(JpegError::TrailingHuffmanBytes)
    }
}
