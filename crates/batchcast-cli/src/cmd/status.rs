//! `batchcast status`: live figures of running producers.

use std::time::Duration;

use crate::out::outln;
use anyhow::Result;
use batchcast::{default_dir, list_names, Endpoint, Error, StatusReport};

/// Arguments of `batchcast status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only this producer.
    pub name: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `batchcast status`.
pub fn run(args: StatusArgs) -> Result<()> {
    let dir = default_dir();
    let names = match &args.name {
        Some(n) => vec![n.clone()],
        None => list_names(&dir),
    };
    let mut reports = Vec::new();
    for name in &names {
        let ep = Endpoint::new(name)?;
        // A name whose producer was killed answers ProducerNotFound, and
        // the query has removed the files it left.
        match batchcast::query_status(&ep, Duration::from_secs(2)) {
            Ok(r) => reports.push(r),
            Err(Error::ProducerNotFound { .. } | Error::ProducerGone { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if args.name.is_some() && reports.is_empty() {
        let ep = Endpoint::new(&names[0])?;
        return Err(Error::ProducerNotFound {
            name: names[0].clone(),
            socket: ep.socket_path(),
            waited_secs: None,
        }
        .into());
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&reports)?)?;
        return Ok(());
    }
    if reports.is_empty() {
        outln!("no producer is running (looked in {})", dir.display())?;
    }
    for r in &reports {
        print_report(r)?;
    }
    Ok(())
}

fn print_report(r: &StatusReport) -> Result<()> {
    print_producer(r)?;
    print_consumers(r)
}

/// The producer's lines: its progress, lag budget and stream.
fn print_producer(r: &StatusReport) -> Result<()> {
    outln!(
        "{} (pid {}): epoch {}, {} batches published, {:.1} batches/s, window {} x {:.1} MiB, \
         blocked {:.1} s, up {:.0} s",
        r.name,
        r.pid,
        r.epoch,
        r.published,
        r.batches_per_sec,
        r.slots,
        r.slot_size as f64 / (1 << 20) as f64,
        r.blocked_secs,
        r.uptime_secs
    )?;
    outln!(
        "  lag budget {} batches ({:.1} MiB, {} in use), past it: {}; {} eviction(s)",
        r.lag_slots,
        (r.lag_slots * r.slot_size) as f64 / (1 << 20) as f64,
        r.lag_slots_used,
        r.lag_policy,
        r.evictions
    )?;
    let opt = |v: Option<u64>| v.map_or("unknown".to_string(), |n| n.to_string());
    outln!(
        "  stream: {}; batch size {}, {} samples per epoch",
        r.stream
            .first_batch
            .as_ref()
            .map_or("not yet described (no batch planned)".to_string(), |b| b
                .describe()),
        opt(r.batch_size),
        opt(r.samples_per_epoch)
    )?;
    if !r.stream.metadata.is_empty() {
        outln!("  metadata: {}", r.stream.metadata)?;
    }
    Ok(())
}

/// A table of the consumers attached (or a line saying there are none).
fn print_consumers(r: &StatusReport) -> Result<()> {
    if r.consumers.is_empty() {
        outln!("  no consumers")?;
        return Ok(());
    }
    outln!(
        "  {:>4} {:>8} {:>10} {:>10} {:>9} {:>8} {:>4} {:>13} {:>7} {:>10} {:>9}  label",
        "id",
        "pid",
        "state",
        "join",
        "batch",
        "position",
        "lag",
        "behind/budget",
        "evicted",
        "delivered",
        "wait s"
    )?;
    for c in &r.consumers {
        outln!(
            "  {:>4} {:>8} {:>10} {:>10} {:>9} {:>8} {:>4} {:>13} {:>7} {:>10} {:>9.2}  {}",
            c.id,
            // 0: a consumer in another pid namespace.
            if c.pid == 0 {
                "?".to_string()
            } else {
                c.pid.to_string()
            },
            c.state,
            c.join,
            c.batch_size
                .map_or("producer".to_string(), |b| b.to_string()),
            c.position.map_or("-".to_string(), |p| p.to_string()),
            c.lag,
            format!("{}/{}", c.behind, r.lag_slots.max(1)),
            c.evictions,
            c.delivered,
            c.wait_secs,
            c.label
        )?;
    }
    if r.omitted_consumers > 0 {
        outln!("  ... and {} more consumers", r.omitted_consumers)?;
    }
    Ok(())
}
