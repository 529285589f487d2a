//! The flags of `batchcast serve`, and the checks `run` makes of them
//! before it opens the source.

use std::time::Duration;

use batchcast::{LagBudget, LagPolicy};

use crate::args::SourceArgs;
use crate::error::{Result, ServeError};
use crate::start::StartWait;
use crate::trigger::TriggerSpec;

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
    /// GPUs to serve from device memory: `cuda:0`, `cuda:0,cuda:1` or
    /// UUIDs. The arena is mirrored on each, each batch copied there once
    /// before it is published; consumers with `device=` on one of them
    /// read the mirror. Where that cannot be done (no CUDA driver, a MIG
    /// instance), a warning says why and it serves on the host path.
    #[arg(long)]
    pub device: Option<String>,
}

/// `--trigger` as clap reads it.
fn parse_trigger(text: &str) -> std::result::Result<TriggerSpec, ServeError> {
    text.parse()
}

/// How long to wait for the trainers that `batchcast run` announced, when
/// no --idle-timeout is given.
pub(super) const TRAINERS_WITHIN: Duration = Duration::from_secs(300);

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
pub(super) fn seconds(secs: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        ServeError::invalid(format!(
            "{flag} must be a non-negative number of seconds, not {secs}"
        ))
    })
}

/// The flags `run` checks before it opens the source, as it uses them.
pub(super) struct Flags {
    /// The consumers to wait for before the first epoch.
    pub(super) start: StartWait,
    /// `--idle-timeout`.
    pub(super) idle_timeout: Option<Duration>,
    /// `--max-lag`.
    pub(super) max_lag: Option<LagBudget>,
    /// `--lag-policy` with `--stall-timeout`.
    pub(super) lag_policy: LagPolicy,
    /// `--rejoin-timeout`.
    pub(super) rejoin_timeout: Duration,
}

impl Flags {
    /// Checks the flags (and the runner's count of trainers), in this order.
    pub(super) fn check(args: &ServeArgs) -> Result<Flags> {
        Ok(Flags {
            start: StartWait::from_env(args.consumers)?,
            idle_timeout: args.idle_timeout()?,
            max_lag: args.max_lag.as_deref().map(LagBudget::parse).transpose()?,
            lag_policy: LagPolicy::parse(&args.lag_policy, args.stall_timeout)?,
            rejoin_timeout: args.rejoin_timeout()?,
        })
    }
}
