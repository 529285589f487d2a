//! Huffman decoding of baseline JPEG blocks: the tables, the bit reader over
//! the entropy-coded segment (byte stuffing, restart markers), and one
//! block's coefficients, dequantised into natural order.
//!
//! Speed comes from two lookup tables indexed by the next [`FAST_BITS`]
//! bits: the symbol of any code that short, and (AC tables) the whole
//! run/value of any coefficient whose code and magnitude bits both fit.

use super::error::JpegError;

/// Bits looked up at once.
const FAST_BITS: u32 = 10;
const FAST_SIZE: usize = 1 << FAST_BITS;

/// Natural (row-major) position of the `k`-th coefficient in zigzag order.
pub(crate) const ZIGZAG: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

/// A Huffman table (DHT), with its lookup tables.
#[derive(Clone)]
pub(crate) struct HuffTable {
    /// `(length << 8) | symbol` for codes of at most `FAST_BITS` bits,
    /// indexed by the next `FAST_BITS` bits; 0 when longer.
    fast: Box<[u16; FAST_SIZE]>,
    /// AC only: `(value << 16) | (run << 8) | (code + magnitude bits)` when
    /// both fit in `FAST_BITS`; 0 otherwise.
    fast_ac: Box<[i32; FAST_SIZE]>,
    /// For each length `l`, one past the largest code of that length, left
    /// aligned to 16 bits (0 when none; `u32` so 1 << 16 fits).
    maxcode: [u32; 18],
    /// For each length, index into `symbols` of code 0 of that length.
    delta: [i32; 17],
    symbols: Vec<u8>,
}

impl HuffTable {
    /// Builds a table from a DHT's 16 code counts and its symbols.
    pub(crate) fn new(
        counts: &[u8; 16],
        symbols: &[u8],
        is_dc: bool,
    ) -> Result<HuffTable, JpegError> {
        let mut fast = Box::new([0u16; FAST_SIZE]);
        let mut maxcode = [0u32; 18];
        let mut delta = [0i32; 17];
        let (mut code, mut k) = (0u32, 0usize);
        for len in 1..=16u32 {
            let n = u32::from(counts[len as usize - 1]);
            delta[len as usize] = k as i32 - code as i32;
            for _ in 0..n {
                if code >= 1 << len {
                    return Err(JpegError::OverfullHuffmanTable);
                }
                if len <= FAST_BITS {
                    let shift = FAST_BITS - len;
                    let first = (code << shift) as usize;
                    let entry = ((len as u16) << 8) | u16::from(symbols[k]);
                    fast[first..first + (1 << shift)].fill(entry);
                }
                code += 1;
                k += 1;
            }
            maxcode[len as usize] = code << (16 - len);
            code <<= 1;
        }
        maxcode[17] = u32::MAX;
        let mut fast_ac = Box::new([0i32; FAST_SIZE]);
        if !is_dc {
            for (i, &e) in fast.iter().enumerate() {
                let (len, rs) = (u32::from(e >> 8), e & 0xff);
                let (run, size) = (u32::from(rs >> 4), u32::from(rs & 15));
                if e != 0 && size != 0 && len + size <= FAST_BITS {
                    let bits = ((i as u32) << len) & (FAST_SIZE as u32 - 1);
                    let value = extend(bits >> (FAST_BITS - size), size);
                    fast_ac[i] = (value << 16) | (run << 8) as i32 | (len + size) as i32;
                }
            }
        }
        Ok(HuffTable {
            fast,
            fast_ac,
            maxcode,
            delta,
            symbols: symbols.to_vec(),
        })
    }
}

/// The signed value of `size` magnitude bits `bits` (JPEG's EXTEND).
#[inline(always)]
fn extend(bits: u32, size: u32) -> i32 {
    if size == 0 {
        0
    } else if bits < 1 << (size - 1) {
        bits as i32 - (1 << size) + 1
    } else {
        bits as i32
    }
}

/// Reads the entropy-coded segment MSB first. Past a marker or the end of
/// the data it supplies zero bits and counts them, so a truncated scan is
/// detected ([`BitReader::overran`]) instead of read out of bounds.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Next bits, left aligned.
    bits: u64,
    nbits: u32,
    /// Zero bytes supplied after a marker or the end of the data.
    fake_bytes: u32,
    /// The marker that stopped reading (at `pos`), if any.
    marker: Option<u8>,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8], pos: usize) -> BitReader<'a> {
        BitReader {
            data,
            pos,
            bits: 0,
            nbits: 0,
            fake_bytes: 0,
            marker: None,
        }
    }

    /// Tops the buffer up to at least 57 bits.
    #[inline(always)]
    fn refill(&mut self) {
        // Fast path: the next 8 bytes hold no 0xff (no stuffing, no marker).
        if let Some(chunk) = self.data.get(self.pos..self.pos + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let w = u64::from_be_bytes(word);
            let inv = !w;
            if self.marker.is_none()
                && inv.wrapping_sub(0x0101_0101_0101_0101) & w & 0x8080_8080_8080_8080 == 0
            {
                let take = (64 - self.nbits) / 8; // whole bytes that fit, >= 1
                let kept = if take == 8 {
                    w
                } else {
                    w & !(u64::MAX >> (8 * take))
                };
                self.bits |= kept >> self.nbits;
                self.nbits += 8 * take;
                self.pos += take as usize;
                return;
            }
        }
        while self.nbits <= 56 {
            let byte = self.next_byte();
            self.bits |= u64::from(byte) << (56 - self.nbits);
            self.nbits += 8;
        }
    }

    fn next_byte(&mut self) -> u8 {
        if self.marker.is_some() {
            self.fake_bytes += 1;
            return 0;
        }
        loop {
            match (self.data.get(self.pos), self.data.get(self.pos + 1)) {
                (Some(&0xff), Some(&0)) => {
                    self.pos += 2;
                    return 0xff;
                }
                // Fill bytes before a marker.
                (Some(&0xff), Some(&0xff)) => self.pos += 1,
                (Some(&0xff), next) => {
                    self.marker = Some(next.copied().unwrap_or(0));
                    self.fake_bytes += 1;
                    return 0;
                }
                (Some(&b), _) => {
                    self.pos += 1;
                    return b;
                }
                (None, _) => {
                    self.marker = Some(0);
                    self.fake_bytes += 1;
                    return 0;
                }
            }
        }
    }

    #[inline(always)]
    fn peek(&self, n: u32) -> u32 {
        (self.bits >> (64 - n)) as u32
    }

    #[inline(always)]
    fn consume(&mut self, n: u32) {
        self.bits <<= n;
        self.nbits -= n;
    }

    /// `n` (1..=16) raw bits; the buffer must hold them.
    #[inline(always)]
    fn take(&mut self, n: u32) -> u32 {
        let v = self.peek(n);
        self.consume(n);
        v
    }

    /// One symbol; the buffer must hold 16 bits.
    #[inline(always)]
    fn symbol(&mut self, t: &HuffTable) -> Result<u8, JpegError> {
        let e = t.fast[self.peek(FAST_BITS) as usize];
        if e != 0 {
            self.consume(u32::from(e >> 8));
            return Ok(e as u8);
        }
        let code = self.peek(16);
        let mut len = FAST_BITS + 1;
        while code >= t.maxcode[len as usize] {
            len += 1;
        }
        if len > 16 {
            return Err(JpegError::BadHuffmanCode);
        }
        self.consume(len);
        let index = (code >> (16 - len)) as i32 + t.delta[len as usize];
        usize::try_from(index)
            .ok()
            .and_then(|i| t.symbols.get(i).copied())
            .ok_or(JpegError::BadHuffmanCode)
    }

    /// Decodes one block into `out` (natural order, dequantised with `q`,
    /// which is in zigzag order). `out` must be zero on entry. `dc_pred` is
    /// the component's DC predictor. Returns whether any AC coefficient is
    /// non-zero.
    pub(crate) fn block(
        &mut self,
        dc: &HuffTable,
        ac: &HuffTable,
        q: &[u16; 64],
        dc_pred: &mut i32,
        out: &mut [[i32; 8]; 8],
    ) -> Result<bool, JpegError> {
        if self.nbits < 32 {
            self.refill();
        }
        let size = u32::from(self.symbol(dc)?);
        if size > 16 {
            return Err(JpegError::BadDcSize);
        }
        let diff = if size == 0 {
            0
        } else {
            extend(self.take(size), size)
        };
        *dc_pred = dc_pred.wrapping_add(diff);
        // libjpeg keeps coefficients as i16.
        out[0][0] = i32::from(*dc_pred as i16) * i32::from(q[0]);
        let mut k = 1;
        let mut any_ac = false;
        while k < 64 {
            if self.nbits < 32 {
                self.refill();
            }
            let f = ac.fast_ac[self.peek(FAST_BITS) as usize];
            if f != 0 {
                self.consume((f & 0xff) as u32);
                k += ((f >> 8) & 0xff) as usize;
                if k > 63 {
                    return Err(JpegError::AcPastBlock);
                }
                let z = ZIGZAG[k];
                out[z / 8][z % 8] = (f >> 16) * i32::from(q[k]);
                any_ac = true;
                k += 1;
                continue;
            }
            let rs = self.symbol(ac)?;
            let (run, size) = (usize::from(rs >> 4), u32::from(rs & 15));
            if size == 0 {
                if run < 15 {
                    break; // end of block
                }
                k += 16;
                continue;
            }
            k += run;
            if k > 63 {
                return Err(JpegError::AcPastBlock);
            }
            let value = extend(self.take(size), size);
            let z = ZIGZAG[k];
            out[z / 8][z % 8] = i32::from(value as i16) * i32::from(q[k]);
            any_ac = true;
            k += 1;
        }
        Ok(any_ac)
    }

    /// Whether decoding used bits that are not in the data (a truncated or
    /// corrupt scan).
    pub(crate) fn overran(&self) -> bool {
        self.fake_bytes * 8 > self.nbits
    }

    /// At a restart interval: drops the buffered bits and skips the RSTn
    /// marker (searching forward for it if the data has junk first).
    pub(crate) fn restart(&mut self) -> Result<(), JpegError> {
        if self.overran() {
            return Err(JpegError::TruncatedBeforeRestart);
        }
        self.bits = 0;
        self.nbits = 0;
        self.fake_bytes = 0;
        self.marker = None;
        while let Some(window) = self.data.get(self.pos..self.pos + 2) {
            self.pos += 1;
            if window[0] == 0xff && (0xd0..=0xd7).contains(&window[1]) {
                self.pos += 1;
                return Ok(());
            }
        }
        Err(JpegError::MissingRestart)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_maps_magnitude_bits_to_signed_values() {
        assert_eq!(extend(0, 1), -1);
        assert_eq!(extend(1, 1), 1);
        assert_eq!(extend(0b00, 2), -3);
        assert_eq!(extend(0b01, 2), -2);
        assert_eq!(extend(0b10, 2), 2);
        assert_eq!(extend(0b111, 3), 7);
    }

    #[test]
    fn stuffed_bytes_and_markers_are_handled() {
        // 0xff 0x00 is a literal 0xff; the marker stops the data.
        let data = [0xab, 0xff, 0x00, 0x12, 0xff, 0xd9];
        let mut r = BitReader::new(&data, 0);
        r.refill();
        assert_eq!(r.take(8), 0xab);
        assert_eq!(r.take(8), 0xff);
        assert_eq!(r.take(8), 0x12);
        assert!(!r.overran());
        assert_eq!(r.take(8), 0);
        assert!(r.overran());
        assert_eq!(r.marker, Some(0xd9));
    }

    #[test]
    fn codes_longer_than_the_fast_table_decode() {
        // One code of each length 1..=12: 0, 10, 110, ..., 111111111110.
        let mut counts = [0u8; 16];
        counts[..12].fill(1);
        let symbols: Vec<u8> = (1..=12).collect();
        let t = HuffTable::new(&counts, &symbols, false).unwrap();
        // Code of length 12 (eleven 1s, then 0) followed by the length-1 code.
        let data = [0xff, 0x00, 0xe0];
        let mut r = BitReader::new(&data, 0);
        r.refill();
        assert_eq!(r.symbol(&t).unwrap(), 12);
        assert_eq!(r.symbol(&t).unwrap(), 1);
    }

    #[test]
    fn overfull_tables_are_refused() {
        let mut counts = [0u8; 16];
        counts[0] = 3; // three 1-bit codes
        assert!(HuffTable::new(&counts, &[1, 2, 3], true).is_err());
    }
}
