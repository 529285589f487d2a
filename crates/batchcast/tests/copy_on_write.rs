//! In-place writes through a read-only view: with copy-on-write they land on
//! a private copy instead of killing the process, and a refresh brings back
//! the producer's bytes. Its own test binary: it installs a SIGSEGV handler.

use batchcast::arena::{Arena, ArenaView};
use batchcast::layout::SLOT_HEADER;

#[test]
fn a_write_to_a_view_is_private_and_refresh_restores_the_shared_slot() {
    let mut arena = Arena::create("cow", 3, 8192).unwrap();
    arena.slot_mut(1)[SLOT_HEADER] = 7;
    let other_view = ArenaView::map(arena.readonly_fd().unwrap(), 3, 8192, false).unwrap();
    let view = ArenaView::map(arena.readonly_fd().unwrap(), 3, 8192, true).unwrap();
    assert!(view.copy_on_write());
    let p = view.slot_ptr(1).unwrap() as *mut u8;
    // SAFETY: this is the write a Python user makes through a DLPack tensor;
    // the test is that the fault handler turns it into a private copy.
    unsafe {
        p.add(SLOT_HEADER).write_volatile(42);
        p.add(SLOT_HEADER + 5000).write_volatile(43); // second page, same slot
    }
    // SAFETY: reading our own mapping.
    let read =
        |v: &ArenaView, off: usize| unsafe { v.slot_ptr(1).unwrap().add(off).read_volatile() };
    assert_eq!(read(&view, SLOT_HEADER), 42, "the writer sees its write");
    assert_eq!(read(&view, SLOT_HEADER + 5000), 43);
    assert_eq!(read(&other_view, SLOT_HEADER), 7, "another reader does not");
    assert_eq!(arena.slot_mut(1)[SLOT_HEADER], 7, "nor does the producer");
    // Other slots stay shared.
    arena.slot_mut(2)[SLOT_HEADER] = 9;
    assert_eq!(read_slot(&view, 2), 9);
    // The producer reuses slot 1; the consumer refreshes it before reading.
    arena.slot_mut(1)[SLOT_HEADER] = 8;
    assert_eq!(
        read(&view, SLOT_HEADER),
        42,
        "still private until refreshed"
    );
    view.refresh(1).unwrap();
    assert_eq!(read(&view, SLOT_HEADER), 8);
    assert!(view.refresh(3).is_err(), "out-of-range slots are refused");
}

fn read_slot(v: &ArenaView, slot: usize) -> u8 {
    // SAFETY: reading our own mapping.
    unsafe { v.slot_ptr(slot).unwrap().add(SLOT_HEADER).read_volatile() }
}
