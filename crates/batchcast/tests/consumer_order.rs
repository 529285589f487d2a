//! A consumer's stream keeps its order when a batch cannot be built: the
//! error comes exactly where the batch would have, after every batch before
//! it, and the stream goes on after it. A producer and a consumer thread in
//! one process: the order is the consumer's own logic (the transport
//! between processes is tested in batchcast-cli's tests/transport.rs).

mod common;

use common::{assert_says, connect_in_batches, ids, producer_options, publish_ids, CONNECT};

use batchcast::{DType, Error, Event, LeafSpec, Producer, ShutdownReason};

const SAMPLES: u64 = 1000;
const PRODUCER_BS: u64 = 64;
const CONSUMER_BS: u64 = 7;

/// What the consumer saw: a batch's index and ids, or an invalid batch.
type Seen = Result<(u64, Vec<i64>), String>;

/// Producer batches 10 and 11 (rows 640..768) have samples 2 wide instead
/// of 4. Consumer batches 91 (rows 637..644) and 109 (763..770) straddle a
/// change and cannot be built; all 141 others arrive, in order, exact.
#[test]
fn fault7_invalid_batch_keeps_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let options = producer_options(dir.path(), 8, SAMPLES, PRODUCER_BS);
    let mut producer = Producer::create("order", options).unwrap();
    let consumer_dir = dir.path().to_owned();
    let reader = std::thread::spawn(move || read_epoch(consumer_dir));
    assert!(producer.wait_for_consumers(1, Some(CONNECT)));
    producer.begin_epoch().unwrap();
    let mut never = || false;
    for i in 0..SAMPLES.div_ceil(PRODUCER_BS) {
        let first = i * PRODUCER_BS;
        let rows = PRODUCER_BS.min(SAMPLES - first);
        let width = if (10..12).contains(&i) { 2 } else { 4 };
        let x = LeafSpec::array(DType::F32, vec![rows, width]);
        publish_ids(&mut producer, first, rows, &[x], &mut never);
    }
    producer.end_epoch().unwrap();
    producer.finish(ShutdownReason::Finished);
    let seen = reader.join().unwrap();

    let bad = [91, 109];
    let expected: Vec<Seen> = (0..SAMPLES.div_ceil(CONSUMER_BS))
        .map(|k| {
            if bad.contains(&k) {
                Err("invalid".into())
            } else {
                let end = ((k + 1) * CONSUMER_BS).min(SAMPLES);
                Ok((k, (k * CONSUMER_BS..end).map(|id| id as i64).collect()))
            }
        })
        .collect();
    assert_eq!(seen.len(), expected.len());
    for (got, want) in seen.iter().zip(&expected) {
        assert_eq!(got, want);
    }
}

/// Reads one epoch of batches of 7 from producer "order"; an
/// `InvalidBatch` is recorded and reading goes on.
fn read_epoch(dir: std::path::PathBuf) -> Vec<Seen> {
    let mut never = || false;
    let mut consumer = connect_in_batches("order", &dir, CONSUMER_BS);
    let mut seen = Vec::new();
    loop {
        match consumer.next_event(&mut never) {
            Ok(Event::Batch(b)) => seen.push(Ok((b.index, ids(&b)))),
            Ok(Event::EpochEnd { .. }) => return seen,
            Ok(_) => {}
            Err(Error::InvalidBatch(why)) => {
                assert_says(&why, "per-sample shape");
                seen.push(Err("invalid".into()));
            }
            Err(e) => panic!("unexpected error after {} batches: {e}", seen.len()),
        }
    }
}
