//! `batchcast consume`: attach to a producer and read (and check) its
//! batches. A smoke test for users, and the real consumer process that the
//! multi-process tests spawn, kill and watch.
//!
//! Prints one JSON line per event on stdout: `connected`, `epoch_start`,
//! `batch` (with `--each`), `epoch_end` (with the ids seen and whether every
//! payload byte matched), then `finished`, or `error` with its kind.

use std::time::Duration;

use anyhow::Result;
use batchcast::{Batch, Consumer, ConsumerOptions, DType, Event, JoinPolicy, Node, OnEvict};
use serde_json::json;

use crate::out::outln;
use batchcast_serve::expected_byte;

/// Arguments of `batchcast consume`.
#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    /// The producer's name.
    pub name: String,
    /// Rows per batch (default: the producer's).
    #[arg(long)]
    pub batch_size: Option<u64>,
    /// Join policy: catch-up, next-epoch or now.
    #[arg(long, default_value = "catch-up")]
    pub join: String,
    /// Drop each epoch's last, smaller batch.
    #[arg(long)]
    pub drop_last: bool,
    /// If the producer evicts this consumer for falling behind: "error"
    /// (exit with `fell_behind`) or "rejoin" (at the next epoch).
    #[arg(long, default_value = "error")]
    pub on_evict: String,
    /// Stop after this many epochs (default: until the producer finishes).
    #[arg(long)]
    pub epochs: Option<u64>,
    /// Wait this many seconds for the producer to appear.
    #[arg(long, default_value_t = 0.0)]
    pub connect_timeout: f64,
    /// Milliseconds of emulated work per batch (a slow trainer).
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Check every payload byte against the synthetic source's pattern.
    #[arg(long)]
    pub verify: bool,
    /// Print a line per batch.
    #[arg(long)]
    pub each: bool,
    /// With --each, add a hash of the batch's bytes to its line (to compare
    /// what two runs delivered).
    #[arg(long, requires = "each")]
    pub hash: bool,
    /// Seconds to wait for a producer that resumes its stream (`serve`
    /// keeps a state file) to be restarted after it died; 0: fail at once.
    #[arg(long, default_value_t = batchcast::DEFAULT_RECONNECT_TIMEOUT.as_secs_f64())]
    pub reconnect_timeout: f64,
}

/// What one epoch brought.
#[derive(Default)]
struct EpochTally {
    batches: u64,
    samples: u64,
    first_id: Option<i64>,
    last_id: Option<i64>,
    contiguous: bool,
    payload_ok: bool,
    zero_copy: u64,
    sizes_ok: bool,
}

/// Runs `batchcast consume`; the exit code says how it ended.
pub fn run(args: ConsumeArgs) -> Result<i32> {
    let mut never = || false;
    let mut consumer = match Consumer::connect(&args.name, options(&args)?, &mut never) {
        Ok(c) => c,
        Err(e) => return report_error(&e),
    };
    outln!(
        "{}",
        json!({"event": "connected", "pid": std::process::id(),
               "batches_per_epoch": consumer.batches_per_epoch(),
               "producer_pid": consumer.welcome().producer_pid})
    )?;
    let mut epochs_done = 0;
    let mut tally = EpochTally::default();
    let mut expected: Option<u64> = None;
    let mut batch_size = 0;
    loop {
        let event = match consumer.next_event(&mut never) {
            Ok(e) => e,
            Err(e) => return report_error(&e),
        };
        match event {
            Event::EpochStart(info) => {
                outln!(
                    "{}",
                    json!({"event": "epoch_start", "epoch": info.epoch, "batches": info.batches,
                           "samples": info.samples, "partial": info.partial,
                           "batch_size": info.batch_size})
                )?;
                expected = info.batches;
                batch_size = info.batch_size;
                tally = EpochTally {
                    contiguous: true,
                    payload_ok: true,
                    sizes_ok: true,
                    ..Default::default()
                };
            }
            Event::Batch(batch) => on_batch(&args, &batch, &mut tally, batch_size)?,
            Event::EpochEnd { epoch, samples } => {
                outln!(
                    "{}",
                    json!({"event": "epoch_end", "epoch": epoch, "batches": tally.batches,
                           "expected_batches": expected, "samples": tally.samples,
                           "producer_samples": samples, "first_id": tally.first_id,
                           "last_id": tally.last_id, "contiguous": tally.contiguous,
                           "payload_ok": tally.payload_ok, "sizes_ok": tally.sizes_ok,
                           "zero_copy_batches": tally.zero_copy})
                )?;
                epochs_done += 1;
                if args.epochs.is_some_and(|e| epochs_done >= e) {
                    return finished(&consumer, "epochs");
                }
            }
            Event::Trigger(t) => {
                outln!(
                    "{}",
                    json!({"event": "trigger", "id": t.id, "seq": t.seq, "epoch": t.epoch,
                           "samples": t.samples, "arrivals": t.arrivals})
                )?;
            }
            Event::Finished(reason) => return finished(&consumer, &format!("{reason:?}")),
        }
    }
}

/// The options `args` ask for.
fn options(args: &ConsumeArgs) -> Result<ConsumerOptions> {
    Ok(ConsumerOptions {
        batch_size: args.batch_size,
        drop_last: args.drop_last,
        join: JoinPolicy::parse(&args.join)?,
        on_evict: OnEvict::parse(&args.on_evict)?,
        connect_timeout: Some(Duration::from_secs_f64(args.connect_timeout)),
        reconnect_timeout: Duration::try_from_secs_f64(args.reconnect_timeout).map_err(|_| {
            anyhow::anyhow!(
                "--reconnect-timeout must be a non-negative number of seconds, not {}",
                args.reconnect_timeout
            )
        })?,
        label: format!("batchcast consume {}", std::process::id()),
        ..Default::default()
    })
}

/// Counts and checks a batch of an epoch of `batch_size` batches, prints
/// it with `--each`, then spends `--delay-ms` on it.
fn on_batch(
    args: &ConsumeArgs,
    batch: &Batch,
    tally: &mut EpochTally,
    batch_size: u64,
) -> Result<()> {
    let rows = batch.rows();
    // Every batch but the epoch's last has exactly batch_size rows.
    if tally.samples != tally.batches * batch_size {
        tally.sizes_ok = false;
    }
    let (first, _) = check_batch(batch, tally, args.verify);
    tally.batches += 1;
    tally.samples += rows;
    if args.each {
        let mut line = json!({"event": "batch", "epoch": batch.epoch,
            "index": batch.index, "rows": rows, "first_id": first});
        if args.hash {
            line["hash"] = format!("{:016x}", hash_of(batch)).into();
        }
        outln!("{line}")?;
    }
    if args.delay_ms > 0.0 {
        // Emulated training step: this is the workload, not a wait.
        std::thread::sleep(Duration::from_secs_f64(args.delay_ms / 1000.0));
    }
    Ok(())
}

/// Prints the `finished` line, with why and the consumer's totals.
fn finished(consumer: &Consumer, reason: &str) -> Result<i32> {
    let s = consumer.stats();
    outln!(
        "{}",
        json!({"event": "finished", "reason": reason, "batches": s.batches,
               "wait_secs": s.wait_secs})
    )?;
    Ok(0)
}

/// A hash of every leaf's shape and bytes.
fn hash_of(batch: &Batch) -> u64 {
    use std::hash::{Hash, Hasher};
    // Keyed the same in every process: two runs' hashes compare.
    let mut h = std::hash::DefaultHasher::new();
    for leaf in batch.leaves() {
        leaf.shape().hash(&mut h);
        leaf.bytes().hash(&mut h);
    }
    h.finish()
}

/// Checks ids (and payloads with `verify`); returns the first and last id.
fn check_batch(batch: &Batch, tally: &mut EpochTally, verify: bool) -> (Option<i64>, Option<i64>) {
    let leaves = batch.leaves();
    let ids_leaf = match (batch.tree(), leaves) {
        (Node::Tuple(items), [_, ids]) if items.len() == 2 && ids.dtype() == DType::I64 => ids,
        _ => {
            tally.payload_ok = false;
            return (None, None);
        }
    };
    if leaves.iter().all(|l| l.is_zero_copy()) {
        tally.zero_copy += 1;
    }
    let ids: Vec<i64> = ids_leaf
        .bytes()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    for &id in &ids {
        if let Some(last) = tally.last_id {
            if id != last + 1 {
                tally.contiguous = false;
            }
        }
        tally.first_id.get_or_insert(id);
        tally.last_id = Some(id);
    }
    if verify {
        let payload = &leaves[0];
        let sb = payload.shape().get(1).copied().unwrap_or(0) as usize;
        if sb > 0 {
            for (row, &id) in payload.bytes().chunks_exact(sb).zip(&ids) {
                if row
                    .iter()
                    .enumerate()
                    .any(|(k, &b)| b != expected_byte(id as u64, k))
                {
                    tally.payload_ok = false;
                }
            }
        }
    }
    (ids.first().copied(), ids.last().copied())
}

fn report_error(e: &batchcast::Error) -> Result<i32> {
    let (kind, code) = match e {
        batchcast::Error::ProducerGone { .. } => ("producer_gone", 3),
        batchcast::Error::ProducerStopped { .. } => ("producer_stopped", 1),
        batchcast::Error::ProducerNotFound { .. } => ("not_found", 2),
        batchcast::Error::JoinRefused { .. } => ("refused", 4),
        batchcast::Error::PermissionDenied { .. } | batchcast::Error::ForeignPeer { .. } => {
            ("permission_denied", 5)
        }
        batchcast::Error::FellBehind { .. } => ("fell_behind", 5),
        _ => ("other", 1),
    };
    outln!(
        "{}",
        json!({"event": "error", "kind": kind, "message": e.to_string()})
    )?;
    eprintln!("error: {e}");
    Ok(code)
}
