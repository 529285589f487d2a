//! The state's pacing, eviction and resume-point tests.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use super::super::lag::LagPolicy;
use super::{Phase, State};
use crate::board::BoardView;
use crate::wire::{ConsumerHello, JoinPolicy, OnEvict, Position};

const WINDOW: usize = 4;

/// A state whose arena has `WINDOW` window slots and `lag` lag slots
/// (its memory is never touched here: /dev/null stands in for it).
fn state(lag: usize) -> State {
    let mut s = State::new("pacing", WINDOW, Some(1), None, LagPolicy::Wait);
    let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    s.set_arena(fd, 4096, lag, Vec::new()).unwrap();
    s
}

/// Attaches a consumer; returns its id and the peer end of its socket
/// (kept open, so that what the producer sends it is taken).
fn attach(s: &mut State, on_evict: OnEvict) -> (u64, UnixStream) {
    attach_at(s, on_evict, None)
}

/// Attaches a consumer that asks to start at `start` (a restored state).
fn attach_at(s: &mut State, on_evict: OnEvict, start: Option<Position>) -> (u64, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let hello = ConsumerHello {
        batch_size: None,
        drop_last: false,
        join: JoinPolicy::CatchUp,
        label: String::new(),
        on_evict,
        start,
        deferred: false,
    };
    let id = s.add_consumer(Arc::new(ours), 1, hello).unwrap();
    (id, theirs)
}

/// Consumer `id` reads batch `seq` and drops it, as its process would:
/// acquired, then released, in its ledger.
fn read(s: &State, id: u64, seq: u64) {
    let i = s.slots.find(seq).unwrap();
    let ledger = s.consumers[&id].ledger.as_ref().unwrap();
    ledger.acquire(i, seq);
    ledger.release(i, seq);
}

/// Publishes batches of one row while a slot can be taken, at most
/// `most`; returns how many.
fn publish(s: &mut State, most: u64) -> u64 {
    let mut n = 0;
    while n < most {
        let Some(i) = s.take_slot(&mut |_| true) else {
            break;
        };
        let (seq, _) = s.next_batch();
        s.publish(i, seq, 1);
        n += 1;
    }
    n
}

/// Issue 25: with lag slots to spare and one consumer slower than the
/// other, the publisher still stays at most a window ahead of the
/// faster one; lag slots hold only what the faster one has read and the
/// slower one has not, and once the two are half a window apart the
/// faster one never waits for the slower.
#[test]
fn the_publisher_is_never_more_than_a_window_ahead_of_the_fastest_consumer() {
    let w = WINDOW as u64;
    let mut s = state(100);
    let (fast, _f) = attach(&mut s, OnEvict::Error);
    let (slow, _s) = attach(&mut s, OnEvict::Error);
    s.begin_epoch().unwrap();
    let view = BoardView::map(s.shm.as_ref().unwrap().board.readonly_fd().unwrap()).unwrap();
    assert_eq!(publish(&mut s, 1000), w);
    assert!(
        view.awaits_read_of(0),
        "the read it waits for is on the board"
    );
    let (mut fast_at, mut slow_at, mut widest) = (0u64, 0u64, 0u64);
    for round in 0..60 {
        if fast_at < s.next_batch().0 {
            read(&s, fast, fast_at);
            fast_at += 1;
        }
        if round % 2 == 0 {
            read(&s, slow, slow_at);
            slow_at += 1;
        }
        widest = widest.max(fast_at - slow_at);
        publish(&mut s, 1000);
        let ahead = s.next_batch().0 - fast_at;
        assert!(ahead <= w, "round {round}: {ahead} batches ahead");
        if fast_at - slow_at >= w / 2 {
            assert_eq!(ahead, w, "round {round}: the faster one waited");
            assert!(view.awaits_read_of(fast_at) && !view.awaits_read_of(fast_at - 1));
        }
    }
    assert!(widest > 2 * w, "the test ran the two apart ({widest})");
    let lag = s.slots.lag_in_use() as u64;
    assert!(lag > 0, "the slower one's backlog went to lag slots");
    assert!(
        lag <= widest,
        "{lag} lag slots for a gap of at most {widest}"
    );
    // The faster one leaves: the slower one paces the publisher now.
    s.remove_consumer(fast);
    assert_eq!(publish(&mut s, 1000), 0);
    while slow_at < s.next_batch().0 {
        read(&s, slow, slow_at);
        slow_at += 1;
    }
    assert_eq!(publish(&mut s, 1000), w);
}

/// A laggard evicted with `on_evict: rejoin` reads on from its next
/// epoch: where it was is not where it stands, so alone it does not
/// hold the publisher back a window ahead of a batch it will never read.
#[test]
fn a_rejoining_laggard_paces_from_its_new_epoch_not_from_where_it_fell_behind() {
    let mut s = state(2);
    let (fast, _f) = attach(&mut s, OnEvict::Error);
    let (slow, _s) = attach(&mut s, OnEvict::Rejoin);
    s.begin_epoch().unwrap();
    let mut fast_at = 0;
    loop {
        publish(&mut s, 1000);
        let (next, _) = s.next_batch();
        if fast_at == next {
            break; // every slot is held by the slower one
        }
        while fast_at < next {
            read(&s, fast, fast_at);
            fast_at += 1;
        }
    }
    assert_eq!(fast_at, (WINDOW + 2) as u64);
    assert_eq!(s.evict_laggards(), 1);
    s.remove_consumer(fast);
    s.end_epoch().unwrap();
    let first = s.next_batch().0;
    s.begin_epoch().unwrap();
    assert_eq!(publish(&mut s, 1000), WINDOW as u64);
    // It paces the publisher from where it reads on.
    assert_eq!(s.awaited_read(), Some(first));
    read(&s, slow, first);
    assert_eq!(publish(&mut s, 1000), 1);
}

/// The resume point is what the slowest consumer has taken, as a row of
/// its epoch, across an epoch boundary and from a resumed start.
#[test]
fn the_low_water_mark_is_the_slowest_consumers_row_in_its_epoch() {
    let mut s = state(8);
    s.set_samples_per_epoch(Some(6));
    s.resume_at(3, 4); // resumed: epoch 3 from its row 4
    let (fast, _f) = attach(&mut s, OnEvict::Error);
    let (slow, _s) = attach(&mut s, OnEvict::Error);
    assert_eq!(s.low_water(), Some((3, 4)), "nothing published yet");
    assert_eq!(s.begin_epoch().unwrap(), 3);
    assert_eq!(publish(&mut s, 2), 2); // rows 4 and 5 of epoch 3
    s.end_epoch().unwrap();
    assert_eq!(s.low_water(), Some((3, 4)), "nobody has read");
    read(&s, fast, 0);
    read(&s, fast, 1);
    s.begin_epoch().unwrap();
    assert_eq!(publish(&mut s, 3), 3); // rows 0..3 of epoch 4
    for seq in 2..5 {
        read(&s, fast, seq);
    }
    assert_eq!(s.low_water(), Some((3, 4)), "the slow one has read nothing");
    read(&s, slow, 0);
    assert_eq!(s.low_water(), Some((3, 5)), "the slow one took row 4");
    read(&s, slow, 1);
    read(&s, slow, 2);
    assert_eq!(s.low_water(), Some((4, 1)), "and now row 0 of epoch 4");
    s.remove_consumer(slow);
    assert_eq!(s.low_water(), Some((4, 3)), "the fast one has everything");
}

/// A consumer restored at a row of the current epoch starts at the
/// retained batch holding it, holding that batch and every later one;
/// once that batch is gone, or for an earlier epoch, it waits for the
/// next epoch (where it warns of what it cannot have).
#[test]
fn a_restored_consumer_starts_at_its_rows_batch_while_it_is_retained() {
    let mut s = state(0);
    let (front, _keep) = attach(&mut s, OnEvict::Error);
    s.begin_epoch().unwrap();
    assert_eq!(publish(&mut s, 3), 3); // rows 0, 1, 2 of epoch 0
    let at = |row| Some(Position { epoch: 0, row });
    let (restored, _k1) = attach_at(&mut s, OnEvict::Error, at(1));
    let c = &s.consumers[&restored];
    assert_eq!(
        (c.phase, c.joined_at, c.epoch_rows),
        (Phase::Following, Some(1), 2)
    );
    assert_eq!(s.slots.get(s.slots.find(1).unwrap()).holders.len(), 2);
    assert_eq!(s.slots.get(s.slots.find(0).unwrap()).holders, vec![front]);
    read(&s, front, 0);
    for seq in 1..3 {
        read(&s, front, seq);
        read(&s, restored, seq);
    }
    // The front reads on until batch 1's slot is taken again.
    for seq in 3..3 + WINDOW as u64 {
        assert_eq!(publish(&mut s, 1), 1);
        read(&s, front, seq);
        read(&s, restored, seq);
    }
    assert!(s.slots.find(1).is_none());
    let (late, _k2) = attach_at(&mut s, OnEvict::Error, at(1));
    assert_eq!(s.consumers[&late].phase, Phase::Waiting);
    s.end_epoch().unwrap();
    s.begin_epoch().unwrap();
    assert_eq!(publish(&mut s, 1), 1);
    let (earlier, _k3) = attach_at(&mut s, OnEvict::Error, at(0));
    assert_eq!(s.consumers[&earlier].phase, Phase::Waiting);
}
