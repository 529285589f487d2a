//! The serve loop against a real producer and consumer (threads of this
//! process): every sample of an epoch arrives once, an epoch count ends the
//! run, and with no count the run ends when the last consumer has gone for
//! the idle timeout, as the core's `ServeUntil` says.

use std::time::Duration;

use batchcast::{Consumer, ConsumerOptions, Event, IdlePolicy, Producer, ProducerOptions};
use batchcast_serve::{expected_byte, serve, shutdown_reason, ServeSummary, Synthetic};

const SAMPLES: u64 = 50;
const BATCH: u64 = 8;
const BYTES: usize = 16;

fn producer(dir: &std::path::Path, name: &str, idle: Option<Duration>) -> Producer {
    Producer::create(
        name,
        ProducerOptions {
            samples_per_epoch: Some(SAMPLES),
            batch_size: Some(BATCH),
            idle: IdlePolicy::Wait(idle),
            dir: Some(dir.to_owned()),
            ..ProducerOptions::default()
        },
    )
    .unwrap()
}

/// Reads `epochs` epochs, checking every byte; returns the ids seen per
/// epoch. Leaves (drops its consumer) afterwards.
fn read(dir: std::path::PathBuf, name: &str, epochs: u64) -> Vec<Vec<i64>> {
    let opts = ConsumerOptions {
        connect_timeout: Some(Duration::from_secs(60)),
        dir: Some(dir),
        ..Default::default()
    };
    let mut consumer = Consumer::connect(name, opts, &mut || false).unwrap();
    let mut seen = vec![Vec::new()];
    while (seen.len() as u64) <= epochs {
        match consumer.next_event(&mut || false).unwrap() {
            Event::Batch(b) => {
                let payload = b.leaves()[0].bytes().to_vec();
                let ids = b.leaves()[1].bytes().to_vec();
                for (row, id) in ids.chunks_exact(8).enumerate() {
                    let id = i64::from_le_bytes(id.try_into().unwrap());
                    for k in 0..BYTES {
                        assert_eq!(payload[row * BYTES + k], expected_byte(id as u64, k));
                    }
                    seen.last_mut().unwrap().push(id);
                }
            }
            Event::EpochEnd { .. } => seen.push(Vec::new()),
            Event::Finished(_) => break,
            Event::EpochStart(_) | Event::Trigger(_) => {}
        }
    }
    seen.pop();
    seen
}

fn run(producer: &mut Producer, epochs: u64) -> batchcast_serve::Result<ServeSummary> {
    let mut source = Synthetic::new(SAMPLES, BATCH, BYTES, 0.0, 2, Some(1.0));
    let mut never = || false;
    serve(
        producer,
        &mut source,
        epochs,
        None,
        &mut never,
        &mut |_, _, _| {},
        &mut |_| {},
    )
}

#[test]
fn a_count_of_epochs_publishes_every_sample_once_per_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = producer(dir.path(), "counted", None);
    let path = dir.path().to_owned();
    let reader = std::thread::spawn(move || read(path, "counted", 2));
    let result = run(&mut p, 2);
    p.finish(shutdown_reason(&result));
    let summary = result.unwrap();
    assert_eq!(
        (summary.epochs, summary.batches, summary.samples),
        (2, 14, 100)
    );
    assert!(!summary.idle && !summary.interrupted);
    for epoch in reader.join().unwrap() {
        assert_eq!(epoch, (0..SAMPLES as i64).collect::<Vec<_>>());
    }
}

#[test]
fn with_no_count_the_run_ends_once_the_last_consumer_has_gone_for_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = producer(dir.path(), "idle", Some(Duration::from_millis(300)));
    let path = dir.path().to_owned();
    let reader = std::thread::spawn(move || read(path, "idle", 1));
    let summary = run(&mut p, 0).unwrap();
    assert!(summary.idle, "{summary:?}");
    assert!(summary.epochs >= 1 && summary.batches >= 7, "{summary:?}");
    assert_eq!(reader.join().unwrap().len(), 1);
}

#[test]
fn with_no_count_and_no_consumer_ever_the_idle_timeout_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = producer(dir.path(), "nobody", Some(Duration::from_millis(200)));
    let err = run(&mut p, 0).unwrap_err();
    assert!(
        matches!(err.core(), Some(batchcast::Error::NoConsumers { .. })),
        "{err}"
    );
}

#[test]
fn an_interrupt_stops_the_run_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = producer(dir.path(), "stopped", None);
    let mut source = Synthetic::new(SAMPLES, BATCH, BYTES, 0.0, 1, Some(1.0));
    let mut stop = || true;
    let summary = serve(
        &mut p,
        &mut source,
        1,
        None,
        &mut stop,
        &mut |_, _, _| {},
        &mut |_| {},
    )
    .unwrap();
    assert!(summary.interrupted);
    assert_eq!(summary.batches, 0);
}
