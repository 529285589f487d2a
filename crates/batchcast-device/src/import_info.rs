//! What a consumer needs besides the fd to map a mirror: a small fixed
//! binary encoding, versioned, and validated before anything is mapped.
//!
//! ```text
//! b"BCDV" | version: u8 | 3 zero bytes | size: u64 LE | granularity: u64 LE
//! ```

use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"BCDV";
const VERSION: u8 = 1;
const ENCODED_LEN: usize = 24;
/// Largest allocation a mirror may have (1 TiB).
pub(crate) const MAX_SIZE: u64 = 1 << 40;
/// Largest allocation granularity accepted (1 GiB).
const MAX_GRANULARITY: u64 = 1 << 30;

/// A mirror allocation's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImportInfo {
    /// The allocation's size: the arena's length rounded up to `granularity`.
    pub size: u64,
    /// The device's allocation granularity (a power of two).
    pub granularity: u64,
}

impl ImportInfo {
    /// The geometry of `len` bytes at `granularity`, or an error when it
    /// is out of bounds.
    pub(crate) fn for_len(len: u64, granularity: u64) -> Result<Self> {
        let bad = |why: String| Error::io("mirror size", std::io::Error::other(why));
        if len == 0 {
            return Err(bad("an arena of 0 bytes has nothing to mirror".into()));
        }
        let size = len
            .checked_next_multiple_of(granularity.max(1))
            .filter(|&s| s <= MAX_SIZE)
            .ok_or_else(|| {
                bad(format!(
                    "{len} bytes is more than a mirror may hold ({MAX_SIZE})"
                ))
            })?;
        let info = ImportInfo { size, granularity };
        info.check(len).map_err(|e| bad(e.to_string()))?;
        Ok(info)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENCODED_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[VERSION, 0, 0, 0]);
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.granularity.to_le_bytes());
        out
    }

    /// Decodes `bytes` and checks it describes an allocation that holds
    /// `len` bytes.
    pub(crate) fn decode(bytes: &[u8], len: u64) -> Result<Self> {
        let bad = |why: String| Error::BadImportInfo(why);
        if bytes.len() != ENCODED_LEN {
            return Err(bad(format!(
                "{} bytes, expected {ENCODED_LEN}",
                bytes.len()
            )));
        }
        if &bytes[..4] != MAGIC {
            return Err(bad("not batchcast device information (wrong magic)".into()));
        }
        if bytes[4] != VERSION || bytes[5..8] != [0, 0, 0] {
            return Err(bad(format!(
                "version {}, this build reads {VERSION}",
                bytes[4]
            )));
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let info = ImportInfo {
            size: word(8),
            granularity: word(16),
        };
        info.check(len)?;
        Ok(info)
    }

    fn check(&self, len: u64) -> Result<()> {
        let bad = |why: String| Error::BadImportInfo(why);
        let g = self.granularity;
        if !g.is_power_of_two() || g > MAX_GRANULARITY {
            return Err(bad(format!(
                "granularity {g} is not a power of two up to {MAX_GRANULARITY}"
            )));
        }
        if self.size == 0 || self.size > MAX_SIZE || !self.size.is_multiple_of(g) {
            return Err(bad(format!(
                "size {} is not a multiple of {g} up to {MAX_SIZE}",
                self.size
            )));
        }
        if len == 0 || len > self.size {
            return Err(bad(format!(
                "the arena's {len} bytes do not fit the {} allocated",
                self.size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips_and_rounds_up() {
        let info = ImportInfo::for_len(5000, 4096).unwrap();
        assert_eq!(
            info,
            ImportInfo {
                size: 8192,
                granularity: 4096
            }
        );
        assert_eq!(ImportInfo::decode(&info.encode(), 5000).unwrap(), info);
    }

    #[test]
    fn refuses_a_len_larger_than_the_allocation() {
        let info = ImportInfo::for_len(4096, 4096).unwrap();
        assert!(matches!(
            ImportInfo::decode(&info.encode(), 4097),
            Err(Error::BadImportInfo(_))
        ));
    }

    #[test]
    fn refuses_other_versions_and_garbage() {
        let mut bytes = ImportInfo::for_len(1, 4096).unwrap().encode();
        bytes[4] = 2;
        assert!(ImportInfo::decode(&bytes, 1).is_err());
        assert!(ImportInfo::decode(b"garbage", 1).is_err());
        assert!(ImportInfo::decode(&[], 1).is_err());
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40), len: u64) {
            let _ = ImportInfo::decode(&bytes, len);
        }
    }
}
