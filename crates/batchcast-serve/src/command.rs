//! `batchcast serve` as a function: run a producer over a dataset (or a
//! synthetic source), with the flags, waits and printed lines of the
//! command. Its faces (the binary, the Python binding) supply a [`Face`].

use std::cell::RefCell;
use std::time::Duration;

use batchcast::{
    Durability, IdlePolicy, LagBudget, LagPolicy, Layout, Producer, ProducerOptions, RunEvents,
    ShutdownReason, Warn, SLOT_HEADROOM,
};

use crate::args::SourceArgs;
use crate::error::{Result, ServeError};
use crate::resume::identity;
use crate::serve::{fast_forward, serve, shutdown_reason, BoundaryReport, ServeSummary};
use crate::start::StartWait;
use crate::trigger::{Trigger, TriggerSpec};

/// What the face running the command does for it.
pub trait Face {
    /// True to stop: called every 100 ms while waiting, and after each
    /// batch (SIGINT, SIGTERM, Ctrl-C in Python).
    fn interrupted(&mut self) -> bool;
    /// Writes one event line (with `--json`: stdout for the binary).
    fn event(&mut self, line: &str) -> std::io::Result<()>;
    /// Batch `i` (from 1) of the `n` of `epoch` is published (a progress bar).
    fn batch(&mut self, _epoch: u64, _i: u64, _n: u64) {}
    /// The last batch is out (a progress bar is cleared).
    fn served(&mut self) {}
}

/// Arguments of `batchcast serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Name consumers attach to.
    #[arg(long)]
    pub name: String,
    /// What to serve.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Epochs to serve. 0: serve for as long as any consumer reads (each
    /// trainer looping its own number of epochs), until none has been
    /// attached for --idle-timeout seconds (never without --idle-timeout),
    /// like Python's `Producer.run()` without `epochs=`.
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    /// Slots retained: how far the slowest consumer may fall behind.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// Bytes per slot (default: sized from the first batch, +25 %).
    #[arg(long)]
    pub slot_size: Option<usize>,
    /// How far a consumer may fall behind the others before it holds them
    /// back (or is evicted): bytes ("512MiB", "2GiB") or batches
    /// ("100batches"). Default: the smaller of 1 GiB and 1/8 of the memory
    /// available, reserved only when used.
    #[arg(long)]
    pub max_lag: Option<String>,
    /// Past the lag budget: "wait" (hold the others back) or "evict" (evict
    /// the laggard after --stall-timeout seconds).
    #[arg(long, default_value = "wait")]
    pub lag_policy: String,
    /// Seconds the producer stays blocked by a laggard before it evicts it
    /// (with --lag-policy evict).
    #[arg(long, default_value_t = 10.0)]
    pub stall_timeout: f64,
    /// Publish even with no consumer attached (default: wait for one).
    #[arg(long)]
    pub no_wait: bool,
    /// Wait for this many consumers before the first epoch (so that all of
    /// them see it whole). Under `batchcast run` the workload's number of
    /// trainers (BATCHCAST_CONSUMERS) is waited for too, within
    /// --idle-timeout or 300 s.
    #[arg(long, default_value_t = 0)]
    pub consumers: usize,
    /// Give up after this many seconds with no consumer attached (with
    /// --epochs 0, once a batch was served: finish).
    #[arg(long)]
    pub idle_timeout: Option<f64>,
    /// Print one JSON line per event on stdout (for scripts and tests).
    #[arg(long)]
    pub json: bool,
    /// Start the stream afresh, discarding the position a killed producer
    /// of this name left in its state file (by default a restart resumes
    /// it, and consumers waiting for the restart continue where they were).
    #[arg(long)]
    pub fresh: bool,
    /// Keep no state file: a restart under this name starts afresh, and
    /// consumers fail at once when this producer dies.
    #[arg(long, conflicts_with = "fresh")]
    pub no_state: bool,
    /// Seconds a resumed producer waits for the consumers its predecessor
    /// had to reattach before it publishes (then it goes on without them).
    #[arg(long, default_value_t = 30.0)]
    pub rejoin_timeout: f64,
    /// Seconds between two writes of the state file while the stream
    /// moves (tests make it short, to resume close to the consumers).
    #[arg(long, default_value_t = 1.0, hide = true)]
    pub state_interval: f64,
    /// Tell every consumer, at an epoch boundary, when the data that
    /// arrived since the last firing calls for it (with --watch):
    /// `amount=N` (N samples arrived), `time=D` (D since the last firing:
    /// 90s, 10m, 2h), `every-epoch`, or `any(T,...)` / `all(T,...)` of
    /// these. Consumers receive the trigger after the epoch's last batch,
    /// before the next epoch's first.
    #[arg(long, value_parser = parse_trigger)]
    pub trigger: Option<TriggerSpec>,
}

/// `--trigger` as clap reads it.
fn parse_trigger(text: &str) -> std::result::Result<TriggerSpec, ServeError> {
    text.parse()
}

/// How long to wait for the trainers that `batchcast run` announced, when
/// no --idle-timeout is given.
const TRAINERS_WITHIN: Duration = Duration::from_secs(300);

impl ServeArgs {
    /// `--idle-timeout` as a duration.
    fn idle_timeout(&self) -> Result<Option<Duration>> {
        self.idle_timeout
            .map(|t| {
                Duration::try_from_secs_f64(t).map_err(|_| {
                    ServeError::invalid(format!(
                        "--idle-timeout must be a non-negative number of seconds, not {t}"
                    ))
                })
            })
            .transpose()
    }

    /// `--rejoin-timeout` as a duration.
    fn rejoin_timeout(&self) -> Result<Duration> {
        seconds(self.rejoin_timeout, "--rejoin-timeout")
    }
}

/// `secs` of the flag `flag` as a duration.
fn seconds(secs: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        ServeError::invalid(format!(
            "{flag} must be a non-negative number of seconds, not {secs}"
        ))
    })
}

/// Runs `batchcast serve`: prints what it serves (stderr, or a
/// `listening` event line with `--json`), waits for the consumers it was
/// told to, serves, tells the consumers why it ended, and prints the
/// summary (stderr, or a `finished` event line).
pub fn run(args: &ServeArgs, face: &mut dyn Face) -> Result<ServeSummary> {
    let start = StartWait::from_env(args.consumers)?;
    let idle_timeout = args.idle_timeout()?;
    let max_lag = args.max_lag.as_deref().map(LagBudget::parse).transpose()?;
    let lag_policy = LagPolicy::parse(&args.lag_policy, args.stall_timeout)?;
    let rejoin_timeout = args.rejoin_timeout()?;
    let mut source = args.source.open()?;
    let interval = seconds(args.state_interval, "--state-interval")?;
    // The trigger decides what consumers are told at boundaries (and what
    // `--select new-data` serves): a restart must keep it.
    let mut stream = identity(&args.source, source.samples_per_epoch());
    if let Some(spec) = &args.trigger {
        stream.push_str(&format!("\ntrigger={spec}"));
    }
    let durable = (!args.no_state).then(|| Durability {
        fresh: args.fresh,
        interval,
        ..Durability::new(stream)
    });
    let mut trigger = args.trigger.clone().map(Trigger::new);
    // A growing source's first batches may be smaller than a full one (a
    // trace's first step): its slots are sized for a full batch.
    let slot_size = match args.slot_size {
        None if args.source.grows() => {
            let (tree, leaves) = source.spec(args.source.batch_size);
            let bytes = Layout::plan(tree, &leaves)?.slot_bytes() as f64 * SLOT_HEADROOM;
            Some((bytes as usize).next_multiple_of(4096))
        }
        given => given,
    };
    let mut producer = Producer::create(
        &args.name,
        ProducerOptions {
            window: args.window,
            slot_size,
            samples_per_epoch: Some(source.samples_per_epoch()),
            batch_size: Some(args.source.batch_size),
            idle: if args.no_wait {
                IdlePolicy::Run
            } else {
                IdlePolicy::Wait(idle_timeout)
            },
            dir: None,
            max_lag,
            lag_policy,
            durable,
            ..ProducerOptions::default()
        },
    )?;
    let resumed = producer.resumed();
    if let Some(r) = resumed {
        // The source grows, and the trigger counts, as they did before the
        // epoch the stream resumes.
        fast_forward(source.as_mut(), trigger.as_mut(), r.epoch)?;
        producer.set_samples_per_epoch(Some(source.samples_per_epoch()));
    }
    let mut events = RunEvents::from_env(Warn::default());
    if let Some(r) = resumed {
        events.record(
            &serde_json::json!({"event": "resumed", "epoch": r.epoch, "row": r.row,
            "consumers": r.consumers})
            .to_string(),
        );
    }
    if args.json {
        let mut line = serde_json::json!({"event": "listening", "name": args.name,
            "socket": producer.socket_path(), "pid": std::process::id(),
            "samples_per_epoch": source.samples_per_epoch()});
        if let Some(spec) = &args.source.images.select {
            line["select"] = spec.to_string().into();
        }
        if let Some(r) = resumed {
            line["resumed"] = serde_json::json!({"epoch": r.epoch, "row": r.row,
                "consumers": r.consumers});
        }
        if args.source.images.watch {
            line["watch"] = true.into();
        }
        if let Some(csv) = &args.source.replay.replay {
            line["replay"] = csv.display().to_string().into();
        }
        if let Some(spec) = &args.trigger {
            line["trigger"] = spec.to_string().into();
        }
        face.event(&line.to_string()).map_err(ServeError::Output)?;
    } else {
        let epochs = match (args.epochs, args.idle_timeout) {
            (0, Some(t)) => format!("epochs until no consumer for {t} s"),
            (0, None) => "epochs until stopped".to_string(),
            (n, _) => format!("{n} epochs"),
        };
        let selected = match &args.source.images.select {
            Some(spec) => format!(" selected by {spec}"),
            None => String::new(),
        };
        eprintln!(
            "serving {:?} on {} ({} samples per epoch{selected}, batch {}, {epochs}); Ctrl-C stops",
            args.name,
            producer.socket_path().display(),
            source.samples_per_epoch(),
            args.source.batch_size,
        );
        if let Some(r) = resumed {
            eprintln!(
                "resuming the stream of the producer {:?} that stopped: epoch {}, from row {} \
                 (--fresh starts afresh)",
                args.name, r.epoch, r.row
            );
        }
    }
    if let Some(r) = resumed {
        // The consumers the stream had reattach before it goes on, so that
        // none finds it past its position; those not back within
        // --rejoin-timeout are not waited for (Err: it goes on).
        let rejoin = StartWait {
            asked: r.consumers as usize,
            trainers: 0,
        };
        let within = Some(rejoin_timeout);
        if let Ok(false) = rejoin.wait(&producer, within, &mut || face.interrupted()) {
            producer.finish(ShutdownReason::Interrupted);
            return Ok(ServeSummary {
                interrupted: true,
                ..ServeSummary::default()
            });
        }
    }
    if start.wanted() > 0 {
        // Without --idle-timeout, the trainers `batchcast run` announced are
        // waited for within TRAINERS_WITHIN; --consumers alone, forever.
        let within = idle_timeout.or(start.from_runner().then_some(TRAINERS_WITHIN));
        match start.wait(&producer, within, &mut || face.interrupted()) {
            Ok(true) => {}
            Ok(false) => {
                producer.finish(ShutdownReason::Interrupted);
                return Ok(ServeSummary {
                    interrupted: true,
                    ..ServeSummary::default()
                });
            }
            Err(e) => {
                let e = ServeError::from(e);
                producer.finish(ShutdownReason::Failed(e.chain()));
                return Err(e);
            }
        }
    }
    let shared = RefCell::new(&mut *face);
    let mut written = Ok(());
    let result = serve(
        &mut producer,
        source.as_mut(),
        args.epochs,
        trigger.as_mut(),
        &mut || shared.borrow_mut().interrupted(),
        &mut |e, i, n| shared.borrow_mut().batch(e, i, n),
        &mut |report| {
            if written.is_ok() {
                written = boundary_lines(report, args.json, *shared.borrow_mut(), &mut events);
            }
        },
    );
    written.map_err(ServeError::Output)?;
    face.served();
    producer.finish(shutdown_reason(&result));
    let summary = result?;
    if args.json {
        let line = serde_json::json!({"event": "finished", "summary": summary});
        face.event(&line.to_string()).map_err(ServeError::Output)?;
    } else {
        eprintln!(
            "served {} epochs, {} batches, {} samples in {:.1} s ({:.0} samples/s){}",
            summary.epochs,
            summary.batches,
            summary.samples,
            summary.seconds,
            summary.samples as f64 / summary.seconds.max(1e-9),
            if summary.interrupted {
                "; interrupted"
            } else if summary.idle {
                "; no consumer left"
            } else {
                ""
            }
        );
    }
    Ok(summary)
}

/// The lines an epoch boundary prints: `grew` when the dataset took in
/// samples, `trigger` when the trigger fired (JSON events, or text on
/// stderr), each also handed to the runner through `events`.
fn boundary_lines(
    report: &BoundaryReport,
    json: bool,
    face: &mut dyn Face,
    events: &mut RunEvents,
) -> std::io::Result<()> {
    if let Some(a) = report.arrived.as_ref().filter(|a| a.added > 0) {
        let line = serde_json::json!({"event": "grew", "epoch": report.epoch,
            "added": a.added, "samples_per_epoch": report.samples_per_epoch,
            "arrivals": a.arrivals, "rescan_seconds": a.seconds});
        events.record(&line.to_string());
        if json {
            face.event(&line.to_string())?;
        } else {
            eprintln!(
                "epoch {}: {} new samples, {} per epoch from now on",
                report.epoch, a.added, report.samples_per_epoch
            );
        }
    }
    if let Some(t) = &report.trigger {
        let line = serde_json::json!({"event": "trigger", "id": t.id, "seq": t.seq,
            "epoch": t.epoch, "samples": t.samples, "arrivals": t.arrivals});
        events.record(&line.to_string());
        if json {
            face.event(&line.to_string())?;
        } else {
            eprintln!(
                "trigger {} fired (#{}) before epoch {}: {} samples arrived since the last",
                t.id, t.seq, t.epoch, t.samples
            );
        }
    }
    Ok(())
}
