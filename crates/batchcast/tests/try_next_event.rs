//! `Consumer::try_next_event` never waits, and a reader that mixes it with
//! `next_event` (as the Python consumer's prefetch does) sees the same
//! events in the same order as one that only waits.

use std::sync::mpsc;

mod common;

use common::{connect_in_batches, ids, producer_options, publish_ids, CONNECT};

use batchcast::{Event, Producer, ShutdownReason};

const SAMPLES: u64 = 100;
const PRODUCER_BS: u64 = 16;
const CONSUMER_BS: u64 = 6;

#[test]
fn try_next_event_returns_none_when_nothing_is_there_and_keeps_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let options = producer_options(dir.path(), 8, SAMPLES, PRODUCER_BS);
    let mut producer = Producer::create("poll", options).unwrap();
    let (polled_tx, polled_rx) = mpsc::channel();
    let consumer_dir = dir.path().to_owned();
    let reader = std::thread::spawn(move || {
        let mut never = || false;
        let mut consumer = connect_in_batches("poll", &consumer_dir, CONSUMER_BS);
        // The welcome comes with the first producer batch (16 rows: the
        // consumer's batches 0 and 1); the next waits for this thread.
        let mut seen = Vec::new();
        while seen.len() < 3 {
            seen.push(describe(consumer.next_event(&mut never).unwrap()));
        }
        let nothing_yet = consumer.try_next_event().unwrap().is_none();
        polled_tx.send(()).unwrap();
        let mut polls = 0;
        loop {
            let event = match consumer.try_next_event().unwrap() {
                Some(e) => {
                    polls += 1;
                    e
                }
                None => consumer.next_event(&mut never).unwrap(),
            };
            let done = matches!(event, Event::Finished(_));
            seen.push(describe(event));
            if done {
                return (nothing_yet, seen, polls);
            }
        }
    });
    assert!(producer.wait_for_consumers(1, Some(CONNECT)));
    producer.begin_epoch().unwrap();
    let mut never = || false;
    for i in 0..SAMPLES.div_ceil(PRODUCER_BS) {
        if i == 1 {
            polled_rx.recv().unwrap();
        }
        let first = i * PRODUCER_BS;
        let rows = PRODUCER_BS.min(SAMPLES - first);
        publish_ids(&mut producer, first, rows, &[], &mut never);
    }
    producer.end_epoch().unwrap();
    producer.finish(ShutdownReason::Finished);
    let (nothing_yet, seen, polls) = reader.join().unwrap();

    assert!(nothing_yet, "no batch before the producer published one");
    let mut want = vec!["start 0".to_string()];
    for k in 0..SAMPLES.div_ceil(CONSUMER_BS) {
        want.push(format!("batch {k} from {}", k * CONSUMER_BS));
    }
    want.push(format!("end 0 {SAMPLES}"));
    want.push("finished".into());
    assert_eq!(seen, want);
    assert!(polls > 0, "some events were there without waiting");
}

fn describe(event: Event) -> String {
    match event {
        Event::EpochStart(info) => format!("start {}", info.epoch),
        Event::Batch(b) => format!("batch {} from {}", b.index, ids(&b)[0]),
        Event::EpochEnd { epoch, samples } => format!("end {epoch} {samples}"),
        Event::Finished(_) => "finished".into(),
        Event::Trigger(t) => format!("trigger {}", t.seq),
    }
}
