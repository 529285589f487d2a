//! The publication board: how a producer announces batches to every
//! consumer at once, without a message per consumer.
//!
//! A small sealed memfd, written by the producer and mapped read-only by
//! consumers. It holds:
//! - `published`: every batch with a sequence number below it is in a slot;
//! - a ring that maps the last [`Board::ring_len`] sequence numbers to
//!   their slots (entry `seq % ring` holds `seq << 16 | slot`);
//! - `wake`, a futex word the producer bumps after every publish and every
//!   control message it sends, so that a consumer can sleep until something
//!   happens;
//! - `producer_waiting`, set while the producer waits for a slot to be
//!   released, so that consumers send a wake-up message only then;
//! - `awaited_read`, set while the producer waits for the most advanced
//!   consumer to begin reading a batch (it never publishes more than a
//!   window ahead of that consumer; see `crate::producer`): `seq + 1` for
//!   batch `seq`, 0 when it waits for no read. The consumer that begins to
//!   read that batch, or a later one, sends the wake-up.
//!
//! Waking is a chain: the producer wakes one sleeper per bump, and each
//! woken consumer that sees the word changed wakes two more before it does
//! anything else. The producer's cost per batch is therefore one futex call
//! however many consumers there are; a sleeper woken by mistake (it slept on
//! the new value) sees nothing new and ends its branch of the chain. Every
//! sleep is bounded by the caller's tick, so a broken chain (a consumer
//! killed just after it was woken) delays the others by one tick at most.
//!
//! The ring is large enough for a consumer's whole backlog: a consumer at
//! sequence number `s` holds every later batch it has not read yet, so at
//! most `window` batches are published past `s`, and the ring has at least
//! `window` entries. Each entry names its own sequence number, so a
//! consumer that reads a stale one gets an error, never the wrong batch.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use rustix::thread::futex;

use crate::error::{Error, Result};
use crate::shm;

const MAGIC: u64 = u64::from_le_bytes(*b"BCBOARD1");
const MAGIC_AT: usize = 0;
const RING_LEN_AT: usize = 8;
const PUBLISHED_AT: usize = 16;
const WAKE_AT: usize = 24;
const WAITING_AT: usize = 28;
const AWAITED_READ_AT: usize = 32;
const RING_AT: usize = 64;
/// Slots are numbered in the low 16 bits of a ring entry.
pub const MAX_SLOTS: usize = 1 << 16;

/// The ring length for a window of `window` slots.
fn ring_len(window: usize) -> usize {
    (2 * window).max(64).next_power_of_two()
}

/// How long a consumer sleeps, at most, before it looks again.
#[derive(Debug, PartialEq, Eq)]
pub enum Woken {
    /// The wake word changed (or a wake-up came): look for work.
    Changed,
    /// Nothing happened within the timeout.
    TimedOut,
}

/// The producer's writable board.
pub struct Board {
    file: File,
    map: MmapRaw,
    ring: usize,
}

impl Board {
    /// Creates a board for a window of `window` slots.
    pub fn create(name: &str, window: usize) -> Result<Board> {
        if window == 0 || window > MAX_SLOTS {
            return Err(Error::InvalidArgument(format!(
                "window must be between 1 and {MAX_SLOTS} slots, not {window}"
            )));
        }
        let ring = ring_len(window);
        let (file, map) =
            shm::create_sealed(&format!("batchcast-board:{name}"), RING_AT + 8 * ring)?;
        let board = Board { file, map, ring };
        board.word64(MAGIC_AT).store(MAGIC, Ordering::Relaxed);
        board
            .word64(RING_LEN_AT)
            .store(ring as u64, Ordering::Relaxed);
        // Every ring entry starts out naming no batch (seq u48::MAX).
        for k in 0..ring {
            board.entry(k).store(u64::MAX, Ordering::Relaxed);
        }
        Ok(board)
    }

    /// A read-only descriptor of the board, to send to consumers.
    pub fn readonly_fd(&self) -> Result<OwnedFd> {
        shm::reopen_readonly(&self.file)
    }

    /// Entries in the ring.
    #[cfg(test)]
    pub fn ring_len(&self) -> usize {
        self.ring
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        shm::atomic_u64(&self.map, at)
    }

    fn word32(&self, at: usize) -> &AtomicU32 {
        shm::atomic_u32(&self.map, at)
    }

    fn entry(&self, k: usize) -> &AtomicU64 {
        self.word64(RING_AT + 8 * k)
    }

    /// Makes batch `seq`, written in `slot`, visible to consumers. Batches
    /// are published in sequence order.
    pub fn publish(&self, seq: u64, slot: usize) {
        self.entry((seq % self.ring as u64) as usize)
            .store(seq << 16 | slot as u64, Ordering::SeqCst);
        self.word64(PUBLISHED_AT).store(seq + 1, Ordering::SeqCst);
        self.bump();
    }

    /// Tells sleeping consumers that something happened (a publish, a
    /// control message sent): one futex call, whatever their number.
    pub fn bump(&self) {
        let wake = self.word32(WAKE_AT);
        wake.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(wake, futex::Flags::empty(), 1);
    }

    /// Says whether the producer waits for a released slot.
    pub fn set_producer_waiting(&self, waiting: bool) {
        self.word32(WAITING_AT)
            .store(u32::from(waiting), Ordering::SeqCst);
    }

    /// Says which batch, if any, the producer waits for a consumer to
    /// begin reading (SeqCst, before it looks at the ledgers again: the
    /// same order as [`Board::set_producer_waiting`]).
    pub fn set_awaited_read(&self, seq: Option<u64>) {
        self.word64(AWAITED_READ_AT)
            .store(seq.map_or(0, |s| s + 1), Ordering::SeqCst);
    }
}

/// A consumer's read-only view of the board.
pub struct BoardView {
    map: MmapRaw,
    ring: usize,
}

impl BoardView {
    /// Entries in the ring: no more batches than this can be published and
    /// still unread.
    pub fn ring_len(&self) -> usize {
        self.ring
    }

    /// Maps the board received from the producer and checks its header.
    pub fn map(fd: OwnedFd) -> Result<BoardView> {
        let file = File::from(fd);
        let len = shm::file_len(&file)?;
        if len < RING_AT + 8 || !shm::is_sealed(&file) {
            return Err(Error::Protocol(format!(
                "the producer sent a board of {len} bytes (unsealed or too small)"
            )));
        }
        // A read-only shared mapping of the producer's sealed memfd, which
        // cannot shrink under us. Its words are read with atomics only.
        let map = MmapOptions::new()
            .len(len)
            .map_raw_read_only(&file)
            .map_err(|e| Error::io("cannot map the producer's board", e))?;
        let mut view = BoardView { map, ring: 0 };
        if view.word64(MAGIC_AT).load(Ordering::Relaxed) != MAGIC {
            return Err(Error::Protocol("the board has a bad magic number".into()));
        }
        let ring = view.word64(RING_LEN_AT).load(Ordering::Relaxed) as usize;
        let end = ring.checked_mul(8).and_then(|b| b.checked_add(RING_AT));
        if ring == 0 || end.is_none_or(|end| end > len) {
            return Err(Error::Protocol(format!(
                "the board's ring of {ring} entries does not fit its {len} bytes"
            )));
        }
        view.ring = ring;
        Ok(view)
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        shm::atomic_u64(&self.map, at)
    }

    fn word32(&self, at: usize) -> &AtomicU32 {
        shm::atomic_u32(&self.map, at)
    }

    /// Batches with a sequence number below this are published.
    pub fn published(&self) -> u64 {
        self.word64(PUBLISHED_AT).load(Ordering::SeqCst)
    }

    /// The slot holding batch `seq`, if the ring still names it.
    pub fn slot_of(&self, seq: u64) -> Result<usize> {
        let entry = self
            .word64(RING_AT + 8 * (seq % self.ring as u64) as usize)
            .load(Ordering::SeqCst);
        if entry >> 16 != seq {
            return Err(Error::Protocol(format!(
                "the board no longer names batch {seq} (its entry names batch {})",
                entry >> 16
            )));
        }
        Ok((entry & 0xffff) as usize)
    }

    /// The wake word now: read it before looking for work, then pass it to
    /// [`BoardView::sleep`].
    pub fn wake_word(&self) -> u32 {
        self.word32(WAKE_AT).load(Ordering::SeqCst)
    }

    /// True while the producer waits for a released slot.
    pub fn producer_waiting(&self) -> bool {
        self.word32(WAITING_AT).load(Ordering::SeqCst) != 0
    }

    /// True while the producer waits for a consumer to begin reading batch
    /// `seq` or an earlier one: a consumer that has just begun to read
    /// `seq` (its position written first) wakes it.
    pub fn awaits_read_of(&self, seq: u64) -> bool {
        match self.word64(AWAITED_READ_AT).load(Ordering::SeqCst) {
            0 => false,
            awaited => seq.saturating_add(1) >= awaited,
        }
    }

    /// Sleeps until the wake word differs from `seen` or `timeout` passes.
    /// A consumer woken by the producer's chain passes the wake-up on.
    pub fn sleep(&self, seen: u32, timeout: Duration) -> Woken {
        let word = self.word32(WAKE_AT);
        let ts = futex::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos() as i64,
        };
        match futex::wait(word, futex::Flags::empty(), seen, Some(&ts)) {
            Ok(()) => {
                if word.load(Ordering::SeqCst) != seen {
                    // Woken for a real change: wake the next two sleepers.
                    let _ = futex::wake(word, futex::Flags::empty(), 2);
                    Woken::Changed
                } else {
                    Woken::TimedOut
                }
            }
            Err(rustix::io::Errno::TIMEDOUT) => Woken::TimedOut,
            // AGAIN: the word changed before we slept. INTR: a signal; the
            // caller looks again either way.
            Err(_) => Woken::Changed,
        }
    }
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    fn pair(window: usize) -> (Board, BoardView) {
        let board = Board::create("t", window).unwrap();
        let view = BoardView::map(board.readonly_fd().unwrap()).unwrap();
        (board, view)
    }

    #[test]
    fn published_batches_are_found_in_their_slots() {
        let (board, view) = pair(4);
        assert_eq!(view.published(), 0);
        assert!(view.slot_of(0).is_err());
        board.publish(0, 3);
        board.publish(1, 0);
        assert_eq!(view.published(), 2);
        assert_eq!(view.slot_of(0).unwrap(), 3);
        assert_eq!(view.slot_of(1).unwrap(), 0);
    }

    #[test]
    fn a_stale_ring_entry_is_an_error_not_another_batch() {
        let (board, view) = pair(4);
        let ring = board.ring_len() as u64;
        board.publish(5, 1);
        board.publish(5 + ring, 2);
        let err = view.slot_of(5).unwrap_err().to_string();
        assert!(err.contains("no longer names batch 5"), "{err}");
        assert_eq!(view.slot_of(5 + ring).unwrap(), 2);
    }

    #[test]
    fn a_ring_length_past_the_mapping_is_refused_even_where_it_overflows() {
        for bad in [0, 1 << 40, u64::MAX / 4 + 1, u64::MAX] {
            let board = Board::create("t", 2).unwrap();
            board.word64(RING_LEN_AT).store(bad, Ordering::Relaxed);
            let err = BoardView::map(board.readonly_fd().unwrap()).err().unwrap();
            assert!(matches!(err, Error::Protocol(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn the_ring_covers_twice_the_window() {
        assert!(Board::create("t", 100).unwrap().ring_len() >= 200);
        assert!(Board::create("t", 0).is_err());
        assert!(Board::create("t", MAX_SLOTS + 1).is_err());
    }

    #[test]
    fn a_sleeper_wakes_when_the_producer_bumps() {
        let (board, view) = pair(2);
        let view = Arc::new(view);
        let seen = view.wake_word();
        let sleeper = {
            let view = Arc::clone(&view);
            std::thread::spawn(move || view.sleep(seen, Duration::from_secs(30)))
        };
        board.publish(0, 0);
        assert_eq!(sleeper.join().unwrap(), Woken::Changed);
    }

    #[test]
    fn a_stale_word_does_not_sleep_and_a_quiet_board_times_out() {
        let (board, view) = pair(2);
        let seen = view.wake_word();
        board.bump();
        let t0 = Instant::now();
        assert_eq!(view.sleep(seen, Duration::from_secs(30)), Woken::Changed);
        assert!(t0.elapsed() < Duration::from_secs(5));
        let seen = view.wake_word();
        assert_eq!(view.sleep(seen, Duration::from_millis(20)), Woken::TimedOut);
    }

    #[test]
    fn the_chain_wakes_every_sleeper_with_one_producer_wake() {
        let (board, view) = pair(2);
        let view = Arc::new(view);
        let seen = view.wake_word();
        let sleepers: Vec<_> = (0..6)
            .map(|_| {
                let view = Arc::clone(&view);
                std::thread::spawn(move || view.sleep(seen, Duration::from_secs(30)))
            })
            .collect();
        // Sleepers that have not gone to sleep yet see the new word at once;
        // those asleep are woken by the chain. None waits for its timeout.
        let t0 = Instant::now();
        board.bump();
        for s in sleepers {
            assert_eq!(s.join().unwrap(), Woken::Changed);
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn consumers_cannot_map_the_board_writable() {
        let board = Board::create("t", 2).unwrap();
        let file = File::from(board.readonly_fd().unwrap());
        // SAFETY: the mapping is expected to fail; nothing is read or written.
        let res = unsafe { MmapOptions::new().len(4096).map_mut(&file) };
        assert!(res.is_err());
    }

    #[test]
    fn producer_waiting_is_seen_by_consumers() {
        let (board, view) = pair(2);
        assert!(!view.producer_waiting());
        board.set_producer_waiting(true);
        assert!(view.producer_waiting());
        board.set_producer_waiting(false);
        assert!(!view.producer_waiting());
    }

    #[test]
    fn an_awaited_read_is_seen_by_readers_of_that_batch_or_later() {
        let (board, view) = pair(2);
        assert!(!view.awaits_read_of(0));
        board.set_awaited_read(Some(0));
        assert!(view.awaits_read_of(0) && view.awaits_read_of(5));
        board.set_awaited_read(Some(7));
        assert!(!view.awaits_read_of(6));
        assert!(view.awaits_read_of(7) && view.awaits_read_of(8));
        board.set_awaited_read(None);
        assert!(!view.awaits_read_of(7));
    }
}
