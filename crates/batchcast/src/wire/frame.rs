//! Framing: encoding a message as a frame, sending frames (with
//! descriptors), and reassembling received frames within a bounded buffer.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{de::DeserializeOwned, Serialize};

use super::MAX_FRAME;
use crate::error::{Error, Result};

#[cfg(test)]
mod tests;

/// Bytes one read asks for at most.
const READ_CHUNK: usize = 64 * 1024;

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

/// Most descriptors one frame carries: a welcome's four fixed ones and
/// one per device mirror.
pub const MAX_FDS: usize = 4 + crate::mirror::MAX_MIRRORS;

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
