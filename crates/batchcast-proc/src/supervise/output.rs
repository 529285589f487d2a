//! A supervised process's captured output: a thread per stream reads it
//! in chunks, hands each to the caller's sink and keeps the last bytes for
//! the tail, so a process that writes without end costs a bounded amount.

use std::collections::VecDeque;
use std::io::Read;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where each chunk of a captured stream goes, besides the tail.
pub type Sink = Box<dyn FnMut(&[u8]) + Send>;

/// How often a reader looks whether it is told to stop.
const READER_TICK: Duration = Duration::from_millis(100);
/// Largest chunk read at once.
const CHUNK: usize = 64 * 1024;

/// The last bytes of a process's captured output (both streams, in the
/// order they were read).
#[derive(Debug)]
pub(crate) struct Tail {
    bytes: VecDeque<u8>,
    cap: usize,
}

impl Tail {
    pub(crate) fn new(cap: usize) -> Tail {
        Tail {
            bytes: VecDeque::with_capacity(cap.min(CHUNK)),
            cap,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        let keep = &chunk[chunk.len().saturating_sub(self.cap)..];
        let over = (self.bytes.len() + keep.len()).saturating_sub(self.cap);
        self.bytes.drain(..over);
        self.bytes.extend(keep);
    }

    /// Its last `lines` lines, as text.
    pub(crate) fn lines(&self, lines: usize) -> String {
        let (a, b) = self.bytes.as_slices();
        let text = String::from_utf8_lossy(&[a, b].concat()).into_owned();
        let kept: Vec<&str> = text.trim_end().lines().collect();
        kept[kept.len().saturating_sub(lines)..].join("\n")
    }
}

/// One stream's reader.
pub(crate) struct Reader {
    pub(crate) stream: &'static str,
    /// Ends true when told to stop before end of file.
    pub(crate) thread: JoinHandle<bool>,
}

/// Reads `from` until end of file, or until `stop` (it waits for data at
/// most [`READER_TICK`] at a time, so a pipe held open by a process left
/// outside the group does not hold it).
pub(crate) fn start(
    stream: &'static str,
    mut from: impl Read + AsFd + Send + 'static,
    mut sink: Option<Sink>,
    tail: Arc<Mutex<Tail>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Reader> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let thread = std::thread::Builder::new()
        .name(format!("batchcast-{stream}"))
        .spawn(move || {
            let tick = Timespec {
                tv_sec: 0,
                tv_nsec: READER_TICK.as_nanos() as _,
            };
            let mut buf = vec![0u8; CHUNK];
            loop {
                if stop.load(Ordering::SeqCst) {
                    return true;
                }
                let mut fds = [PollFd::new(&from, PollFlags::IN)];
                match poll(&mut fds, Some(&tick)) {
                    Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                    Ok(_) => {}
                    Err(_) => return false,
                }
                match from.read(&mut buf) {
                    Ok(0) => return false,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                    Ok(n) => {
                        if let Ok(mut t) = tail.lock() {
                            t.push(&buf[..n]);
                        }
                        if let Some(sink) = sink.as_mut() {
                            sink(&buf[..n]);
                        }
                    }
                }
            }
        })?;
    Ok(Reader { stream, thread })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_only() {
        let mut t = Tail::new(10);
        t.push(b"line one\n");
        t.push(b"line two\nline three\n");
        assert_eq!(t.bytes.len(), 10);
        assert_eq!(t.lines(5), "ine three");
        t.push(&[b'x'; 100]);
        assert_eq!(t.lines(1), "x".repeat(10));
        let mut t = Tail::new(100);
        t.push(b"a\nb\nc\n");
        assert_eq!(t.lines(2), "b\nc");
    }
}
