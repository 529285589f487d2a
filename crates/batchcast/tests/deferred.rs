//! A consumer connected `deferred` (a trainer that loads its checkpoint
//! after building its loader) is welcomed but wants no batches until it
//! starts: the producer does not run ahead for it, so the position it
//! then asks for is still retained, and it starts exactly there.

mod common;

use common::{consumer_options, ids, producer_options, publish};

use batchcast::{Consumer, ConsumerOptions, Error, Event, Position, Producer, ProducerOptions};

const WINDOW: usize = 2;
/// Batches (of one row) per epoch.
const EPOCH: u64 = 8;

fn producer(dir: &std::path::Path) -> Producer {
    let options = ProducerOptions {
        // The arena exists at once: consumers are welcomed at connection.
        slot_size: Some(4096),
        ..producer_options(dir, WINDOW, EPOCH, 1)
    };
    Producer::create("deferred", options).unwrap()
}

fn connect(dir: &std::path::Path, deferred: bool) -> Consumer {
    let opts = ConsumerOptions {
        deferred,
        ..consumer_options(dir)
    };
    common::connect("deferred", opts)
}

/// The next event, which must already be there.
fn next(consumer: &mut Consumer) -> Event {
    consumer
        .try_next_event()
        .unwrap()
        .expect("an event the producer has sent")
}

/// The next event, which must be an epoch's start: its epoch and first row.
fn start_of(consumer: &mut Consumer) -> (u64, u64) {
    let Event::EpochStart(info) = consumer.next_event(&mut || false).unwrap() else {
        panic!("expected the epoch's start");
    };
    (info.epoch, info.first_row)
}

fn row_of(event: Event) -> i64 {
    match event {
        Event::Batch(b) => ids(&b)[0],
        _ => panic!("expected a batch"),
    }
}

#[test]
fn a_deferred_consumer_built_before_the_epoch_reads_it_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut producer = producer(dir.path());
    let mut consumer = connect(dir.path(), true);
    producer.begin_epoch().unwrap();
    for seq in 0..WINDOW as u64 {
        assert!(publish(&mut producer, seq, false));
    }
    assert!(
        !publish(&mut producer, 2, true),
        "a parked consumer paces the producer as a placed one does"
    );
    assert_eq!(start_of(&mut consumer), (0, 0));
    assert_eq!(row_of(next(&mut consumer)), 0);
    let again = consumer.start_at(None).unwrap_err();
    assert!(matches!(again, Error::InvalidArgument(_)), "{again}");
}

#[test]
fn a_deferred_consumer_placed_at_the_next_epoch_keeps_the_current_one_for_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut producer = producer(dir.path());
    let mut reader = connect(dir.path(), false);
    producer.begin_epoch().unwrap();
    for seq in 0..4 {
        assert!(publish(&mut producer, seq, false));
        while !matches!(reader.next_event(&mut || false).unwrap(), Event::Batch(_)) {}
    }
    // Batches 0 and 1 are gone: a catch-up joiner waits for epoch 1, and
    // holds batches 2 and 3 meanwhile, so the producer waits.
    let mut restored = connect(dir.path(), true);
    assert!(!publish(&mut producer, 4, true));
    restored
        .start_at(Some(Position { epoch: 0, row: 3 }))
        .unwrap();
    // Placed at batch 3, it lets batch 2 go.
    assert!(publish(&mut producer, 4, false));
    assert_eq!(start_of(&mut restored), (0, 3));
    assert_eq!(row_of(restored.next_event(&mut || false).unwrap()), 3);
    assert_eq!(row_of(restored.next_event(&mut || false).unwrap()), 4);
}
