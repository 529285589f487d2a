//! The publication board: how a producer announces batches to every
//! consumer at once, without a message per consumer.
//!
//! A small region (`crate::region`), written by the producer only and
//! mapped read-only by consumers. Its fixed part ([`BoardHead`]) holds:
//! - `published`: every batch with a sequence number below it is in a slot;
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
//! Its items are a ring that maps the last [`BoardView::ring_len`] sequence
//! numbers to their slots (entry `seq % ring` holds `seq << 16 | slot`).
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

use rustix::thread::futex;

use crate::error::{Error, Result};
use crate::region::{self, Access, Geometry, Kind, Region, RegionOpenError, Shared, Writers};

/// Slots are numbered in the low 16 bits of a ring entry.
pub const MAX_SLOTS: usize = 1 << 16;

/// The board's fixed part; its items are the ring's entries
/// (`AtomicU64`, `seq << 16 | slot`).
#[repr(C)]
pub(crate) struct BoardHead {
    published: AtomicU64,
    /// `seq + 1` of the batch the producer waits for a consumer to begin
    /// reading; 0: none.
    awaited_read: AtomicU64,
    wake: AtomicU32,
    producer_waiting: AtomicU32,
}

// SAFETY: `#[repr(C)]`, atomics only.
unsafe impl Shared for BoardHead {}

impl Kind for BoardHead {
    const MAGIC: [u8; 8] = *b"BCBOARD2";
    const WHAT: &'static str = "board";
    const ITEMS: &'static str = "ring entries";
}

/// Bytes of a ring entry.
const ENTRY: usize = std::mem::size_of::<AtomicU64>();

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

/// The board no longer names a batch: its ring entry was reused for a
/// later one (the producer stopped keeping it for this consumer).
#[derive(Debug, thiserror::Error)]
#[error("the board no longer names batch {seq} (its entry names batch {names})")]
pub(crate) struct Stale {
    /// The batch asked for.
    pub seq: u64,
    /// The batch the entry names.
    pub names: u64,
}

impl From<Stale> for Error {
    fn from(e: Stale) -> Error {
        Error::Protocol(e.to_string())
    }
}

/// The ring entry of `seq` in `region`.
fn entry(region: &Region<BoardHead>, seq: u64) -> &AtomicU64 {
    let k = (seq % region.items() as u64) as usize;
    region
        .item(k)
        .expect("an index modulo the ring's length is in the ring")
}

/// The producer's writable board.
pub struct Board {
    file: File,
    region: Region<BoardHead>,
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
        let geometry = Geometry {
            items: ring,
            item_size: ENTRY,
        };
        let (region, file) = Region::create(
            &format!("batchcast-board:{name}"),
            geometry,
            ring,
            Writers::Creator,
        )?;
        // Every ring entry starts out naming no batch (seq u48::MAX).
        for k in 0..ring as u64 {
            entry(&region, k).store(u64::MAX, Ordering::Relaxed);
        }
        Ok(Board { file, region })
    }

    /// A read-only descriptor of the board, to send to consumers.
    pub fn readonly_fd(&self) -> Result<OwnedFd> {
        region::reopen_readonly(&self.file)
    }

    /// Entries in the ring.
    #[cfg(test)]
    pub fn ring_len(&self) -> usize {
        self.region.items()
    }

    fn head(&self) -> &BoardHead {
        self.region.fixed()
    }

    /// Makes batch `seq`, written in `slot`, visible to consumers. Batches
    /// are published in sequence order.
    pub fn publish(&self, seq: u64, slot: usize) {
        entry(&self.region, seq).store(seq << 16 | slot as u64, Ordering::SeqCst);
        self.head().published.store(seq + 1, Ordering::SeqCst);
        self.bump();
    }

    /// Tells sleeping consumers that something happened (a publish, a
    /// control message sent): one futex call, whatever their number.
    pub fn bump(&self) {
        let wake = &self.head().wake;
        wake.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(wake, futex::Flags::empty(), 1);
    }

    /// Says whether the producer waits for a released slot.
    pub fn set_producer_waiting(&self, waiting: bool) {
        self.head()
            .producer_waiting
            .store(u32::from(waiting), Ordering::SeqCst);
    }

    /// Says which batch, if any, the producer waits for a consumer to
    /// begin reading (SeqCst, before it looks at the ledgers again: the
    /// same order as [`Board::set_producer_waiting`]).
    pub fn set_awaited_read(&self, seq: Option<u64>) {
        self.head()
            .awaited_read
            .store(seq.map_or(0, |s| s + 1), Ordering::SeqCst);
    }
}

/// A consumer's read-only view of the board.
pub struct BoardView {
    region: Region<BoardHead>,
}

impl BoardView {
    /// Entries in the ring: no more batches than this can be published and
    /// still unread.
    pub fn ring_len(&self) -> usize {
        self.region.items()
    }

    /// Maps the board received from the producer and checks its header.
    pub fn map(fd: OwnedFd) -> Result<BoardView, RegionOpenError> {
        let region = Region::open(fd, Access::ReadOnly, None, ENTRY)?;
        Ok(BoardView { region })
    }

    fn head(&self) -> &BoardHead {
        self.region.fixed()
    }

    /// Batches with a sequence number below this are published.
    pub fn published(&self) -> u64 {
        self.head().published.load(Ordering::SeqCst)
    }

    /// The slot holding batch `seq`, if the ring still names it.
    pub fn slot_of(&self, seq: u64) -> Result<usize, Stale> {
        let entry = entry(&self.region, seq).load(Ordering::SeqCst);
        if entry >> 16 != seq {
            return Err(Stale {
                seq,
                names: entry >> 16,
            });
        }
        Ok((entry & 0xffff) as usize)
    }

    /// The wake word now: read it before looking for work, then pass it to
    /// [`BoardView::sleep`].
    pub fn wake_word(&self) -> u32 {
        self.head().wake.load(Ordering::SeqCst)
    }

    /// True while the producer waits for a released slot.
    pub fn producer_waiting(&self) -> bool {
        self.head().producer_waiting.load(Ordering::SeqCst) != 0
    }

    /// True while the producer waits for a consumer to begin reading batch
    /// `seq` or an earlier one: a consumer that has just begun to read
    /// `seq` (its position written first) wakes it.
    pub fn awaits_read_of(&self, seq: u64) -> bool {
        match self.head().awaited_read.load(Ordering::SeqCst) {
            0 => false,
            awaited => seq.saturating_add(1) >= awaited,
        }
    }

    /// Sleeps until the wake word differs from `seen` or `timeout` passes.
    /// A consumer woken by the producer's chain passes the wake-up on.
    pub fn sleep(&self, seen: u32, timeout: Duration) -> Woken {
        let word = &self.head().wake;
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
        // The header's items word (word 4), rewritten by a hostile producer.
        for bad in [0, 1 << 40, u64::MAX / 4 + 1, u64::MAX] {
            let board = Board::create("t", 2).unwrap();
            let header = board.region.map().as_mut_ptr().cast::<AtomicU64>();
            // SAFETY: word 4 of the header, inside the mapping, 8-aligned.
            unsafe { &*header.add(4) }.store(bad, Ordering::Relaxed);
            let err = BoardView::map(board.readonly_fd().unwrap()).err().unwrap();
            assert!(
                matches!(err, RegionOpenError::Malformed { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_ledger_sent_as_the_board_is_refused() {
        let (_ledger, fd) = crate::ledger::Ledger::create(2).unwrap();
        let err = BoardView::map(fd).err().unwrap();
        assert!(matches!(err, RegionOpenError::WrongKind { .. }), "{err}");
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
        let res = unsafe { memmap2::MmapOptions::new().len(4096).map_mut(&file) };
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
