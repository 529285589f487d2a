//! The crate's error type. Every message names the path or value at fault and
//! says what to do about it.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the pipeline: opening a dataset, configuring
/// a transform, filling a batch, generating a dataset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The dataset path does not exist.
    #[error(
        "dataset path {path} does not exist; pass an ImageFolder directory (one sub-folder per \
         class), a WebDataset .tar shard, or a directory of .tar shards"
    )]
    NotFound {
        /// The path that was given.
        path: PathBuf,
    },

    /// The dataset path is neither a directory nor a `.tar` file.
    #[error(
        "dataset path {path} is neither a directory nor a .tar file; pass an ImageFolder \
         directory or a WebDataset .tar shard (or a directory of shards)"
    )]
    NotADataset {
        /// The path that was given.
        path: PathBuf,
    },

    /// An ImageFolder root without any class sub-folder.
    #[error(
        "no class folders in {path}: an ImageFolder dataset needs one sub-folder per class, \
         each holding .jpg/.jpeg/.png files (or put WebDataset .tar shards there)"
    )]
    NoClasses {
        /// The dataset root.
        path: PathBuf,
    },

    /// The dataset holds no image at all.
    #[error(
        "no images found under {path}: accepted files are .jpg, .jpeg and .png (any letter \
         case) in ImageFolder class folders, or .jpg/.jpeg/.png + .cls members in WebDataset \
         shards"
    )]
    Empty {
        /// The dataset root.
        path: PathBuf,
    },

    /// A watched dataset grew past the bound on what a watch keeps track of.
    #[error(
        "{path} holds more than {limit} {what}: watching it keeps every file's arrival time in \
         memory and checks every folder at each epoch; raise the limit (--watch-max-files) or \
         serve a part of it"
    )]
    TooManyFiles {
        /// The dataset root.
        path: PathBuf,
        /// `files` or `folders`.
        what: &'static str,
        /// The bound.
        limit: usize,
    },

    /// A watched dataset's arrival-time sidecar (`batchcast-arrivals.csv`)
    /// that cannot be read.
    #[error(
        "arrival times {path}:{line}: {reason}; each line after the header path,timestamp \
         is a file (or shard) relative to the dataset's folder and seconds since the Unix epoch"
    )]
    BadArrivals {
        /// The CSV file.
        path: PathBuf,
        /// The line at fault (from 1; 0 for the whole file).
        line: usize,
        /// What is wrong with it.
        reason: String,
    },

    /// A replay trace (`--replay FILE.csv`) that cannot be replayed.
    #[error(
        "replay trace {path}:{line}: {reason}; each line after the header \
         path,label,timestamp is a file relative to the CSV's folder, a class index and \
         seconds since the Unix epoch"
    )]
    BadReplay {
        /// The CSV file.
        path: PathBuf,
        /// The line at fault (from 1; 0 for the whole file).
        line: usize,
        /// What is wrong with it.
        reason: String,
    },

    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}; check that it exists and that this user may read it")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// A file or directory could not be written (dataset generation).
    #[error("cannot write {path}: {source}; check free space and permissions")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// A WebDataset shard is truncated or its tar structure is corrupt.
    #[error(
        "WebDataset shard {shard} is truncated or corrupt at byte offset {offset}: {detail}; \
         re-create or re-download this shard"
    )]
    CorruptShard {
        /// The shard file.
        shard: PathBuf,
        /// Byte offset in the shard where the problem was found.
        offset: u64,
        /// What was wrong.
        detail: String,
    },

    /// A WebDataset sample without a `.cls` member.
    #[error(
        "sample {key:?} in WebDataset shard {shard} has no .cls member; every sample needs a \
         KEY.cls file holding its integer class label next to its KEY.jpg/.jpeg/.png image"
    )]
    MissingLabel {
        /// The shard file.
        shard: PathBuf,
        /// The sample key (member name without extension).
        key: String,
    },

    /// A WebDataset sample without an image member.
    #[error(
        "sample {key:?} in WebDataset shard {shard} has no image; every sample needs a \
         KEY.jpg, KEY.jpeg or KEY.png member next to its KEY.cls label"
    )]
    MissingImage {
        /// The shard file.
        shard: PathBuf,
        /// The sample key.
        key: String,
    },

    /// A `.cls` member that does not hold a non-negative integer.
    #[error(
        "label of sample {key:?} in WebDataset shard {shard} is {text:?}, not a non-negative \
         integer; write the class index as decimal text in KEY.cls"
    )]
    BadLabel {
        /// The shard file.
        shard: PathBuf,
        /// The sample key.
        key: String,
        /// The (truncated) text found.
        text: String,
    },

    /// A sample could not be read or decoded (with [`OnError::Fail`](crate::OnError::Fail)).
    #[error(
        "sample {index} ({path}) failed: {reason}; fix or remove this file, or use \
         OnError::Skip to skip bad samples"
    )]
    Sample {
        /// Index of the sample in the dataset.
        index: usize,
        /// Where the sample lives (a file path, or `shard.tar:member`).
        path: String,
        /// What went wrong.
        reason: String,
    },

    /// A sample index past the end of the dataset.
    #[error("sample index {index} is out of range: the dataset has {len} samples")]
    IndexOutOfRange {
        /// The index that was asked for.
        index: usize,
        /// The dataset's length.
        len: usize,
    },

    /// An output buffer too small for the batch.
    #[error(
        "{what} buffer too small: {needed} needed for this batch, {got} given; size it with \
         Pipeline::image_bytes() * batch rows"
    )]
    BufferTooSmall {
        /// Which buffer (`images` or `labels`).
        what: &'static str,
        /// Elements needed.
        needed: usize,
        /// Elements given.
        got: usize,
    },

    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A directory exists that this crate did not generate and will not overwrite.
    #[error(
        "{path} exists and is not a batchcast-generated dataset, so it was left alone; pick \
         another directory or delete this one"
    )]
    RefuseOverwrite {
        /// The directory.
        path: PathBuf,
    },

    /// The worker thread pool could not be started.
    #[error("cannot start {threads} pipeline worker threads: {detail}; try fewer workers")]
    ThreadPool {
        /// Threads asked for.
        threads: usize,
        /// The underlying error.
        detail: String,
    },
}

impl PipelineError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        PipelineError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn write(path: impl Into<PathBuf>, source: io::Error) -> Self {
        PipelineError::Write {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_path_and_the_fix() {
        let e = PipelineError::NotFound {
            path: PathBuf::from("/data/imagenet"),
        };
        let m = e.to_string();
        assert!(m.contains("/data/imagenet"), "{m}");
        assert!(m.contains("ImageFolder"), "{m}");
        let e = PipelineError::Empty {
            path: PathBuf::from("/d"),
        };
        assert!(e.to_string().contains(".jpeg"));
    }
}
