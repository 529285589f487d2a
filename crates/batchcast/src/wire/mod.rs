//! The control-plane protocol: messages, framing and fd passing.
//!
//! A frame is a little-endian `u32` length followed by that many bytes of a
//! postcard-encoded message. Frames longer than [`MAX_FRAME`] are refused
//! before any allocation, and decoding is into plain, closed data types (no
//! object graphs, nothing executable): a malformed frame is an error that
//! closes that one connection. The arena's, the board's, the consumer's
//! ledger's and the holder counts' fds, then the device mirrors' (see
//! `crate::mirror`), ride on the `Welcome` frame as `SCM_RIGHTS` ancillary
//! data.
//!
//! Batches themselves are not announced here: the producer publishes them on
//! the board (`crate::board`) and consumers release them in their ledgers
//! (`crate::ledger`), so a batch costs no message per consumer. The socket
//! carries what happens once per consumer or per epoch (welcome, epoch start
//! and end, an epoch boundary's next size and trigger, shutdown), and a
//! consumer's death is its socket closing.
//!
//! The messages are in `messages`, the framing (and its tests) in `frame`.

mod frame;
mod messages;

pub use frame::{encode, send_frame, send_frame_with_fds, Fill, FrameReader, MAX_FDS};
pub use messages::{
    Boundary, ConsumerHello, EpochStart, Hello, JoinPolicy, OnEvict, Position, Role,
    ShutdownReason, ToConsumer, ToProducer, TriggerFired, Welcome, MAX_TRIGGER_ID,
};

/// Version of this protocol and of the shared-memory regions it hands over
/// (`crate::region`); both ends must agree.
pub const PROTOCOL_VERSION: u32 = 8;
/// Marks a batchcast hello, so that a stray client is told apart from an old one.
pub const MAGIC: [u8; 4] = *b"BCST";
/// Largest frame accepted, in bytes.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame a producer accepts: a hello and a release are tens of
/// bytes, so a connection cannot make the producer buffer a megabyte.
pub const MAX_REQUEST_FRAME: usize = 4096;
/// Longest consumer label, in bytes.
pub const MAX_LABEL_LEN: usize = 128;
