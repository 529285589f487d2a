//! The one error type of the core.
//!
//! Every variant a user can cause says what went wrong *and* what to do about
//! it; the Python bindings map each variant to its own exception class, so
//! adding a variant means adding its mapping there.

use std::path::PathBuf;

/// Errors of the batchcast core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A producer name that cannot be used as a file name.
    #[error(
        "invalid producer name {name:?}: {why}; use 1 to 64 characters from A-Z a-z 0-9 . _ - \
         (not starting with '.'), e.g. \"cifar\""
    )]
    InvalidName {
        /// The name as given.
        name: String,
        /// What rule it breaks.
        why: &'static str,
    },

    /// An option out of range (batch size 0, window 0, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// No producer listens under this name.
    #[error("{}", not_found(name, socket, *waited_secs))]
    ProducerNotFound {
        /// The name asked for.
        name: String,
        /// The socket path that was tried.
        socket: PathBuf,
        /// How long the caller waited for it to appear (`None`: not at all).
        waited_secs: Option<f64>,
    },

    /// A live producer already holds this name.
    #[error(
        "a producer named {name:?} is already running{}; stop it or choose another name",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    NameInUse {
        /// The name asked for.
        name: String,
        /// The pid of the live producer, when it could be read.
        pid: Option<u32>,
    },

    /// The producer's connection closed without a clean shutdown (and, for
    /// a producer that resumes, none resumed the stream in time).
    #[error("{}", gone(name, *waited_secs))]
    ProducerGone {
        /// The producer's name.
        name: String,
        /// How long the consumer waited for a restarted producer to resume
        /// the stream; `None`: it did not wait.
        waited_secs: Option<f64>,
    },

    /// A producer's state file cannot be read: corrupt, truncated, from
    /// another version, or unreadable.
    #[error(
        "cannot resume producer {name:?} from its state file {}: {why}; nothing was reset. To \
         start the stream afresh (from epoch 0, for consumers attaching anew), pass --fresh \
         (`batchcast serve --fresh`, Python's `Producer(..., fresh=True)`, \
         ProducerOptions::durable's `fresh`), or remove the file",
        path.display()
    )]
    StateFile {
        /// The producer's name.
        name: String,
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },

    /// A producer restarted under a name whose state file describes
    /// another stream (dataset, seed or options).
    #[error(
        "producer {name:?} cannot resume the stream in {}: it was started with {differences}; \
         restart it with the same dataset, seed and options to resume, or pass --fresh \
         (`batchcast serve --fresh`, Python's `Producer(..., fresh=True)`, \
         ProducerOptions::durable's `fresh`) to start afresh",
        path.display()
    )]
    StreamMismatch {
        /// The producer's name.
        name: String,
        /// The state file.
        path: PathBuf,
        /// What differs, each as `key: then A, now B`.
        differences: String,
    },

    /// The producer stopped before this consumer was welcomed: it sent its
    /// shutdown instead (its loader failed on the first batch, say).
    #[error("{}", stopped_before_welcome(name, reason))]
    ProducerStopped {
        /// The producer's name.
        name: String,
        /// Why it stopped.
        reason: crate::wire::ShutdownReason,
    },

    /// The producer refused this consumer.
    #[error("producer {name:?} refused to join: {reason}")]
    JoinRefused {
        /// The producer's name.
        name: String,
        /// The producer's reason.
        reason: String,
    },

    /// A batch needs more bytes than one slot has.
    #[error(
        "a batch of {needed} bytes does not fit in a slot of {slot_size} bytes; start the \
         producer with a slot size of at least {needed} bytes (Python: Producer(..., \
         slot_size={needed}), CLI: --slot-size {needed})"
    )]
    BatchTooLarge {
        /// Bytes the batch needs, header included.
        needed: usize,
        /// Bytes one slot has.
        slot_size: usize,
    },

    /// Not enough shared memory for the arena.
    #[error(
        "cannot reserve {needed} bytes of shared memory for the arena ({slots} slots of {slot_size} \
         bytes; {available}); lower the window (--window) or the slot size, or free memory"
    )]
    OutOfSharedMemory {
        /// Bytes the arena needs.
        needed: u64,
        /// Slots asked for.
        slots: usize,
        /// Bytes per slot.
        slot_size: usize,
        /// What is known about the memory available.
        available: String,
    },

    /// A batch that breaks the rules (ragged rows, too deep, wrong sizes).
    #[error("invalid batch: {0}")]
    InvalidBatch(String),

    /// A peer sent bytes that are not a valid message.
    #[error("protocol error: {0}")]
    Protocol(String),

    /// A shared-memory region the producer sent cannot be used: not sealed,
    /// of another kind or layout version, or its header disagrees with the
    /// file or the welcome.
    #[error(transparent)]
    Region(#[from] crate::region::RegionOpenError),

    /// The peer speaks another protocol version.
    #[error(
        "protocol version mismatch: this side speaks {ours}, the peer {theirs}; use the same \
         batchcast version for the producer and its consumers"
    )]
    VersionMismatch {
        /// Our version.
        ours: u32,
        /// The peer's version.
        theirs: u32,
    },

    /// The socket's peer runs as another user.
    #[error("refused a connection from uid {peer} (this process runs as uid {ours})")]
    ForeignPeer {
        /// The peer's uid.
        peer: u32,
        /// Our uid.
        ours: u32,
    },

    /// The producer's socket or directory belongs to another user (EACCES).
    #[error(
        "permission denied on {}: the producer runs as another user, and its socket directory \
         is private to that user; run this process as the producer's user, or start a producer \
         of your own (each user has their own socket directory; BATCHCAST_DIR overrides it)",
        path.display()
    )]
    PermissionDenied {
        /// The socket or directory that could not be opened.
        path: PathBuf,
    },

    /// The socket directory is unsafe to use.
    #[error("unsafe socket directory {}: {why}", path.display())]
    UnsafeDirectory {
        /// The directory.
        path: PathBuf,
        /// Why it is refused and what to do.
        why: String,
    },

    /// The producer waited too long with no consumer attached.
    #[error(
        "no consumer attached within {secs:.1} s; start the training processes, or raise the \
         idle timeout"
    )]
    NoConsumers {
        /// The timeout that expired.
        secs: f64,
    },

    /// The producer evicted this consumer: it fell too far behind the others.
    #[error(
        "this consumer fell behind: it was {behind} batches behind the fastest consumer of \
         producer {name:?} in epoch {epoch}, past the producer's lag budget of {budget} batches, \
         and was evicted so that the others could go on; raise the budget (Producer(..., \
         max_lag=...), `serve --max-lag`), let the producer wait for laggards (lag_policy=\"wait\"), \
         or rejoin at the next epoch (Consumer(..., on_evict=\"rejoin\"))"
    )]
    FellBehind {
        /// The producer's name.
        name: String,
        /// The epoch it was evicted from.
        epoch: u64,
        /// Batches it was behind the most advanced consumer.
        behind: u64,
        /// The lag budget, in batches.
        budget: u64,
    },

    /// A blocking call was interrupted (Ctrl-C) through its interrupt hook.
    #[error("interrupted")]
    Interrupted,

    /// A producer call made out of order (publish outside an epoch, ...).
    #[error("usage error: {0}")]
    Usage(String),

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: impl Into<std::io::Error>) -> Self {
        Error::Io {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// Result with the core's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The message of [`Error::ProducerGone`]: what happened, how long a
/// restart was waited for, and what to do.
fn gone(name: &str, waited: Option<f64>) -> String {
    match waited {
        None => format!(
            "producer {name:?} is gone (its connection closed without a shutdown message: it \
             was killed or crashed); restart it, then reconnect"
        ),
        Some(secs) => format!(
            "producer {name:?} is gone (killed or crashed) and no producer resumed its stream \
             within {secs:.0} s; restart it under the same name with the same dataset, seed and \
             options (`batchcast serve --name {name} ...`) before the consumers' \
             reconnect_timeout passes, or raise reconnect_timeout"
        ),
    }
}

/// The message of [`Error::ProducerNotFound`]: what was waited for, how
/// long, and what to change.
fn not_found(name: &str, socket: &std::path::Path, waited: Option<f64>) -> String {
    let start = format!(
        "start one (`batchcast serve --name {name} ...` or batchcast.Producer(loader, \
         name={name:?}).run()), or check the name with `batchcast status`"
    );
    match waited {
        Some(secs) if secs > 0.0 => format!(
            "no producer named {name:?} appeared within the {secs:.1} s connect timeout (waited \
             for its socket {}); if one of that name ran, it has ended (it served its epochs, \
             was idle for its idle_timeout with no consumer attached, was stopped, or its \
             loader failed: its own output says which): {start}",
            socket.display()
        ),
        _ => format!(
            "no producer named {name:?} is running (looked for {}); {start}, or pass a connect \
             timeout (connect_timeout=) to wait for it",
            socket.display()
        ),
    }
}

fn stopped_before_welcome(name: &str, reason: &crate::wire::ShutdownReason) -> String {
    use crate::wire::ShutdownReason;
    match reason {
        ShutdownReason::Failed(why) => format!(
            "producer {name:?} stopped before its first batch because its loader failed: {why}; \
             fix the loader, then restart the producer"
        ),
        ShutdownReason::Finished => format!(
            "producer {name:?} finished before it could welcome this consumer: it served all its \
             epochs; restart it to serve more"
        ),
        ShutdownReason::Interrupted => format!(
            "producer {name:?} was interrupted (Ctrl-C) and stopped before it could welcome this \
             consumer; restart it"
        ),
    }
}
