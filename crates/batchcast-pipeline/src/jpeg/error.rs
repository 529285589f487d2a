//! Why the baseline decoder rejected a JPEG: broken data, never a kind of
//! JPEG it does not handle (that is `Outcome::Unsupported`). The messages
//! are what `DecodeError::Jpeg` carries to the user.

use crate::decode::DecodeError;

/// Corrupt or truncated JPEG data, found while parsing or decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JpegError {
    #[error("truncated header")]
    TruncatedHeader,
    #[error("no marker where one was expected")]
    NoMarker,
    #[error("no image data before EOI")]
    NoScan,
    #[error("marker {0:02x}: truncated segment")]
    TruncatedSegment(u8),
    #[error("two frame headers")]
    TwoFrames,
    #[error("scan before frame header")]
    ScanBeforeFrame,
    #[error("short frame header")]
    ShortFrame,
    #[error("unsupported image size {0}x{1}")]
    BadSize(usize, usize),
    #[error("bad component in frame header")]
    BadComponent,
    #[error("short scan header")]
    ShortScan,
    #[error("bad Huffman table selector")]
    BadTableSelector,
    #[error("bad quantisation table")]
    BadQuantTable,
    #[error("truncated Huffman table")]
    TruncatedHuffmanTable,
    #[error("bad Huffman table id")]
    BadHuffmanTableId,
    #[error("trailing bytes in Huffman table segment")]
    TrailingHuffmanBytes,
    #[error("overfull Huffman table")]
    OverfullHuffmanTable,
    #[error("component {0}: Huffman table not defined")]
    MissingHuffmanTable(usize),
    #[error("bad Huffman code")]
    BadHuffmanCode,
    #[error("bad DC size")]
    BadDcSize,
    #[error("AC coefficient past the block")]
    AcPastBlock,
    #[error("truncated JPEG data before a restart marker")]
    TruncatedBeforeRestart,
    #[error("missing restart marker")]
    MissingRestart,
    #[error("truncated JPEG data")]
    Truncated,
}

impl From<JpegError> for DecodeError {
    fn from(e: JpegError) -> Self {
        DecodeError::Jpeg(e.to_string())
    }
}
