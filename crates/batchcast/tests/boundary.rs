//! `Producer::announce_boundary`: a trigger announced after an epoch's last
//! batch reaches every consumer after that epoch's last batch and before
//! its end, at any consumer batch size (the epoch's cut tail included),
//! and the announced size is the next epoch's `len()`.

use std::time::{Duration, Instant};

mod common;

use common::{assert_says, connect_in_batches, producer_options, publish_ids, CONNECT};

use batchcast::{Boundary, Event, Producer, ShutdownReason, TriggerFired};

const PRODUCER_BS: u64 = 16;

fn trigger(seq: u64) -> TriggerFired {
    TriggerFired {
        id: "amount=40".into(),
        seq,
        epoch: 1,
        samples: 50,
        arrivals: Some((1.0e9, 1.1e9)),
    }
}

/// What a consumer saw, as short strings; and `batches_per_epoch()` when
/// each epoch ended.
fn read(dir: std::path::PathBuf, bs: u64) -> (Vec<String>, Vec<Option<u64>>) {
    let mut never = || false;
    let mut consumer = connect_in_batches("bound", &dir, bs);
    let mut seen = Vec::new();
    let mut lens = Vec::new();
    loop {
        match consumer.next_event(&mut never).unwrap() {
            Event::EpochStart(i) => seen.push(format!("start {} {:?}", i.epoch, i.samples)),
            Event::Batch(b) => seen.push(format!("batch {}", b.rows())),
            Event::EpochEnd { epoch, samples } => {
                seen.push(format!("end {epoch} {samples}"));
                lens.push(consumer.batches_per_epoch());
            }
            Event::Trigger(t) => seen.push(format!("trigger {} {} {}", t.id, t.seq, t.samples)),
            Event::Finished(_) => return (seen, lens),
        }
    }
}

#[test]
fn a_trigger_comes_after_the_epochs_last_batch_and_before_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let options = producer_options(dir.path(), 4, 100, PRODUCER_BS);
    let mut producer = Producer::create("bound", options).unwrap();
    // Three readers at batch sizes that cut the producer's batches
    // differently, each from its own thread.
    let readers: Vec<_> = [16u64, 6, 64]
        .into_iter()
        .map(|bs| {
            let d = dir.path().to_owned();
            std::thread::spawn(move || read(d, bs))
        })
        .collect();
    assert!(producer.wait_for_consumers(3, Some(CONNECT)));
    // A reader that fails stops the producer's waits rather than hang.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut never = || Instant::now() > deadline;
    for (epoch, samples) in [(0u64, 100u64), (1, 150)] {
        producer.begin_epoch().unwrap();
        for first in (0..samples).step_by(PRODUCER_BS as usize) {
            let rows = PRODUCER_BS.min(samples - first);
            publish_ids(&mut producer, first, rows, &[], &mut never);
        }
        if epoch == 0 {
            producer
                .announce_boundary(&Boundary {
                    next_samples: Some(150),
                    trigger: Some(trigger(1)),
                })
                .unwrap();
        }
        producer.end_epoch().unwrap();
    }
    assert_eq!(producer.status().samples_per_epoch, Some(150));
    let long = Boundary {
        next_samples: None,
        trigger: Some(TriggerFired {
            id: "x".repeat(300),
            ..trigger(2)
        }),
    };
    let err = producer.announce_boundary(&long).unwrap_err().to_string();
    assert_says(&err, "300 bytes");
    producer.finish(ShutdownReason::Finished);
    for (reader, bs) in readers.into_iter().zip([16u64, 6, 64]) {
        let (seen, lens) = reader.join().unwrap();
        let end0 = seen.iter().position(|s| s == "end 0 100").unwrap();
        assert_eq!(
            seen[end0 - 1],
            "trigger amount=40 1 50",
            "bs {bs}: {seen:?}"
        );
        assert_eq!(seen[end0 + 1], "start 1 Some(150)", "bs {bs}: {seen:?}");
        assert_eq!(seen.iter().filter(|s| s.starts_with("trigger")).count(), 1);
        // Every batch of epoch 0 came before the trigger and the end.
        let rows: usize = seen[..end0 - 1]
            .iter()
            .filter_map(|s| s.strip_prefix("batch "))
            .map(|n| n.parse::<usize>().unwrap())
            .sum();
        assert_eq!(rows, 100, "bs {bs}");
        assert!(seen.contains(&"end 1 150".to_string()), "{seen:?}");
        // By epoch 0's end, the next epoch's size is known.
        assert_eq!(lens[0], Some(150u64.div_ceil(bs)), "bs {bs}");
    }
}
