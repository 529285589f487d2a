//! In-place writes through a copy-on-write view: private to the writer,
//! complete under many threads, and gone when the slot is reused, so that the
//! next batch in the slot is read as the producer wrote it.

use std::sync::Barrier;

use batchcast::internals::SLOT_HEADER;
use batchcast::internals::{Arena, ArenaView};

const SLOT: usize = 1 << 20;

fn read(v: &ArenaView, slot: usize, off: usize) -> u8 {
    // SAFETY: inside slot `slot` of the view's live mapping.
    unsafe { v.slot_ptr(slot).unwrap().add(off).read_volatile() }
}

fn write(v: &ArenaView, slot: usize, off: usize, value: u8) {
    // SAFETY: inside slot `slot` of a private, writable mapping: the write a
    // Python user makes through a DLPack tensor.
    unsafe { v.slot_ptr(slot).unwrap().add(off).write_volatile(value) }
}

#[test]
fn a_write_is_private_and_a_reused_slot_shows_the_new_batch() {
    let mut arena = Arena::create("cow", 3, SLOT).unwrap();
    arena.slot_mut(1).fill(7);
    let other = ArenaView::map(arena.readonly_fd().unwrap(), 3, SLOT, true).unwrap();
    let view = ArenaView::map(arena.readonly_fd().unwrap(), 3, SLOT, true).unwrap();
    let strict = ArenaView::map(arena.readonly_fd().unwrap(), 3, SLOT, false).unwrap();
    assert!(view.copy_on_write() && !strict.copy_on_write());
    view.refresh(1).unwrap();
    write(&view, 1, SLOT_HEADER, 42);
    write(&view, 1, SLOT_HEADER + 5000, 43); // second page, same slot
    assert_eq!(read(&view, 1, SLOT_HEADER), 42, "the writer sees its write");
    assert_eq!(read(&view, 1, SLOT_HEADER + 5000), 43);
    assert_eq!(
        read(&view, 1, SLOT_HEADER + 9000),
        7,
        "unwritten pages are shared"
    );
    assert_eq!(read(&other, 1, SLOT_HEADER), 7, "another consumer does not");
    assert_eq!(read(&strict, 1, SLOT_HEADER), 7);
    assert_eq!(arena.slot_mut(1)[SLOT_HEADER], 7, "nor does the producer");
    // The producer's later writes show through the pages nobody wrote.
    arena.slot_mut(2)[SLOT_HEADER] = 9;
    assert_eq!(read(&view, 2, SLOT_HEADER), 9);
    // The producer reuses slot 1; the consumer refreshes it before reading.
    arena.slot_mut(1).fill(8);
    assert_eq!(read(&view, 1, SLOT_HEADER), 42, "private until refreshed");
    assert_eq!(read(&view, 1, SLOT_HEADER + 9000), 8);
    view.refresh(1).unwrap();
    assert_eq!(
        read(&view, 1, SLOT_HEADER),
        8,
        "the new batch, not the old write"
    );
    assert_eq!(read(&view, 1, SLOT_HEADER + 5000), 8);
    assert_eq!(read(&other, 1, SLOT_HEADER), 8);
    assert!(view.refresh(3).is_err(), "out-of-range slots are refused");
}

#[test]
fn every_thread_keeps_its_writes_to_one_slot() {
    // Fault 1 of issue 10: with the old SIGSEGV handler, a second thread's
    // fault remapped the slot and threw away the first thread's pages.
    const THREADS: usize = 8;
    let mut arena = Arena::create("cow", 2, SLOT).unwrap();
    arena.slot_mut(0).fill(1);
    let view = ArenaView::map(arena.readonly_fd().unwrap(), 2, SLOT, true).unwrap();
    for round in 0..20u8 {
        view.refresh(0).unwrap();
        let start = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (view, start) = (&view, &start);
                s.spawn(move || {
                    start.wait();
                    // Interleaved pages: every thread faults all over the slot.
                    for p in (t..SLOT / 4096).step_by(THREADS) {
                        write(view, 0, p * 4096 + t, round + 2);
                    }
                });
            }
        });
        for p in 0..SLOT / 4096 {
            let t = p % THREADS;
            assert_eq!(
                read(&view, 0, p * 4096 + t),
                round + 2,
                "round {round}, page {p}"
            );
        }
    }
    view.refresh(0).unwrap();
    assert!((0..SLOT).step_by(4096).all(|o| read(&view, 0, o) == 1));
}
