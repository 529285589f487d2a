//! The control-plane protocol: messages, framing and fd passing.
//!
//! A frame is a little-endian `u32` length followed by that many bytes of a
//! postcard-encoded message. Frames longer than [`MAX_FRAME`] are refused
//! before any allocation, and decoding is into plain, closed data types (no
//! object graphs, nothing executable): a malformed frame is an error that
//! closes that one connection. The arena's, the board's, the consumer's
//! ledger's and the holder counts' fds ride on the `Welcome` frame as
//! `SCM_RIGHTS` ancillary data.
//!
//! Batches themselves are not announced here: the producer publishes them on
//! the board (`crate::board`) and consumers release them in their ledgers
//! (`crate::ledger`), so a batch costs no message per consumer. The socket
//! carries what happens once per consumer or per epoch (welcome, epoch start
//! and end, an epoch boundary's next size and trigger, shutdown), and a
//! consumer's death is its socket closing.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::status::StatusReport;
use crate::stream::StreamSpec;

/// Version of this protocol and of the shared-memory regions it hands over
/// (`crate::region`); both ends must agree.
pub const PROTOCOL_VERSION: u32 = 6;
/// Marks a batchcast hello, so that a stray client is told apart from an old one.
pub const MAGIC: [u8; 4] = *b"BCST";
/// Largest frame accepted, in bytes.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame a producer accepts: a hello and a release are tens of
/// bytes, so a connection cannot make the producer buffer a megabyte.
pub const MAX_REQUEST_FRAME: usize = 4096;
/// Longest consumer label, in bytes.
pub const MAX_LABEL_LEN: usize = 128;
/// Bytes one read asks for at most.
const READ_CHUNK: usize = 64 * 1024;

/// How a consumer that connects mid-run joins the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum JoinPolicy {
    /// Replay the current epoch's retained batches if its start is still
    /// retained, else start at the next epoch.
    #[default]
    CatchUp,
    /// Start at the next epoch.
    NextEpoch,
    /// Start with the next batch, mid-epoch (a partial first epoch).
    Now,
}

impl JoinPolicy {
    /// Parses `catch-up`, `next-epoch` or `now`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "catch-up" | "catchup" | "catch_up" => Ok(JoinPolicy::CatchUp),
            "next-epoch" | "next_epoch" => Ok(JoinPolicy::NextEpoch),
            "now" => Ok(JoinPolicy::Now),
            _ => Err(Error::InvalidArgument(format!(
                "unknown join policy {s:?}; use \"catch-up\", \"next-epoch\" or \"now\""
            ))),
        }
    }

    /// The name [`JoinPolicy::parse`] accepts.
    pub fn name(self) -> &'static str {
        match self {
            JoinPolicy::CatchUp => "catch-up",
            JoinPolicy::NextEpoch => "next-epoch",
            JoinPolicy::Now => "now",
        }
    }
}

/// First message of every connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Must be [`MAGIC`].
    pub magic: [u8; 4],
    /// The sender's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// What the connection is for.
    pub role: Role,
}

/// What a connection is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Role {
    /// A consumer of batches.
    Consumer(ConsumerHello),
    /// A one-shot status query (`batchcast status`).
    Status,
}

/// A consumer's wishes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerHello {
    /// Rows per consumer batch; `None`: the producer's batch size.
    pub batch_size: Option<u64>,
    /// Drop each epoch's last, smaller batch.
    pub drop_last: bool,
    /// How to join mid-run.
    pub join: JoinPolicy,
    /// Free text shown by `batchcast status` (e.g. the script name).
    pub label: String,
    /// What the producer does if it evicts this consumer for falling behind.
    pub on_evict: OnEvict,
}

/// What an evicted consumer wants (see `ProducerOptions::lag_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum OnEvict {
    /// Its next read fails with `Error::FellBehind`; it gets no more batches.
    #[default]
    Error,
    /// Its current epoch ends short and it rejoins at the next epoch.
    Rejoin,
}

impl OnEvict {
    /// Parses `error` or `rejoin`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "error" => Ok(OnEvict::Error),
            "rejoin" => Ok(OnEvict::Rejoin),
            _ => Err(Error::InvalidArgument(format!(
                "unknown on_evict {s:?}; use \"error\" or \"rejoin\""
            ))),
        }
    }
}

/// Messages a consumer sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToProducer {
    /// Opens the connection.
    Hello(Hello),
    /// The consumer released a batch in its ledger while the board said the
    /// producer waits for a slot, or began to read the batch the board
    /// said it waits to see read: a wake-up, with no content.
    Released,
    /// The consumer was closed while batches it handed out are still alive:
    /// send it nothing more and count it gone; it keeps the slots of those
    /// batches until it releases them or its connection closes.
    Leaving,
}

/// Messages a producer sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToConsumer {
    /// Accepts a consumer; the arena, board, ledger and holder-count fds
    /// are attached, in that order.
    Welcome(Welcome),
    /// Refuses a consumer.
    Refused(String),
    /// An epoch begins for this consumer.
    EpochStart(EpochStart),
    /// The epoch's last batch has been published.
    EpochEnd {
        /// The epoch.
        epoch: u64,
        /// Rows published to this consumer in this epoch.
        samples: u64,
        /// The epoch's batches end before this sequence number.
        end_seq: u64,
    },
    /// The producer evicted this consumer for falling behind (its ledger's
    /// eviction generation is now `generation`).
    Evicted {
        /// The epoch it was evicted from.
        epoch: u64,
        /// Batches it was behind the most advanced consumer.
        behind: u64,
        /// The lag budget, in batches.
        budget: u64,
        /// The eviction generation this message is about.
        generation: u64,
    },
    /// The producer stops; no more batches follow.
    Shutdown(ShutdownReason),
    /// Reply to a status query.
    Status(StatusReport),
    /// An epoch boundary: the size of the epochs to come and the trigger
    /// that fired there, if any. Sent after the ending epoch's last batch
    /// (before its `EpochEnd`) or between epochs; the consumer hands the
    /// trigger out after the epoch's last batch, before its end.
    Boundary(Boundary),
}

/// Longest trigger id, in bytes.
pub const MAX_TRIGGER_ID: usize = 256;

/// An epoch boundary (see [`ToConsumer::Boundary`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Boundary {
    /// Rows of each epoch from the next one on, when known (a dataset that
    /// grew says so here, before its next epoch begins).
    pub next_samples: Option<u64>,
    /// The trigger that fired at this boundary.
    pub trigger: Option<TriggerFired>,
}

/// A trigger fired at an epoch boundary, once for every consumer: the data
/// that arrived since its last firing is in the epochs from `epoch` on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerFired {
    /// The trigger, as the producer was given it (`amount=400`); at most
    /// [`MAX_TRIGGER_ID`] bytes.
    pub id: String,
    /// Its firings so far, this one included (1 for the first).
    pub seq: u64,
    /// The first epoch that holds the new data.
    pub epoch: u64,
    /// Samples that arrived since the last firing (or since the start).
    pub samples: u64,
    /// The earliest and latest arrival time among them, in seconds since
    /// the Unix epoch (None when no sample arrived).
    pub arrivals: Option<(f64, f64)>,
}

/// Sent once, with the arena fd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The producer's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The producer's pid.
    pub producer_pid: u32,
    /// Bytes per slot.
    pub slot_size: u64,
    /// Number of slots (the window and the lag slots).
    pub slots: u32,
    /// Slots of the window (the first `window` of them).
    pub window: u32,
    /// Rows per epoch, when the producer knows it.
    pub samples_per_epoch: Option<u64>,
    /// The producer's nominal batch size, when known.
    pub batch_size: Option<u64>,
    /// The id `batchcast status` shows for this consumer.
    pub consumer_id: u64,
    /// What the producer sends (see `crate::stream`).
    pub stream: StreamSpec,
    /// True when this consumer's first epoch is the rest of an epoch in
    /// progress (`JoinPolicy::Now` joining mid-epoch).
    pub first_epoch_partial: bool,
    /// Rows of that partial first epoch, when the producer knows them.
    pub first_epoch_samples: Option<u64>,
    /// True when the producer keeps a state file and a producer restarted
    /// under its name resumes its stream: a consumer that loses it waits
    /// for the restart (`ConsumerOptions::reconnect_timeout`) instead of
    /// failing at once.
    pub resumable: bool,
}

/// An epoch begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochStart {
    /// Epoch number, from 0.
    pub epoch: u64,
    /// Rows this consumer will receive in this epoch, when known.
    pub samples: Option<u64>,
    /// The producer's nominal batch size.
    pub batch_size: u64,
    /// True when the consumer joined mid-epoch (`JoinPolicy::Now`).
    pub partial: bool,
    /// This consumer's first batch of the epoch; it reads every batch the
    /// board publishes from here to the epoch's end.
    pub first_seq: u64,
    /// The position in the epoch (rows from its start, in the epoch's
    /// order) of the first row of batch `first_seq`: more than 0 when the
    /// consumer joins mid-epoch or a restarted producer resumes the epoch
    /// there. A consumer that reattaches skips the rows it already has.
    pub first_row: u64,
}

/// Why a producer stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShutdownReason {
    /// It ran all its epochs.
    Finished,
    /// It was interrupted (Ctrl-C, SIGTERM) and stopped cleanly.
    Interrupted,
    /// Its source failed; the text says how.
    Failed(String),
}

/// Encodes `msg` as one frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>> {
    let mut frame = postcard::to_extend(msg, vec![0u8; 4])
        .map_err(|e| Error::Protocol(format!("cannot encode a message: {e}")))?;
    let len = frame.len() - 4;
    if len > MAX_FRAME {
        return Err(Error::Protocol(format!(
            "message of {len} bytes exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    frame[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(frame)
}

/// Sends an encoded frame whole (blocking), never raising SIGPIPE.
pub fn send_frame(sock: impl AsFd, frame: &[u8]) -> Result<()> {
    let mut rest = frame;
    while !rest.is_empty() {
        match rustix::net::send(&sock, rest, SendFlags::NOSIGNAL) {
            Ok(n) => rest = &rest[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io("cannot send to the peer", e)),
        }
    }
    Ok(())
}

/// Sends an encoded frame with `fds` attached as `SCM_RIGHTS`.
pub fn send_frame_with_fds(sock: impl AsFd, frame: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Error::Protocol("cannot attach the descriptors".into()));
    }
    let sent = loop {
        match rustix::net::sendmsg(
            &sock,
            &[IoSlice::new(frame)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io("cannot send the welcome", e)),
        }
    };
    send_frame(&sock, &frame[sent..])
}

/// Most descriptors one frame carries.
pub const MAX_FDS: usize = 4;

/// What one read from a socket brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Fill {
    /// Some bytes arrived.
    Data,
    /// Nothing is available now (non-blocking read only).
    WouldBlock,
    /// The peer closed the connection.
    Eof,
}

/// Reassembles frames from a byte stream.
///
/// The buffer never holds more than one largest frame plus its length
/// prefix: decoded bytes are dropped from its front before each read, a read
/// asks only for the room left, and a length prefix above the limit is an
/// error as soon as its four bytes are in.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    limit: usize,
}

impl Default for FrameReader {
    fn default() -> Self {
        Self::with_limit(MAX_FRAME)
    }
}

impl FrameReader {
    /// An empty reader accepting frames up to [`MAX_FRAME`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A reader holding `bytes` as if they had been received, for
    /// [`next_frame`](Self::next_frame) to decode: the wire decoder without a
    /// socket (the `wire` fuzz target in `fuzz/` uses it).
    pub fn from_bytes(bytes: &[u8]) -> Self {
        FrameReader {
            buf: bytes.to_vec(),
            start: 0,
            limit: MAX_FRAME,
        }
    }

    /// An empty reader accepting frames up to `limit` bytes (at most
    /// [`MAX_FRAME`]).
    pub fn with_limit(limit: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            limit: limit.min(MAX_FRAME),
        }
    }

    /// Changes the largest frame accepted from now on (at most [`MAX_FRAME`]).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(MAX_FRAME);
    }

    /// True when the buffer holds a largest frame: decode before reading on.
    pub fn is_full(&self) -> bool {
        self.pending() >= 4 + self.limit
    }

    /// Drops decoded bytes from the front and gives back memory a past
    /// large frame left behind.
    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.capacity() > 2 * READ_CHUNK && self.buf.len() <= READ_CHUNK {
            self.buf.shrink_to(READ_CHUNK);
        }
    }

    /// Reads what is available from `sock` into the buffer. With
    /// `blocking == false`, returns [`Fill::WouldBlock`] instead of waiting.
    /// Received fds are appended to `fds_out` when given (at most
    /// [`MAX_FDS`]; any more are closed), close-on-exec. A full buffer
    /// ([`FrameReader::is_full`]) reads nothing and returns [`Fill::Data`].
    pub fn fill(
        &mut self,
        sock: impl AsFd,
        blocking: bool,
        fds_out: Option<&mut Vec<OwnedFd>>,
    ) -> Result<Fill> {
        self.compact();
        self.check_header()?;
        let room = (4 + self.limit)
            .saturating_sub(self.buf.len())
            .min(READ_CHUNK);
        if room == 0 {
            return Ok(Fill::Data);
        }
        let old = self.buf.len();
        self.buf.resize(old + room, 0);
        let flags = if blocking {
            RecvFlags::empty()
        } else {
            RecvFlags::DONTWAIT
        };
        let res = match fds_out {
            None => loop {
                match rustix::net::recv(&sock, &mut self.buf[old..], flags) {
                    Err(rustix::io::Errno::INTR) => continue,
                    r => break r.map(|(n, _)| n),
                }
            },
            Some(out) => {
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
                let mut control = RecvAncillaryBuffer::new(&mut space);
                let r = loop {
                    let mut iov = [IoSliceMut::new(&mut self.buf[old..])];
                    let flags = flags | RecvFlags::CMSG_CLOEXEC;
                    match rustix::net::recvmsg(&sock, &mut iov, &mut control, flags) {
                        Err(rustix::io::Errno::INTR) => continue,
                        r => break r,
                    }
                };
                for msg in control.drain() {
                    if let RecvAncillaryMessage::ScmRights(fds) = msg {
                        for fd in fds {
                            // Any beyond the limit are closed on drop.
                            if out.len() < MAX_FDS {
                                out.push(fd);
                            }
                        }
                    }
                }
                r.map(|m| m.bytes)
            }
        };
        match res {
            Ok(0) => {
                self.buf.truncate(old);
                Ok(Fill::Eof)
            }
            Ok(n) => {
                self.buf.truncate(old + n);
                self.check_header()?;
                Ok(Fill::Data)
            }
            Err(rustix::io::Errno::AGAIN) => {
                self.buf.truncate(old);
                Ok(Fill::WouldBlock)
            }
            Err(rustix::io::Errno::CONNRESET) => {
                self.buf.truncate(old);
                Ok(Fill::Eof)
            }
            Err(e) => {
                self.buf.truncate(old);
                Err(Error::io("cannot read from the peer", e))
            }
        }
    }

    /// The length the next frame announces, once its prefix is in; an
    /// error when it is above the limit.
    fn check_header(&self) -> Result<Option<usize>> {
        let avail = &self.buf[self.start..];
        let Some(prefix) = avail.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(*prefix) as usize;
        if len > self.limit {
            return Err(Error::Protocol(format!(
                "frame of {len} bytes exceeds the {}-byte limit",
                self.limit
            )));
        }
        Ok(Some(len))
    }

    /// Decodes the next complete frame, if one is buffered.
    pub fn next_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>> {
        let Some(len) = self.check_header()? else {
            return Ok(None);
        };
        let avail = &self.buf[self.start..];
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let body = &avail[4..4 + len];
        let msg = postcard::from_bytes(body)
            .map_err(|e| Error::Protocol(format!("malformed message: {e}")))?;
        self.start += 4 + len;
        Ok(Some(msg))
    }

    /// Bytes received but not yet decoded.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn sample_start() -> ToConsumer {
        ToConsumer::EpochStart(EpochStart {
            epoch: 1,
            samples: Some(100),
            batch_size: 8,
            partial: false,
            first_seq: 7,
            first_row: 0,
        })
    }

    #[test]
    fn frames_round_trip_across_split_reads() {
        let (a, b) = UnixStream::pair().unwrap();
        let msgs = vec![
            sample_start(),
            ToConsumer::EpochEnd {
                epoch: 1,
                samples: 100,
                end_seq: 20,
            },
            ToConsumer::Boundary(Boundary {
                next_samples: Some(150),
                trigger: Some(TriggerFired {
                    id: "amount=40".into(),
                    seq: 1,
                    epoch: 2,
                    samples: 50,
                    arrivals: Some((1.5e9, 1.6e9)),
                }),
            }),
            ToConsumer::Shutdown(ShutdownReason::Failed("disk".into())),
        ];
        let mut bytes = Vec::new();
        for m in &msgs {
            bytes.extend(encode(m).unwrap());
        }
        // Deliver one byte at a time: frames must reassemble.
        let mut r = FrameReader::new();
        let mut got = Vec::new();
        for byte in bytes {
            (&a).write_all(&[byte]).unwrap();
            assert_eq!(r.fill(&b, true, None).unwrap(), Fill::Data);
            while let Some(m) = r.next_frame::<ToConsumer>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
        drop(a);
        assert_eq!(r.fill(&b, true, None).unwrap(), Fill::Eof);
    }

    #[test]
    fn oversized_frame_is_refused_before_reading_it() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
        let mut r = FrameReader::new();
        // The read that brings the prefix already refuses it.
        let err = r.fill(&b, true, None).unwrap_err().to_string();
        assert!(err.contains("exceeds"), "{err}");
        let err = r.next_frame::<ToProducer>().unwrap_err().to_string();
        assert!(err.contains("exceeds"), "{err}");
    }

    #[test]
    fn a_long_prefix_is_refused_before_its_body_is_buffered() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut partial = ((MAX_FRAME - 1) as u32).to_le_bytes().to_vec();
        partial.extend(vec![0u8; 100_000]);
        (&a).write_all(&partial[..8192]).unwrap();
        let mut r = FrameReader::with_limit(MAX_REQUEST_FRAME);
        let err = r.fill(&b, true, None).unwrap_err().to_string();
        assert!(err.contains("4096-byte limit"), "{err}");
        assert!(
            r.buf.capacity() <= 4 + MAX_REQUEST_FRAME,
            "{}",
            r.buf.capacity()
        );
    }

    #[test]
    fn the_buffer_compacts_and_stays_bounded() {
        let (a, b) = UnixStream::pair().unwrap();
        let big = encode(&ToConsumer::Refused("x".repeat(300_000))).unwrap();
        let small = encode(&sample_start()).unwrap();
        let mut r = FrameReader::new();
        for round in 0..20 {
            let writer = {
                let a = a.try_clone().unwrap();
                let frames = [small.clone(), big.clone(), small.clone()].concat();
                std::thread::spawn(move || (&a).write_all(&frames).unwrap())
            };
            let mut got = 0;
            while got < 3 {
                match r.next_frame::<ToConsumer>().unwrap() {
                    Some(_) => got += 1,
                    None => {
                        r.fill(&b, true, None).unwrap();
                    }
                }
                assert!(
                    r.buf.len() <= 4 + MAX_FRAME,
                    "round {round}: {}",
                    r.buf.len()
                );
            }
            writer.join().unwrap();
        }
        // Nothing pending: the next read starts from an empty, small buffer.
        assert_eq!(r.pending(), 0);
        r.compact();
        assert!(r.buf.capacity() <= 2 * READ_CHUNK, "{}", r.buf.capacity());
    }

    #[test]
    fn received_fds_are_close_on_exec() {
        let (a, b) = UnixStream::pair().unwrap();
        let f = tempfile::tempfile().unwrap();
        // Sent without close-on-exec, as another process could.
        rustix::io::fcntl_setfd(&f, rustix::io::FdFlags::empty()).unwrap();
        let frame = encode(&ToConsumer::Refused("x".into())).unwrap();
        send_frame_with_fds(&a, &frame, &[f.as_fd()]).unwrap();
        let mut r = FrameReader::new();
        let mut fds = Vec::new();
        r.fill(&b, true, Some(&mut fds)).unwrap();
        let flags = rustix::io::fcntl_getfd(&fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_panic() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut frame = 16u32.to_le_bytes().to_vec();
        frame.extend([0xff; 16]);
        (&a).write_all(&frame).unwrap();
        let mut r = FrameReader::new();
        r.fill(&b, true, None).unwrap();
        assert!(matches!(
            r.next_frame::<ToProducer>(),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn nonblocking_fill_reports_would_block() {
        let (_a, b) = UnixStream::pair().unwrap();
        let mut r = FrameReader::new();
        assert_eq!(r.fill(&b, false, None).unwrap(), Fill::WouldBlock);
    }

    #[test]
    fn fds_travel_with_the_frame() {
        let (a, b) = UnixStream::pair().unwrap();
        let (f1, f2) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
        let frame = encode(&ToConsumer::Refused("x".into())).unwrap();
        send_frame_with_fds(&a, &frame, &[f1.as_fd(), f2.as_fd()]).unwrap();
        let mut r = FrameReader::new();
        let mut fds = Vec::new();
        r.fill(&b, true, Some(&mut fds)).unwrap();
        assert_eq!(fds.len(), 2);
        assert_eq!(
            r.next_frame::<ToConsumer>().unwrap(),
            Some(ToConsumer::Refused("x".into()))
        );
    }

    #[test]
    fn join_policies_parse_and_name() {
        for p in [JoinPolicy::CatchUp, JoinPolicy::NextEpoch, JoinPolicy::Now] {
            assert_eq!(JoinPolicy::parse(p.name()).unwrap(), p);
        }
        assert!(JoinPolicy::parse("later").is_err());
    }
}
