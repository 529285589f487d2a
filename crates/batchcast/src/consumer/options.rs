//! What a consumer is asked to do: [`ConsumerOptions`], given to
//! [`Consumer::connect`](super::Consumer::connect) and kept for the
//! consumer's life (a reattachment says hello with them again).

use std::path::PathBuf;
use std::time::Duration;

use crate::warn::Warn;
use crate::wire::{JoinPolicy, OnEvict, Position};

/// How long a consumer waits by default for a lost producer that resumes
/// its stream to be restarted.
pub const DEFAULT_RECONNECT_TIMEOUT: Duration = Duration::from_secs(300);

/// Consumer settings.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Rows per batch; `None`: the producer's batch size.
    pub batch_size: Option<u64>,
    /// Drop each epoch's last, smaller batch.
    pub drop_last: bool,
    /// How to join a producer that is already running.
    pub join: JoinPolicy,
    /// How long to wait for the producer's socket to appear; `None`: fail at
    /// once if it is not there.
    pub connect_timeout: Option<Duration>,
    /// Shown by `batchcast status`.
    pub label: String,
    /// Socket directory; `None`: the default.
    pub dir: Option<PathBuf>,
    /// Give a writer a private copy of each page it writes in place instead of
    /// SIGSEGV (for languages that can write through a view: Python).
    pub copy_on_write: bool,
    /// What to do if the producer evicts this consumer for falling behind.
    pub on_evict: OnEvict,
    /// Where warnings go (evicted, rejoining at the next epoch, waiting for
    /// a restarted producer); stderr by default.
    pub warn: Warn,
    /// How long to wait for a lost producer to be restarted under its name,
    /// when it resumes its stream (its welcome says so: `batchcast serve`
    /// keeps a state file); [`DEFAULT_RECONNECT_TIMEOUT`] by default. The
    /// consumer then reattaches and continues with exactly the rows it has
    /// not received. Zero: fail at once with
    /// [`Error::ProducerGone`](crate::Error::ProducerGone).
    pub reconnect_timeout: Duration,
    /// Where to start: a position a consumer had reached (its saved
    /// state), so that it receives the rows after it and nothing before.
    /// Exact where the producer still retains the batch holding it (or has
    /// not begun its epoch); else the consumer says so in a warning, with
    /// the rows it cannot have, and starts at the next epoch.
    pub start: Option<Position>,
    /// Connect held back: the consumer is welcomed and placed per its join
    /// policy, but the producer sends it nothing until its first read or
    /// [`Consumer::start_at`](super::Consumer::start_at), which may place
    /// it at a saved position instead (placed at the next epoch, it holds the current epoch's
    /// retained batches meanwhile, so that the position is still there).
    /// For a consumer that learns its saved position after connecting (a
    /// trainer that loads its checkpoint after building its loader).
    pub deferred: bool,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            batch_size: None,
            drop_last: false,
            join: JoinPolicy::default(),
            connect_timeout: None,
            label: String::new(),
            dir: None,
            copy_on_write: false,
            on_evict: OnEvict::default(),
            warn: Warn::default(),
            reconnect_timeout: DEFAULT_RECONNECT_TIMEOUT,
            start: None,
            deferred: false,
        }
    }
}
