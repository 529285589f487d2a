//! Soak: many epochs, consumer batch sizes far below, equal to and far
//! above the producer's (1000 rows needs more producer batches than the
//! window holds), all at once. Every epoch must stay exact and the
//! producer's memory flat.

mod common;

use common::{assert_full_epoch, Env};

const EPOCHS: u64 = 50;
const SAMPLES: i64 = 2000;

/// Resident memory of a live process, in KiB (`VmRSS` in /proc).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("producer {pid} has exited: no memory to read"))
}

fn soak(producer_batch: &str) {
    let env = Env::new();
    let name = format!("soak-{producer_batch}");
    let epochs = EPOCHS.to_string();
    let samples = SAMPLES.to_string();
    let mut producer = env.producer(
        &name,
        &[
            "--samples",
            &samples,
            "--sample-bytes",
            "256",
            "--batch-size",
            producer_batch,
            "--epochs",
            &epochs,
            "--window",
            "8",
            // A small lag budget keeps the producer within a few batches of
            // the slowest consumer, so that it is alive to be measured.
            "--max-lag",
            "8batches",
            "--consumers",
            "4",
        ],
    );
    let mut consumers: Vec<_> = ["7", "64", "100", "1000"]
        .iter()
        .map(|bs| env.spawn(&["consume", &name, "--verify", "--batch-size", bs]))
        .collect();
    // The producer's memory once the run is warm, and near its end: the
    // slowest consumer's epoch ends are the clock (each is a line it
    // prints, so nothing here sleeps).
    consumers[0].expect_where("epoch_end", |v| v["epoch"] == 4);
    let warm = rss_kib(producer.pid());
    consumers[0].expect_where("epoch_end", |v| v["epoch"] == EPOCHS - 10);
    let late = rss_kib(producer.pid());
    for c in &mut consumers {
        assert!(c.finish().success(), "{}", c.stderr_text());
        let ends = c.events("epoch_end");
        assert_eq!(ends.len() as u64, EPOCHS);
        for (e, end) in ends.iter().enumerate() {
            assert_eq!(end["epoch"], e as u64);
            assert_full_epoch(end, 0, SAMPLES - 1);
        }
    }
    assert!(producer.finish().success());
    assert!(
        late <= warm + 4096,
        "producer memory grew from {warm} KiB to {late} KiB over {EPOCHS} epochs"
    );
}

#[test]
fn soak_50_epochs_mixed_batch_sizes_against_producer_batch_64() {
    soak("64");
}

#[test]
fn soak_50_epochs_mixed_batch_sizes_against_producer_batch_256() {
    soak("256");
}
