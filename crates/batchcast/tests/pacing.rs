//! The producer paces itself to its fastest consumer (issue 25): never more
//! than a window ahead of it, whatever the lag budget, and woken by that
//! consumer's reads, so pacing costs it nothing. One producer and two
//! consumers in threads: a *holder* that takes one batch and then reads
//! nothing more (a trainer paused mid-epoch, without the signals), and a
//! *reader* as fast as it can be.

use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use common::{consumer_options, producer_options, publish, CONNECT};

use batchcast::{Consumer, Event, LagBudget, Producer, ProducerOptions, ShutdownReason};

const WINDOW: usize = 2;
/// Batches (of one row) per epoch; the lag budget holds two epochs.
const EPOCH: u64 = 400;

fn connect(dir: &std::path::Path) -> Consumer {
    common::connect("paced", consumer_options(dir))
}

/// Reads events until one `stop` accepts; returns the batches seen.
fn read_until(consumer: &mut Consumer, stop: impl Fn(&Event) -> bool) -> u64 {
    let mut batches = 0;
    loop {
        let event = consumer.next_event(&mut || false).unwrap();
        batches += u64::from(matches!(event, Event::Batch(_)));
        if stop(&event) {
            return batches;
        }
    }
}

#[test]
fn the_producer_stays_a_window_ahead_of_the_fastest_consumer_which_wakes_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = ProducerOptions {
        max_lag: Some(LagBudget::Batches(2 * EPOCH)),
        ..producer_options(dir.path(), WINDOW, EPOCH, 1)
    };
    let mut producer = Producer::create("paced", options).unwrap();
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = {
        let dir = dir.path().to_owned();
        std::thread::spawn(move || {
            let mut consumer = connect(&dir);
            let first = loop {
                if let Event::Batch(b) = consumer.next_event(&mut || false).unwrap() {
                    break b;
                }
            };
            held_tx.send(()).unwrap();
            // Paused: reads nothing more until the producer has finished.
            go_rx.recv().unwrap();
            drop(first);
            read_until(&mut consumer, |e| matches!(e, Event::Finished(_)))
        })
    };
    let (read_tx, read_rx) = mpsc::channel();
    let reader = {
        let dir = dir.path().to_owned();
        std::thread::spawn(move || {
            let mut consumer = connect(&dir);
            read_until(&mut consumer, |e| matches!(e, Event::EpochStart(_)));
            let t0 = Instant::now();
            let batches = read_until(&mut consumer, |e| matches!(e, Event::EpochEnd { .. }));
            read_tx.send((batches, t0.elapsed())).unwrap();
            // Stays attached, reading nothing, until the producer finishes.
            read_until(&mut consumer, |e| matches!(e, Event::Finished(_)))
        })
    };
    assert!(producer.wait_for_consumers(2, Some(CONNECT)));
    producer.begin_epoch().unwrap();
    for seq in 0..EPOCH {
        assert!(publish(&mut producer, seq, false));
    }
    producer.end_epoch().unwrap();
    held_rx.recv().unwrap();
    let (read, took) = read_rx.recv().unwrap();
    assert_eq!(read, EPOCH);
    // Each read that lets the producer go on wakes it: without that, every
    // WINDOW batches would wait for its 100 ms tick (20 s in all).
    assert!(
        took < Duration::from_secs(5),
        "the fastest consumer took {took:?} for {EPOCH} batches"
    );
    // The reader reads nothing more, the holder has read one batch, and
    // lag slots are to spare: the producer goes a window further (and a
    // batch more, which the reader may have begun to read as it saw the
    // epoch end), then blocks.
    producer.begin_epoch().unwrap();
    let mut ahead = 0;
    while publish(&mut producer, EPOCH + ahead, true) {
        ahead += 1;
        assert!(ahead <= EPOCH, "the producer never blocked");
    }
    assert!(
        ahead <= WINDOW as u64 + 1,
        "{ahead} batches published past what the fastest consumer read"
    );
    producer.finish(ShutdownReason::Finished);
    go_tx.send(()).unwrap();
    reader.join().unwrap();
    holder.join().unwrap();
}
