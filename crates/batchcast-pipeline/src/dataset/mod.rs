//! [`Dataset`]: an indexed, labelled list of encoded images on disk.
//!
//! Two layouts are read, both following their Python counterparts so a user
//! gets the same samples and labels they train with:
//! - an ImageFolder tree (`imagefolder.rs`, as torchvision's `ImageFolder`);
//! - WebDataset tar shards (`webdataset.rs`), indexed once at open so any
//!   sample can be read by offset in any order.
//!
//! Opening lists and indexes; it never decodes. Reading one sample's bytes is
//! [`Dataset::read_sample`], safe to call from many threads at once.

mod arrivals;
mod imagefolder;
mod replay;
mod watch;
mod webdataset;
mod writer;

pub use arrivals::{ARRIVALS_FILE, MAX_ARRIVALS_BYTES};
pub use replay::{Replay, MAX_REPLAY_BYTES, MAX_REPLAY_LABEL, MAX_REPLAY_PATH, MAX_REPLAY_ROWS};
pub use watch::{Growth, Watcher, DEFAULT_WATCH_MAX_FILES};
pub use writer::WebDatasetWriter;

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::PipelineError;

/// File-name endings (compared case-insensitively) accepted as images.
pub(crate) const IMAGE_EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

/// Which on-disk layout a [`Dataset`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetKind {
    /// A directory of class sub-folders (torchvision `ImageFolder`).
    ImageFolder,
    /// One or more WebDataset `.tar` shards.
    WebDataset,
}

/// Where one sample's encoded bytes live.
#[derive(Debug, Clone)]
enum Location {
    /// A whole file.
    File(PathBuf),
    /// A byte range of a tar shard.
    Member {
        shard: u32,
        offset: u64,
        len: u64,
        name: Box<str>,
    },
}

/// One sample: where its bytes are, and its label.
#[derive(Debug, Clone)]
struct Entry {
    location: Location,
    label: i64,
}

/// An image classification dataset: `len()` samples, each an encoded JPEG or
/// PNG with an integer label in `0..num_classes()`.
///
/// Sample order is fixed at open: class by class, files sorted (ImageFolder),
/// or shard by shard in member order (WebDataset). Shuffling is the
/// [`Sampler`](crate::Sampler)'s job.
#[derive(Debug, Clone)]
pub struct Dataset {
    root: PathBuf,
    kind: DatasetKind,
    class_names: Vec<String>,
    shards: Vec<PathBuf>,
    entries: Vec<Entry>,
}

impl Dataset {
    /// Opens the dataset at `path`:
    /// - a `.tar` file: one WebDataset shard;
    /// - a directory with sub-directories: an ImageFolder tree (each
    ///   sub-directory is a class);
    /// - a directory with `*.tar` files and no sub-directory: WebDataset shards,
    ///   read in sorted name order.
    ///
    /// # Errors
    /// A missing path, a path of another kind, no classes, no images, a
    /// directory or shard that cannot be read, a corrupt or truncated shard, a
    /// WebDataset sample without image or `.cls` label.
    pub fn open(path: &Path) -> Result<Dataset, PipelineError> {
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(PipelineError::NotFound { path: path.into() })
            }
            Err(e) => return Err(PipelineError::io(path, e)),
        };
        if meta.is_file() {
            return if has_extension(path, "tar") {
                Self::open_shards(path, vec![path.to_path_buf()])
            } else {
                Err(PipelineError::NotADataset { path: path.into() })
            };
        }
        if !meta.is_dir() {
            return Err(PipelineError::NotADataset { path: path.into() });
        }
        let mut has_subdir = false;
        let mut tars = Vec::new();
        for item in fs::read_dir(path).map_err(|e| PipelineError::io(path, e))? {
            let item = item.map_err(|e| PipelineError::io(path, e))?;
            let p = item.path();
            // fs::metadata follows symlinks, as os.scandir().is_dir() does.
            match fs::metadata(&p) {
                Ok(m) if m.is_dir() => has_subdir = true,
                Ok(m) if m.is_file() && has_extension(&p, "tar") => tars.push(p),
                _ => {}
            }
        }
        if !has_subdir && !tars.is_empty() {
            tars.sort_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
            return Self::open_shards(path, tars);
        }
        let (class_names, entries) = imagefolder::index(path)?;
        Ok(Dataset {
            root: path.to_path_buf(),
            kind: DatasetKind::ImageFolder,
            class_names,
            shards: Vec::new(),
            entries,
        })
    }

    fn open_shards(root: &Path, shards: Vec<PathBuf>) -> Result<Dataset, PipelineError> {
        let entries = webdataset::index(root, &shards)?;
        let max_label = entries.iter().map(|e| e.label).max().unwrap_or(-1);
        let class_names = (0..=max_label).map(|c| c.to_string()).collect();
        Ok(Dataset {
            root: root.to_path_buf(),
            kind: DatasetKind::WebDataset,
            class_names,
            shards,
            entries,
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no sample (never the case for an opened dataset).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of classes: class folders (empty ones included, as torchvision
    /// counts them), or the largest WebDataset label plus one.
    pub fn num_classes(&self) -> usize {
        self.class_names.len()
    }

    /// Class names in label order: folder names, or `"0"`, `"1"`, ... for
    /// WebDataset.
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The label of sample `index`, or `None` past the end.
    pub fn label(&self, index: usize) -> Option<i64> {
        self.entries.get(index).map(|e| e.label)
    }

    /// The layout this dataset was read from.
    pub fn kind(&self) -> DatasetKind {
        self.kind
    }

    /// The path the dataset was opened from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Human-readable location of sample `index` (a file path, or
    /// `shard.tar:member` for WebDataset), for messages; `None` past the end.
    pub fn sample_name(&self, index: usize) -> Option<String> {
        let entry = self.entries.get(index)?;
        Some(match &entry.location {
            Location::File(p) => p.display().to_string(),
            Location::Member { shard, name, .. } => {
                let shard = self.shards.get(*shard as usize).map(|s| s.display());
                match shard {
                    Some(s) => format!("{s}:{name}"),
                    None => name.to_string(),
                }
            }
        })
    }

    /// Reads the encoded bytes of sample `index` into `buf` (cleared first).
    ///
    /// # Errors
    /// An out-of-range index, or the I/O error met (file gone, unreadable,
    /// shard shorter than its index says).
    pub fn read_sample(&self, index: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        let entry = self.entries.get(index).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "sample index out of range")
        })?;
        let too_large = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("larger than {MAX_SAMPLE_BYTES} bytes: not an image this pipeline decodes"),
            )
        };
        match &entry.location {
            Location::File(p) => {
                // Bounded while reading, not by its size beforehand: a FIFO
                // or a file still growing says nothing true of its size.
                File::open(p)?.take(MAX_SAMPLE_BYTES + 1).read_to_end(buf)?;
                if buf.len() as u64 > MAX_SAMPLE_BYTES {
                    buf.clear();
                    return Err(too_large());
                }
            }
            Location::Member {
                shard, offset, len, ..
            } => {
                let path = self.shards.get(*shard as usize).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "shard index out of range")
                })?;
                if *len > MAX_SAMPLE_BYTES {
                    return Err(too_large());
                }
                let len = usize::try_from(*len)
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "member too large"))?;
                buf.resize(len, 0);
                File::open(path)?.read_exact_at(buf, *offset)?;
            }
        }
        Ok(())
    }
}

/// The largest encoded sample read (an image file, a shard member). The
/// default pixel budget (PIL's, 89.5 Mpx) as an RGBA PNG stored raw is
/// 358 MB, compressed images far less; a larger file is not an image this
/// pipeline would decode, or one that never ends (a FIFO).
pub const MAX_SAMPLE_BYTES: u64 = 512 << 20;

/// The text of the CSV `csv`, at most `max_bytes` long, whose first line
/// is `header`; `bad(line, reason)` is the error for a file that is not
/// (line 0: the whole file).
fn read_csv(
    csv: &Path,
    max_bytes: u64,
    header: &str,
    bad: impl Fn(usize, String) -> PipelineError,
) -> Result<String, PipelineError> {
    let mut text = String::new();
    File::open(csv)
        .and_then(|f| f.take(max_bytes + 1).read_to_string(&mut text))
        .map_err(|e| PipelineError::io(csv, e))?;
    if text.len() as u64 > max_bytes {
        return Err(bad(
            0,
            format!("the file is larger than {max_bytes} bytes; split it"),
        ));
    }
    match text.lines().next() {
        Some(h) if h.trim_end() == header => Ok(text),
        found => Err(bad(
            1,
            format!(
                "the header is {:?}; the first line must be {header}",
                found.unwrap_or("")
            ),
        )),
    }
}

/// The rows of a CSV's text after its header, with their line numbers
/// (from 1, the header being 1), blank lines left out.
fn csv_rows(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .skip(1)
        .map(|(i, line)| (i + 1, line.trim_end_matches('\r')))
        .filter(|(_, line)| !line.trim().is_empty())
}

/// True when `path`'s extension is `ext`, ignoring letter case.
fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_check_ignores_case() {
        assert!(has_extension(Path::new("a/b.TAR"), "tar"));
        assert!(has_extension(Path::new("b.tar"), "tar"));
        assert!(!has_extension(Path::new("b.tar.gz"), "tar"));
        assert!(!has_extension(Path::new("tar"), "tar"));
    }

    #[test]
    fn a_sample_that_never_ends_is_refused_at_the_bound() {
        // An ImageFolder entry that is no image file: reading it whole would
        // take every byte of memory.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("cat")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("cat/endless.jpg")).unwrap();
        let ds = Dataset::open(dir.path()).unwrap();
        let mut buf = Vec::new();
        let err = ds.read_sample(0, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(err.to_string().contains("larger than"), "{err}");
        assert!(buf.is_empty());
    }

    #[test]
    fn missing_path_is_not_found() {
        let err = Dataset::open(Path::new("/definitely/not/here")).unwrap_err();
        assert!(matches!(err, PipelineError::NotFound { .. }), "{err}");
    }
}
