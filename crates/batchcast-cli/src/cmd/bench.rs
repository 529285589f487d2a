//! `batchcast bench`: the transport's cost, measured.
//!
//! For each batch size and number of consumer processes, a producer in this
//! process publishes batches as fast as the window lets it, and each consumer
//! (a `batchcast bench-consumer` process) takes every batch, reads one byte
//! of it and releases it. Reported per cell: batches/s and GB/s delivered per
//! consumer (median over consumers), the per-batch overhead (the median
//! consumer's time per batch), and the producer's CPU time per batch; beside
//! them, a plain memcpy of the same bytes on this machine, which is what a
//! copying transport would pay per consumer per batch. Each cell runs
//! `--repeat` times, interleaved with the other mode, and the medians are
//! reported: the machine is shared and noisy. `--copy-on-write` maps the
//! consumers' arena private and writable, as Python consumers do by default
//! (each reused slot is then scanned for pages written in place).

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use batchcast::{
    Consumer, ConsumerOptions, DType, Event, LeafSpec, Node, Producer, ProducerOptions,
};
use serde::Serialize;
use serde_json::json;

use crate::out::outln;
use batchcast_proc::{cpu_secs, Options, Output, Process, Signal, Who};

/// Arguments of `batchcast bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Numbers of consumer processes.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub consumers: Vec<usize>,
    /// Batch sizes in MiB.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub sizes_mb: Vec<usize>,
    /// Batches per cell.
    #[arg(long, default_value_t = 300)]
    pub batches: u64,
    /// Slots in the window.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// Lag budget of the producer ("0": the window alone, as the transport
    /// has always been measured; e.g. "1GiB": the producer runs ahead of
    /// its consumers into lag slots, which measures the cost of retaining
    /// batches for a laggard).
    #[arg(long, default_value = "0")]
    pub max_lag: String,
    /// Add one more consumer and stop it (SIGSTOP) once attached: the
    /// others go on through lag slots (give --max-lag), which measures the
    /// cost of retaining batches for a stuck consumer. Past the budget it
    /// is evicted after 0.1 s.
    #[arg(long)]
    pub stopped: bool,
    /// Runs per cell; the medians are reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Print the figures as JSON.
    #[arg(long)]
    pub json: bool,
    /// Consumers map the arena copy-on-write (Python's default) instead of
    /// read-only.
    #[arg(long)]
    pub copy_on_write: bool,
    /// Also run each cell with a producer that keeps a state file (as
    /// `batchcast serve` does, so that a restart resumes the stream), and
    /// report its batches/s over the plain producer's.
    #[arg(long)]
    pub durable: bool,
}

/// One (size, consumers) cell.
#[derive(Debug, Serialize)]
pub struct Cell {
    /// Batch size in MiB.
    pub size_mb: usize,
    /// Consumer processes.
    pub consumers: usize,
    /// Batches per second per consumer (median consumer).
    pub batches_per_sec: f64,
    /// GB/s delivered per consumer (median consumer).
    pub gb_per_sec: f64,
    /// Microseconds per batch (median consumer).
    pub overhead_us: f64,
    /// Producer CPU microseconds per batch, transport only (nothing written).
    pub producer_cpu_us: f64,
    /// Producer CPU microseconds per batch when it also writes the whole
    /// batch into the slot (as a real producer does).
    pub producer_cpu_written_us: f64,
    /// memcpy of the same bytes: microseconds.
    pub memcpy_us: f64,
    /// memcpy GB/s.
    pub memcpy_gb_per_sec: f64,
    /// With `--durable`: batches/s with state writes over batches/s
    /// without (the transport alone, where their cost shows most).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_writes_ratio: Option<f64>,
}

/// Runs `batchcast bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    if args.consumers.contains(&0)
        || args.sizes_mb.contains(&0)
        || args.batches == 0
        || args.repeat == 0
    {
        bail!("--consumers, --sizes-mb, --batches and --repeat take numbers of at least 1");
    }
    let exe = std::env::current_exe().context("cannot find the batchcast executable")?;
    let mut cells = Vec::new();
    if !args.json {
        print_header(args.copy_on_write)?;
    }
    for &size_mb in &args.sizes_mb {
        let memcpy = memcpy_reference(size_mb << 20);
        for &n in &args.consumers {
            let cell = measure(&exe, &args, size_mb, n, memcpy)?;
            if !args.json {
                print_cell(&cell)?;
            }
            cells.push(cell);
        }
    }
    summarise(&args, &cells)
}

/// The table's first lines: how consumers map the arena, and the columns.
fn print_header(copy_on_write: bool) -> Result<()> {
    let mapping = if copy_on_write {
        "private and writable (copy-on-write)"
    } else {
        "shared and read-only"
    };
    outln!("consumers map the arena {mapping}")?;
    outln!(
        "{:>8} {:>9} {:>11} {:>11} {:>11} {:>11} {:>13} {:>10} {:>11}",
        "size MiB",
        "consumers",
        "batches/s",
        "GB/s each",
        "overhead us",
        "prod CPU us",
        "+write CPU us",
        "memcpy us",
        "memcpy GB/s"
    )?;
    Ok(())
}

/// One cell, `n` consumers of `size_mb` MiB batches: the median of
/// `--repeat` runs of each mode; `memcpy` is the reference copy's
/// microseconds and GB/s at that size.
fn measure(
    exe: &std::path::Path,
    args: &BenchArgs,
    size_mb: usize,
    n: usize,
    memcpy: (f64, f64),
) -> Result<Cell> {
    let bytes = size_mb << 20;
    let (memcpy_us, memcpy_gbs) = memcpy;
    let (mut rates, mut cpus, mut cpus_written) = (Vec::new(), Vec::new(), Vec::new());
    let mut durable_rates = Vec::new();
    for _ in 0..args.repeat {
        let (rate, cpu) = run_cell(exe, args, bytes, n, Mode::Transport)?;
        rates.push(rate);
        cpus.push(cpu);
        cpus_written.push(run_cell(exe, args, bytes, n, Mode::Written)?.1);
        if args.durable {
            durable_rates.push(run_cell(exe, args, bytes, n, Mode::Durable)?.0);
        }
    }
    let durable_rate = (!durable_rates.is_empty()).then(|| median(durable_rates));
    let cell = (median(rates), median(cpus));
    let written = (0.0, median(cpus_written));
    Ok(Cell {
        producer_cpu_written_us: written.1,
        size_mb,
        consumers: n,
        gb_per_sec: cell.0 * bytes as f64 / 1e9,
        batches_per_sec: cell.0,
        overhead_us: 1e6 / cell.0.max(1e-9),
        producer_cpu_us: cell.1,
        memcpy_us,
        memcpy_gb_per_sec: memcpy_gbs,
        state_writes_ratio: durable_rate.map(|d| d / cell.0.max(1e-9)),
    })
}

/// A cell's row of the table.
fn print_cell(cell: &Cell) -> Result<()> {
    outln!(
        "{:>8} {:>9} {:>11.0} {:>11.1} {:>11.1} {:>11.1} {:>13.1} {:>10.1} {:>11.1}",
        cell.size_mb,
        cell.consumers,
        cell.batches_per_sec,
        cell.gb_per_sec,
        cell.overhead_us,
        cell.producer_cpu_us,
        cell.producer_cpu_written_us,
        cell.memcpy_us,
        cell.memcpy_gb_per_sec
    )?;
    if let Some(r) = cell.state_writes_ratio {
        outln!("{:>8} with a state file: {r:.3}x the batches/s", "")?;
    }
    Ok(())
}

/// How the per-batch overhead grows with the batch, and the producer's CPU
/// with the consumers: as JSON (with every cell), or as lines below the
/// table.
fn summarise(args: &BenchArgs, cells: &[Cell]) -> Result<()> {
    let find = |size: usize, n: usize| cells.iter().find(|c| c.size_mb == size && c.consumers == n);
    let (small, large) = (args.sizes_mb[0], *args.sizes_mb.last().unwrap_or(&1));
    let (n_lo, n_hi) = (args.consumers[0], *args.consumers.last().unwrap_or(&1));
    let overhead_ratio = match (find(small, n_lo), find(large, n_lo)) {
        (Some(a), Some(b)) => b.overhead_us / a.overhead_us,
        _ => f64::NAN,
    };
    let growth = |f: fn(&Cell) -> f64| -> Vec<(usize, f64)> {
        args.sizes_mb
            .iter()
            .filter_map(|&s| Some((s, f(find(s, n_hi)?) / f(find(s, n_lo)?))))
            .collect()
    };
    let cpu_growth = growth(|c| c.producer_cpu_us);
    let cpu_growth_written = growth(|c| c.producer_cpu_written_us);
    if args.json {
        let out = json!({"cells": cells, "copy_on_write": args.copy_on_write,
                         "overhead_ratio_largest_to_smallest": overhead_ratio,
                         "producer_cpu_growth_by_size": cpu_growth,
                         "producer_cpu_growth_written_by_size": cpu_growth_written});
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
    } else {
        outln!(
            "\nper-batch overhead, {large} MiB vs {small} MiB at {n_lo} consumer(s): {overhead_ratio:.2}x \
             (zero-copy: it does not grow with the batch)"
        )?;
        for ((s, g), (_, w)) in cpu_growth.iter().zip(&cpu_growth_written) {
            outln!(
                "producer CPU per batch, {n_hi} vs {n_lo} consumer(s), {s} MiB: {w:.2}x with the \
                 batch written, {g:.2}x for the transport alone"
            )?;
        }
    }
    Ok(())
}

/// What a cell's producer does per batch.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Touches one byte: the transport alone.
    Transport,
    /// Writes the whole batch.
    Written,
    /// As `Transport`, keeping a state file (`ProducerOptions::durable`).
    Durable,
}

/// Returns (median consumer batches/s, producer CPU us per batch).
fn run_cell(
    exe: &std::path::Path,
    args: &BenchArgs,
    bytes: usize,
    n: usize,
    mode: Mode,
) -> Result<(f64, f64)> {
    let name = format!("bench-{}", std::process::id());
    let mut producer = bench_producer(&name, args, bytes, mode)?;
    let (children, stopped) = start_consumers(exe, args, &name, n)?;
    let attached = n + usize::from(stopped.is_some());
    if !producer.wait_for_consumers(attached, Some(Duration::from_secs(60))) {
        bail!("the bench consumers did not attach within 60 s");
    }
    if let Some(child) = &stopped {
        child.signal(Signal::STOP);
    }
    let cpu = publish_epoch(&mut producer, args, bytes, mode == Mode::Written)?;
    if let Some(mut child) = stopped {
        child.kill();
    }
    producer.finish(batchcast::ShutdownReason::Finished);
    let rate = median_rate(children, n)?;
    Ok((rate, cpu * 1e6 / args.batches as f64))
}

/// The producer of one cell: `args.batches` one-row batches of `bytes`
/// each per epoch, with the lag budget and policy `args` gives (and a
/// state file in `Mode::Durable`).
fn bench_producer(name: &str, args: &BenchArgs, bytes: usize, mode: Mode) -> Result<Producer> {
    Ok(Producer::create(
        name,
        ProducerOptions {
            window: args.window,
            slot_size: Some(bytes + 4096),
            samples_per_epoch: Some(args.batches),
            batch_size: Some(1),
            max_lag: Some(batchcast::LagBudget::parse(&args.max_lag)?),
            lag_policy: if args.stopped {
                batchcast::LagPolicy::Evict {
                    stall_timeout: Duration::from_millis(100),
                }
            } else {
                batchcast::LagPolicy::Wait
            },
            durable: (mode == Mode::Durable).then(|| batchcast::Durability::new("bench")),
            ..Default::default()
        },
    )?)
}

/// Starts `n` bench consumers of `name` (their stdout piped), and with
/// `--stopped` one more that is stopped once attached.
fn start_consumers(
    exe: &std::path::Path,
    args: &BenchArgs,
    name: &str,
    n: usize,
) -> Result<(Vec<Process>, Option<Process>)> {
    let mut children = Vec::new();
    let mapping = args.copy_on_write.then_some("--copy-on-write");
    for _ in 0..n {
        let mut cmd = Command::new(exe);
        cmd.args(["bench-consumer", name]).args(mapping);
        let child = supervised(cmd, Output::Pipe).context("cannot start a bench consumer")?;
        children.push(child);
    }
    let stopped = if args.stopped {
        let mut cmd = Command::new(exe);
        cmd.args(["bench-consumer", name]);
        let child =
            supervised(cmd, Output::Null).context("cannot start the stopped bench consumer")?;
        Some(child)
    } else {
        None
    };
    Ok((children, stopped))
}

/// Publishes one epoch (each batch written whole with `write`, else one
/// byte of it); returns the CPU seconds this process spent.
fn publish_epoch(
    producer: &mut Producer,
    args: &BenchArgs,
    bytes: usize,
    write: bool,
) -> Result<f64> {
    let source = if write { vec![7u8; bytes] } else { Vec::new() };
    let cpu0 = cpu_secs(Who::SelfProcess);
    let mut never = || false;
    producer.begin_epoch()?;
    for _ in 0..args.batches {
        let spec = [LeafSpec::array(DType::U8, vec![1, bytes as u64])];
        let mut slot = producer.loan(Node::Leaf(0), &spec, &mut never)?;
        if write {
            slot.leaf_mut(0).copy_from_slice(&source);
        } else {
            slot.leaf_mut(0)[0] = 1;
        }
        slot.publish()?;
    }
    producer.end_epoch()?;
    Ok(cpu_secs(Who::SelfProcess) - cpu0)
}

/// The median of the batches/s the `n` consumers report, once each has
/// exited successfully.
fn median_rate(children: Vec<Process>, n: usize) -> Result<f64> {
    let mut rates = Vec::new();
    for mut child in children {
        let out = child.take_stdout().context("bench consumer stdout")?;
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                if let Some(r) = v["batches_per_sec"].as_f64() {
                    rates.push(r);
                }
            }
        }
        let status = child.wait()?;
        if !status.success() {
            bail!("a bench consumer failed ({status})");
        }
    }
    if rates.len() != n {
        bail!("only {} of {n} bench consumers reported", rates.len());
    }
    rates.sort_by(|a, b| a.total_cmp(b));
    Ok(rates[n / 2])
}

/// Starts a bench consumer: its stdout to `stdout`, its stderr the
/// bench's, killed with its group if the bench dies.
fn supervised(cmd: Command, stdout: Output) -> std::io::Result<Process> {
    let options = Options {
        stdout,
        stderr: Output::Inherit,
        watcher: true,
        ..Options::default()
    };
    Process::start(cmd, options)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median time and GB/s of copying `bytes` once.
fn memcpy_reference(bytes: usize) -> (f64, f64) {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let mut times: Vec<f64> = (0..9)
        .map(|_| {
            let t0 = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            t0.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    let t = times[4];
    (t * 1e6, bytes as f64 / t / 1e9)
}

/// Arguments of `batchcast bench-consumer` (internal).
#[derive(Debug, clap::Args)]
pub struct BenchConsumerArgs {
    /// Producer name.
    pub name: String,
    /// Map the arena copy-on-write.
    #[arg(long)]
    pub copy_on_write: bool,
}

/// One consumer of the bench: takes every batch, reads a byte, releases.
pub fn consumer(args: BenchConsumerArgs) -> Result<()> {
    let opts = ConsumerOptions {
        connect_timeout: Some(Duration::from_secs(30)),
        label: "bench".into(),
        copy_on_write: args.copy_on_write,
        ..Default::default()
    };
    let mut never = || false;
    let mut c = Consumer::connect(&args.name, opts, &mut never)?;
    let mut t0 = None;
    let mut batches = 0u64;
    let mut sum = 0u64;
    loop {
        match c.next_event(&mut never)? {
            Event::Batch(b) => {
                t0.get_or_insert_with(Instant::now);
                sum += b.leaves()[0].bytes()[0] as u64;
                batches += 1;
            }
            Event::EpochEnd { .. } | Event::Finished(_) => break,
            Event::EpochStart(_) | Event::Trigger(_) => {}
        }
    }
    let secs = t0.map_or(0.0, |t| t.elapsed().as_secs_f64());
    // The first batch starts the clock: count the intervals after it.
    let rate = batches.saturating_sub(1) as f64 / secs.max(1e-9);
    outln!(
        "{}",
        json!({"batches": batches, "batches_per_sec": rate, "check": sum})
    )?;
    Ok(())
}
