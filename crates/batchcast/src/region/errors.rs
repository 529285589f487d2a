//! Why a region cannot be created, or opened when another process sent it.

use rustix::io::Errno;

use crate::error::Error;

/// Why a region could not be created.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateError {
    /// The geometry's size overflows.
    #[error("the {what} of {items} items of {item_size} bytes is too large")]
    TooLarge {
        /// The kind.
        what: &'static str,
        /// Items asked for.
        items: usize,
        /// Bytes per item.
        item_size: usize,
    },
    /// A system call failed: `step` says which.
    #[error("cannot {step} the {what}'s shared memory: {errno}")]
    Os {
        /// The kind.
        what: &'static str,
        /// What was being done ("size (ftruncate)").
        step: &'static str,
        /// The kernel's answer.
        errno: Errno,
    },
}

impl From<CreateError> for Error {
    fn from(e: CreateError) -> Error {
        match e {
            CreateError::TooLarge { .. } => Error::InvalidArgument(e.to_string()),
            CreateError::Os { what, step, errno } => {
                Error::io(format!("cannot {step} the {what}'s shared memory"), errno)
            }
        }
    }
}

/// Why a region received from another process is refused. Every variant
/// but [`RegionOpenError::Os`] means the peer is not this build of
/// batchcast, or is hostile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegionOpenError {
    /// The file cannot be inspected or mapped.
    #[error("cannot {step} the producer's {what}: {source}")]
    Os {
        /// The kind of region.
        what: &'static str,
        /// What was being done.
        step: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file could shrink under the mapping (SIGBUS on read).
    #[error(
        "the producer's {what} is not sealed against shrinking, so reading it could crash \
         this process (SIGBUS); refusing to map it (a batchcast producer always seals it: is \
         the peer batchcast?)"
    )]
    NotSealed {
        /// The kind of region.
        what: &'static str,
    },
    /// The file is not a region of the expected kind.
    #[error(
        "the producer sent something that is not a batchcast {what} ({len} bytes, first word \
         {magic:#018x}); use the same batchcast version for the producer and its consumers"
    )]
    WrongKind {
        /// The kind expected.
        what: &'static str,
        /// The file's size.
        len: usize,
        /// Its first word, when it has one.
        magic: u64,
    },
    /// A region of another layout version.
    #[error(
        "the producer's {what} has layout version {theirs}, this build reads version {ours}; \
         use the same batchcast version for the producer and its consumers"
    )]
    VersionMismatch {
        /// The kind of region.
        what: &'static str,
        /// This build's region layout version.
        ours: u32,
        /// The region's.
        theirs: u32,
    },
    /// The header disagrees with the file or with what the producer
    /// announced.
    #[error("the producer's {what} is malformed: {why}")]
    Malformed {
        /// The kind of region.
        what: &'static str,
        /// What disagrees.
        why: String,
    },
}

impl RegionOpenError {
    /// The OS error behind this one, if any.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            RegionOpenError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}
