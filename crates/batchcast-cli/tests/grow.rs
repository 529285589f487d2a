//! `batchcast serve --watch --trigger`: a dataset that grows while it is
//! served. The producer is a real process; three consumers (threads here)
//! read its shared batches. 500 images are added during epoch 1, once
//! every consumer holds that epoch's first batch (so the producer, a window
//! ahead at most, is mid-epoch): epoch 1 still has the 1,000 it began with,
//! epoch 2 has 1,500, and `amount=400` fires exactly once, between them,
//! for every consumer at the same place.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Barrier;

use batchcast::Event;
use common::{assert_says, jpeg_dataset, per_label, read_to_end, Env, Fail, Proc, Seen};

/// Side of the stored images (`--decode-only --store-size`).
const SIDE: usize = 8;

/// Reads the producer to its end, checking each batch's image bytes (and
/// holding epoch 1's first batch while the test adds files); returns what
/// it saw and `batches_per_epoch()` at each epoch's end.
fn consume(dir: PathBuf, barrier: &Barrier) -> (Seen, Vec<Option<u64>>) {
    let mut lens = Vec::new();
    let seen = read_to_end("grow", dir, |consumer, event, seen| match event {
        Event::Batch(b) => {
            assert_eq!(
                b.leaves()[0].bytes().len(),
                b.rows() as usize * SIDE * SIDE * 3
            );
            if b.epoch == 1 && seen.labels.last().is_some_and(Vec::is_empty) {
                // Every consumer holds epoch 1's first batch; the test
                // adds the files, then lets them go on.
                barrier.wait();
                barrier.wait();
            }
        }
        Event::EpochEnd { .. } => lens.push(consumer.batches_per_epoch()),
        _ => {}
    });
    (seen, lens)
}

/// Moves 500 images in: a new class folder `aaa_new` of 100 (it sorts
/// first, and must get label 10) with one rename, and 100 new files in
/// each of classes 0 to 3.
fn add_images(stage: &Path, root: &Path) {
    std::fs::rename(stage.join("class_000"), root.join("aaa_new")).unwrap();
    for c in 1..5 {
        let from = stage.join(format!("class_{c:03}"));
        let to = root.join(format!("class_{:03}", c - 1));
        for f in std::fs::read_dir(&from).unwrap() {
            let f = f.unwrap();
            let name = format!("new_{}", f.file_name().to_string_lossy());
            std::fs::rename(f.path(), to.join(name)).unwrap();
        }
    }
}

/// Serves a dataset of 1,000 to three consumers for 4 epochs, adding 500
/// images during epoch 1; returns what the first consumer saw and its
/// lengths of epochs (the others saw the same), and the producer, finished.
fn run_growing(select: &str) -> (Seen, Vec<Option<u64>>, Proc) {
    let env = Env::new();
    let root = jpeg_dataset(&env.path().join("data"), 10, 100, (24, 32));
    let stage = jpeg_dataset(&env.path().join("stage"), 5, 100, (24, 32));
    let options = format!(
        "--watch --trigger amount=400 --decode-only --store-size {SIDE} --window 4 \
         --batch-size 64 --consumers 3 --epochs 4 --workers 2 --json {select}"
    );
    let mut args = vec!["serve", "--name", "grow", "--data", root.to_str().unwrap()];
    args.extend(options.split_whitespace());
    let (mut producer, listening) = env.listening(&args);
    assert_eq!(listening["samples_per_epoch"], 1000, "{listening}");
    assert_eq!(listening["trigger"], "amount=400", "{listening}");
    let barrier = Barrier::new(4);
    let seen: Vec<_> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|_| s.spawn(|| consume(env.path().to_owned(), &barrier)))
            .collect();
        barrier.wait();
        add_images(&stage, &root);
        barrier.wait();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert!(producer.finish().success(), "{}", producer.stderr_text());
    assert!(seen[1..].iter().all(|s| *s == seen[0]), "consumers differ");
    let (first, lens) = seen.into_iter().next().unwrap();
    (first, lens, producer)
}

#[test]
fn serve_watch_admits_new_files_at_the_next_epoch_and_triggers_once_for_all() {
    let (first, lens, producer) = run_growing("");
    assert_eq!(
        first.events,
        [
            "start 0 Some(1000)",
            "end 0 1000",
            "start 1 Some(1000)",
            "trigger amount=400 #1 epoch 2 samples 500",
            "end 1 1000",
            "start 2 Some(1500)",
            "end 2 1500",
            "start 3 Some(1500)",
            "end 3 1500",
        ]
    );
    // The new files' arrival times: their mtimes.
    assert!(
        matches!(first.arrivals[..], [Some((a, b))] if a > 1.0e9 && a <= b),
        "{:?}",
        first.arrivals
    );
    // Nothing new mid-epoch: epochs 0 and 1 are the first 1,000 images.
    let old = [vec![100; 10], vec![0]].concat();
    assert_eq!(per_label(&first.labels[0], 11), old);
    assert_eq!(per_label(&first.labels[1], 11), old);
    // From epoch 2 on: 100 more in classes 0 to 3, and the new class's
    // 100 under the next label, 10 (the old labels did not move).
    let grown = vec![200, 200, 200, 200, 100, 100, 100, 100, 100, 100, 100];
    assert_eq!(per_label(&first.labels[2], 11), grown);
    assert_eq!(per_label(&first.labels[3], 11), grown);
    // By epoch 1's end each consumer knew epoch 2's length.
    assert_eq!(lens, [Some(16), Some(24), Some(24), Some(24)]);

    let grew = producer.events("grew");
    assert_eq!(grew.len(), 1, "{grew:?}");
    assert_eq!(grew[0]["epoch"], 2);
    assert_eq!(grew[0]["added"], 500);
    assert_eq!(grew[0]["samples_per_epoch"], 1500);
    let triggers = producer.events("trigger");
    assert_eq!(triggers.len(), 1, "{triggers:?}");
    assert_eq!(triggers[0]["seq"], 1);
    assert_eq!(triggers[0]["samples"], 500);
    let finished = producer.events("finished").pop().unwrap();
    assert_eq!(
        finished["summary"]["decoded_per_epoch"],
        serde_json::json!([1000, 1000, 1500, 1500])
    );
}

/// `new-data` serves only the 500 that arrived since the trigger;
/// `freshness:50` all 500 of them and 500 of the 1,000 seen before.
#[test]
fn serve_selects_new_data_and_freshness_from_the_trigger_on() {
    let (new, _, producer) = run_growing("--select new-data");
    assert_eq!(
        producer.events("finished")[0]["summary"]["decoded_per_epoch"],
        serde_json::json!([1000, 1000, 500, 500])
    );
    let only_new = vec![100, 100, 100, 100, 0, 0, 0, 0, 0, 0, 100];
    assert_eq!(per_label(&new.labels[2], 11), only_new);
    assert_eq!(per_label(&new.labels[3], 11), only_new);
    assert!(
        new.events.contains(&"start 2 Some(500)".to_string()),
        "{:?}",
        new.events
    );

    let (fresh, _, _) = run_growing("--select freshness:50");
    assert!(
        fresh.events.contains(&"start 2 Some(1000)".to_string()),
        "{:?}",
        fresh.events
    );
    for epoch in [2, 3] {
        let per = per_label(&fresh.labels[epoch], 11);
        // Every new sample (the new class's 100 among them), and 500 old
        // ones: of the classes without new samples, only old ones.
        assert_eq!(per[10], 100, "{per:?}");
        assert_eq!(per.iter().sum::<usize>(), 1000);
        assert!(per[..4].iter().all(|&n| n >= 100), "{per:?}");
    }
    assert_ne!(fresh.labels[2], fresh.labels[3]);
}

#[test]
fn serve_refuses_a_malformed_trigger_and_watch_without_a_folder() {
    let env = Env::new();
    let err = env
        .cmd("serve --name t --synthetic --trigger amount=lots")
        .fail_with(2);
    assert_says(&err, "\"amount=lots\"");
    assert_says(&err, "every-epoch");
    let err = env.cmd("serve --name t --synthetic --watch").fail();
    assert_says(&err, "--watch applies to an image dataset");
}

/// `batchcast-arrivals.csv` in the watched folder gives the files it
/// names their arrival time: the `grew` and `trigger` lines (and the
/// consumers' trigger) carry the sidecar's times, not the files' mtimes.
/// A sidecar with a bad line is refused with the line.
#[test]
fn serve_watch_takes_arrival_times_from_the_sidecar() {
    let env = Env::new();
    let root = jpeg_dataset(&env.path().join("data"), 3, 7, (24, 32));
    let stage = jpeg_dataset(&env.path().join("stage"), 1, 4, (24, 32));
    let data = root.to_str().unwrap();
    let mut args = common::serve_data("side", data, "1");
    args.extend(["--watch", "--trigger", "every-epoch", "--epochs", "3"]);
    args.extend(["--window", "2", "--max-lag", "1batches", "--workers", "1"]);
    let (mut producer, _) = env.listening(&args);
    let mut consumer = env.spawn("consume side --each --delay-ms 40 --connect-timeout 60");
    consumer.expect("batch");
    // Rows for the new files first, then the files (renamed in).
    let sidecar = root.join("batchcast-arrivals.csv");
    let mut rows = String::from("path,timestamp\n");
    let mut files: Vec<_> = std::fs::read_dir(stage.join("class_000"))
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    files.sort();
    for (i, f) in files.iter().enumerate() {
        let name = f.file_name().unwrap().to_string_lossy();
        rows.push_str(&format!("class_001/new_{name},{}\n", 1000 + 500 * i));
    }
    std::fs::write(&sidecar, rows).unwrap();
    for f in &files {
        let name = format!("new_{}", f.file_name().unwrap().to_string_lossy());
        std::fs::rename(f, root.join("class_001").join(name)).unwrap();
    }
    assert!(consumer.finish().success(), "{}", consumer.stderr_text());
    assert!(producer.finish().success(), "{}", producer.stderr_text());
    let grew = producer.events("grew");
    assert_eq!(grew.len(), 1, "{grew:?}");
    assert_eq!(grew[0]["added"], 4);
    assert_eq!(grew[0]["arrivals"], serde_json::json!([1000.0, 2500.0]));
    let fired = consumer.events("trigger");
    let with_new: Vec<_> = fired.iter().filter(|t| t["samples"] == 4).collect();
    assert_eq!(with_new.len(), 1, "{fired:?}");
    assert_eq!(with_new[0]["arrivals"], serde_json::json!([1000.0, 2500.0]));

    std::fs::write(&sidecar, "path,timestamp\nclass_000/x.jpg,yesterday\n").unwrap();
    let mut args = common::serve_data("bad", data, "1");
    args.push("--watch");
    let err = env.cmd(&args).fail();
    assert_says(&err, "batchcast-arrivals.csv:2: ");
    assert_says(&err, "not seconds");
}
