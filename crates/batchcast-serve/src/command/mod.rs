//! `batchcast serve` as a function: run a producer over a dataset (or a
//! synthetic source), with the flags, waits and printed lines of the
//! command. Its faces (the binary, the Python binding) supply a [`Face`].

mod flags;
mod lines;

use std::cell::RefCell;

use batchcast::{
    Durability, IdlePolicy, Layout, Producer, ProducerOptions, ResumePoint, RunEvents,
    ShutdownReason, Warn, SLOT_HEADROOM,
};

use crate::error::{Result, ServeError};
use crate::resume::identity;
use crate::serve::{fast_forward, serve, shutdown_reason, ServeSummary};
use crate::source::BatchSource;
use crate::start::StartWait;
use crate::trigger::Trigger;
pub use flags::ServeArgs;
use flags::{seconds, Flags, TRAINERS_WITHIN};
use lines::{announce, boundary_lines, finished};

/// What the face running the command does for it.
pub trait Face {
    /// True to stop: called every 100 ms while waiting, and after each
    /// batch (SIGINT, SIGTERM, Ctrl-C in Python).
    fn interrupted(&mut self) -> bool;
    /// Writes one event line (with `--json`: stdout for the binary).
    fn event(&mut self, line: &str) -> std::io::Result<()>;
    /// Batch `i` (from 1) of the `n` of `epoch` is published (a progress bar).
    fn batch(&mut self, _epoch: u64, _i: u64, _n: u64) {
        // No progress is shown by default.
    }
    /// The last batch is out (a progress bar is cleared).
    fn served(&mut self) {
        // No progress is shown by default.
    }
}

/// Runs `batchcast serve`: prints what it serves (stderr, or a
/// `listening` event line with `--json`), waits for the consumers it was
/// told to, serves, tells the consumers why it ended, and prints the
/// summary (stderr, or a `finished` event line).
pub fn run(args: &ServeArgs, face: &mut dyn Face) -> Result<ServeSummary> {
    let flags = Flags::check(args)?;
    let mut source = args.source.open()?;
    let options = producer_options(args, &flags, source.as_mut())?;
    let mut trigger = args.trigger.clone().map(Trigger::new);
    let mut producer = Producer::create(&args.name, options)?;
    let resumed = resume(&mut producer, source.as_mut(), trigger.as_mut())?;
    let mut events = RunEvents::from_env(Warn::default());
    if let Some(r) = resumed {
        let line = serde_json::json!({"event": "resumed", "epoch": r.epoch, "row": r.row,
            "consumers": r.consumers});
        events.record(&line.to_string());
    }
    announce(args, &producer, source.as_ref(), resumed, face)?;
    match wait_for_consumers(&producer, resumed, &flags, face) {
        Ok(true) => {}
        Ok(false) => {
            producer.finish(ShutdownReason::Interrupted);
            return Ok(ServeSummary {
                interrupted: true,
                ..ServeSummary::default()
            });
        }
        Err(e) => {
            producer.finish(ShutdownReason::Failed(e.chain()));
            return Err(e);
        }
    }
    let summary = serve_stream(
        args,
        producer,
        source.as_mut(),
        trigger.as_mut(),
        &mut events,
        face,
    )?;
    finished(args.json, &summary, face)?;
    Ok(summary)
}

/// The producer's options: the window, slot size, idle policy, lag budget
/// and, unless `--no-state`, the durable stream's identity.
fn producer_options(
    args: &ServeArgs,
    flags: &Flags,
    source: &mut dyn BatchSource,
) -> Result<ProducerOptions> {
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
    Ok(ProducerOptions {
        mirrors: mirrors(args.device.as_deref())?,
        window: args.window,
        slot_size,
        samples_per_epoch: Some(source.samples_per_epoch()),
        batch_size: Some(args.source.batch_size),
        idle: if args.no_wait {
            IdlePolicy::Run
        } else {
            IdlePolicy::Wait(flags.idle_timeout)
        },
        dir: None,
        max_lag: flags.max_lag,
        lag_policy: flags.lag_policy,
        durable,
        ..ProducerOptions::default()
    })
}

/// The mirrors for `--device`; where they cannot be made, none, and a
/// warning on stderr saying why. A malformed list is an error.
fn mirrors(device: Option<&str>) -> Result<Vec<batchcast::Mirror>> {
    let Some(list) = device else {
        return Ok(Vec::new());
    };
    let served = batchcast_device::serve_devices(list)
        .map_err(|e| ServeError::invalid(format!("--device {list}: {e}")))?;
    if let Some(why) = &served.fallback {
        eprintln!("warning: {why}");
    }
    let (mirrors, devices) = served.into_parts();
    for (info, _) in &devices {
        eprintln!(
            "mirroring the arena on cuda:{} ({}, {})",
            info.ordinal, info.name, info.uuid
        );
    }
    Ok(mirrors)
}

/// Where the producer resumes a stopped stream, if it does: the source
/// grows, and the trigger counts, as they did before the epoch it resumes.
fn resume(
    producer: &mut Producer,
    source: &mut dyn BatchSource,
    trigger: Option<&mut Trigger>,
) -> Result<Option<ResumePoint>> {
    let resumed = producer.resumed();
    if let Some(r) = resumed {
        fast_forward(source, trigger, r.epoch)?;
        producer.set_samples_per_epoch(Some(source.samples_per_epoch()));
    }
    Ok(resumed)
}

/// Waits for the consumers a resumed stream had (those not back within
/// --rejoin-timeout are not waited for), then for those asked for.
/// Ok(true) once they are attached, Ok(false) when interrupted, Err when
/// too few attached in time.
fn wait_for_consumers(
    producer: &Producer,
    resumed: Option<ResumePoint>,
    flags: &Flags,
    face: &mut dyn Face,
) -> Result<bool> {
    if let Some(r) = resumed {
        // The consumers the stream had reattach before it goes on, so that
        // none finds it past its position (Err: it goes on without them).
        let rejoin = StartWait {
            asked: r.consumers as usize,
            trainers: 0,
        };
        let within = Some(flags.rejoin_timeout);
        if let Ok(false) = rejoin.wait(producer, within, &mut || face.interrupted()) {
            return Ok(false);
        }
    }
    if flags.start.wanted() == 0 {
        return Ok(true);
    }
    // Without --idle-timeout, the trainers `batchcast run` announced are
    // waited for within TRAINERS_WITHIN; --consumers alone, forever.
    let within = flags
        .idle_timeout
        .or(flags.start.from_runner().then_some(TRAINERS_WITHIN));
    Ok(flags
        .start
        .wait(producer, within, &mut || face.interrupted())?)
}

/// Serves `args.epochs` epochs, printing each boundary's lines, and tells
/// the consumers why the stream ended.
fn serve_stream(
    args: &ServeArgs,
    mut producer: Producer,
    source: &mut dyn BatchSource,
    trigger: Option<&mut Trigger>,
    events: &mut RunEvents,
    face: &mut dyn Face,
) -> Result<ServeSummary> {
    let shared = RefCell::new(&mut *face);
    let mut written = Ok(());
    let result = serve(
        &mut producer,
        source,
        args.epochs,
        trigger,
        &mut || shared.borrow_mut().interrupted(),
        &mut |e, i, n| shared.borrow_mut().batch(e, i, n),
        &mut |report| {
            if written.is_ok() {
                written = boundary_lines(report, args.json, *shared.borrow_mut(), events);
            }
        },
    );
    written.map_err(ServeError::Output)?;
    face.served();
    producer.finish(shutdown_reason(&result));
    result
}
