//! The consumer's side of its connection, shared with every lease: the
//! socket, the board, its ledger and the holder counts.
//!
//! Reading a slot: [`Link::acquire`] marks it acquired in the ledger and
//! checks, after the mark, that the producer has not evicted this consumer
//! (the handshake is described in `crate::ledger`). Releasing a slot:
//! [`Link::release`] writes the ledger, counts the release in the shared
//! holder counts ([`crate::holds`]), and only the last holder, and only while
//! the board says the producer waits, sends the `Released` wake-up. A
//! consumer that begins to read the batch the board says the producer
//! waits for (it paces itself to the most advanced consumer) sends the
//! same wake-up.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::board::BoardView;
use crate::error::Result;
use crate::holds::HoldsView;
use crate::ledger::Ledger;
use crate::wire::{self, ToProducer};

/// The consumer's side of the connection.
pub(crate) struct Link {
    pub sock: UnixStream,
    pub board: BoardView,
    ledger: Ledger,
    holds: HoldsView,
    send_lock: Mutex<()>,
    /// The eviction generation this consumer has acted on.
    evictions_seen: AtomicU64,
    pub delivered: AtomicU64,
    pub waited_ns: AtomicU64,
}

impl Link {
    pub fn new(sock: UnixStream, board: BoardView, ledger: Ledger, holds: HoldsView) -> Self {
        Link {
            sock,
            board,
            evictions_seen: AtomicU64::new(ledger.evictions()),
            ledger,
            holds,
            send_lock: Mutex::new(()),
            delivered: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
        }
    }

    /// Copies the running figures into the ledger, for `batchcast status`.
    pub fn record(&self) {
        self.ledger.record(
            self.delivered.load(Ordering::Relaxed),
            self.waited_ns.load(Ordering::Relaxed),
        );
    }

    /// Marks batch `seq` in `slot` acquired, before anything of it is read.
    /// False when the producer has evicted this consumer meanwhile: then the
    /// slot must not be read (it may be rewritten), and the mark is undone.
    pub fn acquire(&self, slot: usize, seq: u64) -> bool {
        let generation = self.ledger.acquire(slot, seq);
        if generation != self.evictions_seen.load(Ordering::Relaxed) {
            self.ledger.release(slot, seq);
            return false;
        }
        // The position is written (SeqCst) before the board is read: if
        // the producer misses it, this consumer sees what it waits for.
        if self.board.awaits_read_of(seq) {
            // If the producer is gone there is nobody to tell; that is fine.
            let _ = self.send(&ToProducer::Released);
        }
        true
    }

    /// True when the producer has evicted this consumer and it has not
    /// acted on it yet.
    pub fn is_evicted(&self) -> bool {
        self.ledger.evictions() != self.evictions_seen.load(Ordering::Relaxed)
    }

    /// Records that the eviction of generation `generation` was acted on:
    /// batches published after it may be read again.
    pub fn evicted(&self, generation: u64) {
        self.evictions_seen.fetch_max(generation, Ordering::Relaxed);
    }

    /// Releases batch `seq` in `slot`; the last holder wakes the producer
    /// if it waits.
    pub fn release(&self, slot: usize, seq: u64) {
        // The order matters (all SeqCst): the producer sets its flag and
        // then looks at the ledgers; we write the ledger, count the release
        // and then look at the flag. Of the holders, the last to count sees
        // every other release before its own, so if it misses the flag the
        // producer sees all the releases.
        self.ledger.release(slot, seq);
        self.record();
        if self.holds.release(slot) && self.board.producer_waiting() {
            // If the producer is gone there is nobody to tell; that is fine.
            let _ = self.send(&ToProducer::Released);
        }
    }

    /// Sends a frame; errors are for the caller to judge.
    pub fn send(&self, msg: &ToProducer) -> Result<()> {
        let frame = wire::encode(msg)?;
        let _guard = self.send_lock.lock().unwrap_or_else(|p| p.into_inner());
        wire::send_frame(&self.sock, &frame)
    }
}
