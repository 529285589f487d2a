//! What the core's integration tests share: a producer and consumers in
//! one temporary directory, and batches whose first leaf holds each row's
//! id.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use batchcast::{
    Batch, Consumer, ConsumerOptions, DType, Error, LeafSpec, Node, Producer, ProducerOptions,
};

/// How long a test waits for its peer to connect before failing.
pub const CONNECT: Duration = Duration::from_secs(60);

/// Options of a producer in `dir`: `window` batches ahead, epochs of
/// `samples` rows in batches of `batch_size`. Change the rest with
/// `ProducerOptions { .., ..producer_options(..) }`.
pub fn producer_options(
    dir: &Path,
    window: usize,
    samples: u64,
    batch_size: u64,
) -> ProducerOptions {
    ProducerOptions {
        window,
        samples_per_epoch: Some(samples),
        batch_size: Some(batch_size),
        dir: Some(dir.to_owned()),
        ..Default::default()
    }
}

/// Options of a consumer in `dir` that waits [`CONNECT`] for its producer.
pub fn consumer_options(dir: &Path) -> ConsumerOptions {
    ConsumerOptions {
        connect_timeout: Some(CONNECT),
        dir: Some(dir.to_owned()),
        ..Default::default()
    }
}

/// Connects to producer `name` with `options`.
pub fn connect(name: &str, options: ConsumerOptions) -> Consumer {
    Consumer::connect(name, options, &mut || false).unwrap()
}

/// Connects to producer `name` in `dir` for batches of `batch_size` rows.
pub fn connect_in_batches(name: &str, dir: &Path, batch_size: u64) -> Consumer {
    let options = ConsumerOptions {
        batch_size: Some(batch_size),
        ..consumer_options(dir)
    };
    connect(name, options)
}

/// Publishes batch `seq` (one row holding `seq`); false when the producer
/// blocked (the hook is called only while it waits).
pub fn publish(producer: &mut Producer, seq: u64, stop_when_blocked: bool) -> bool {
    let tree = Node::Tuple(vec![Node::Leaf(0)]);
    let leaves = [LeafSpec::array(DType::I64, vec![1])];
    let mut blocked = || stop_when_blocked;
    match producer.loan(tree, &leaves, &mut blocked) {
        Ok(mut slot) => {
            slot.leaf_mut(0)
                .copy_from_slice(&(seq as i64).to_le_bytes());
            slot.publish().unwrap();
            true
        }
        Err(Error::Interrupted) => false,
        Err(e) => panic!("batch {seq}: {e}"),
    }
}

/// Publishes rows `first..first + rows`: leaf 0 holds each row's id (an
/// `i64`), then one leaf for each of `more`, left as loaned.
pub fn publish_ids(
    producer: &mut Producer,
    first: u64,
    rows: u64,
    more: &[LeafSpec],
    blocked: &mut dyn FnMut() -> bool,
) {
    let tree = Node::Tuple((0..=more.len() as u32).map(Node::Leaf).collect());
    let mut leaves = vec![LeafSpec::array(DType::I64, vec![rows])];
    leaves.extend_from_slice(more);
    let mut slot = producer.loan(tree, &leaves, blocked).unwrap();
    for (k, chunk) in slot.leaf_mut(0).chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&((first + k as u64) as i64).to_le_bytes());
    }
    slot.publish().unwrap();
}

/// The ids in a batch's leaf 0, one `i64` a row.
pub fn ids(batch: &Batch) -> Vec<i64> {
    batch.leaves()[0]
        .bytes()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Fails, showing `needle` and the whole of `text`, unless `text` holds
/// `needle`.
#[track_caller]
pub fn assert_says(text: &str, needle: &str) {
    assert!(text.contains(needle), "{needle:?} is not in:\n{text}");
}
