//! The producer's state file: where a producer restarted under the same
//! name resumes its stream.
//!
//! `NAME.state` lies beside the socket (mode 0600). It holds the stream's
//! identity (an opaque text of `key=value` lines from the caller: what
//! changes the sample sequence, such as the dataset, the seed and the
//! options), the resume point, the caller's payload for it if it notes
//! them (see [`super::payload`]), and the slot size, so that a restart
//! makes its arena at once and welcomes reattaching consumers before its
//! first batch. The resume point is an epoch and a row position in it that
//! every consumer has already received (the low-water mark of the
//! consumers' positions; a lower one is safe, since reattaching consumers
//! skip what they have, a higher one would lose rows, so it is never
//! written). It is replaced atomically (a temporary file, fsync, rename,
//! fsync of the directory) once per interval while it moves (1 s by
//! default), and at epoch boundaries no more often than a tenth of that: a
//! count of batches would not do, since an fsync per 64 batches cost a
//! producer of 57,000 batches/s 90 % of its rate (`batchcast bench
//! --durable`). A stale point costs a restart only rows to skip.
//!
//! A file that cannot be read back whole (truncated, corrupt: the last line
//! is a checksum of the others; another format version) is refused, as is
//! one whose identity differs from the caller's, with an error that names
//! the file or the differing keys and the way to start afresh. Nothing is
//! reset silently. The refusal is also left in `NAME.refused` for the
//! consumers waiting to reattach, which fail with it
//! ([`read_refusal`]); a producer that starts removes it.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod format;

use super::payload::MAX_PAYLOAD;
use super::Producer;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use format::{parse, render};

/// Largest identity accepted, in bytes.
pub const MAX_IDENTITY: usize = 4096;
/// Largest state (or refusal) file read, in bytes: a payload and 16 KiB.
const MAX_FILE: u64 = MAX_PAYLOAD as u64 + 16 * 1024;

/// How a producer keeps its stream resumable (`ProducerOptions::durable`).
#[derive(Debug, Clone)]
pub struct Durability {
    /// What identifies the stream, as `key=value` lines (at most
    /// [`MAX_IDENTITY`] bytes): a restart with another identity is refused,
    /// naming the keys that differ.
    pub identity: String,
    /// Discard a state file found for this name and start afresh.
    pub fresh: bool,
    /// Time between two writes of the resume point while it moves (an
    /// epoch boundary is written once a tenth of it has passed).
    pub interval: Duration,
}

impl Durability {
    /// A stream identified by `identity`, resumed if a state file is found,
    /// written once a second while it moves.
    pub fn new(identity: impl Into<String>) -> Self {
        Durability {
            identity: identity.into(),
            fresh: false,
            interval: Duration::from_secs(1),
        }
    }
}

/// Where a restarted producer resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumePoint {
    /// The epoch to begin with.
    pub epoch: u64,
    /// Rows of that epoch (in its order) every consumer has received: the
    /// epoch resumes with the row at this position.
    pub row: u64,
    /// Consumers attached when it was written: those that will try to
    /// reattach.
    pub consumers: u32,
}

impl ResumePoint {
    /// The earlier of the two positions (with `self`'s consumers).
    pub(crate) fn min_position(self, other: ResumePoint) -> ResumePoint {
        if (other.epoch, other.row) < (self.epoch, self.row) {
            ResumePoint {
                consumers: self.consumers,
                ..other
            }
        } else {
            self
        }
    }
}

/// What a state file holds beside the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Saved {
    /// Where the stream resumes.
    pub point: ResumePoint,
    /// The caller's payload for that point.
    pub payload: Option<String>,
    /// The predecessor's bytes per slot, once it had an arena.
    pub slot_size: Option<u64>,
}

impl Saved {
    /// The predecessor's bytes per slot, where this machine can address it.
    pub fn slot_size(&self) -> Option<usize> {
        self.slot_size.and_then(|n| usize::try_from(n).ok())
    }
}

/// The open state file of a durable producer.
#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
    identity: String,
    interval: Duration,
    written: Option<Instant>,
    last: Option<ResumePoint>,
}

impl StateFile {
    /// Opens the state of `endpoint`: what it saved if a state file of the
    /// same stream is there, None if there is none (or `fresh`).
    pub fn open(
        endpoint: &Endpoint,
        durability: &Durability,
    ) -> Result<(StateFile, Option<Saved>)> {
        let name = endpoint.name();
        if durability.identity.len() > MAX_IDENTITY {
            return Err(Error::InvalidArgument(format!(
                "the stream identity is {} bytes long; at most {MAX_IDENTITY} are kept",
                durability.identity.len()
            )));
        }
        let path = state_path(endpoint);
        let found = if durability.fresh {
            remove(&path)?;
            None
        } else {
            read_bounded(&path)?
        };
        let resume = match found {
            None => None,
            Some(text) => {
                let refuse = |e: Error| {
                    note_refusal(endpoint, &e.to_string());
                    e
                };
                let (identity, saved) = parse(&text).map_err(|why| {
                    refuse(Error::StateFile {
                        name: name.to_owned(),
                        path: path.clone(),
                        why: why.to_string(),
                    })
                })?;
                let differences = differences(&identity, &durability.identity);
                if !differences.is_empty() {
                    return Err(refuse(Error::StreamMismatch {
                        name: name.to_owned(),
                        path,
                        differences,
                    }));
                }
                Some(saved)
            }
        };
        let file = StateFile {
            path,
            identity: durability.identity.clone(),
            interval: durability.interval,
            written: None,
            last: resume.as_ref().map(|s| s.point),
        };
        Ok((file, resume))
    }

    /// True when `point` is to be written now: it moved, and the interval
    /// passed since the last write (a tenth of it at `boundary`, an
    /// epoch's edge).
    pub fn due(&self, point: &ResumePoint, boundary: bool) -> bool {
        let wait = if boundary {
            self.interval / 10
        } else {
            self.interval
        };
        self.last.as_ref() != Some(point) && self.written.is_none_or(|t| t.elapsed() >= wait)
    }

    /// Replaces the file with one holding `saved`, atomically.
    pub fn write(&mut self, saved: &Saved) -> Result<()> {
        let point = saved.point;
        let text = render(&self.identity, saved);
        let tmp = self.path.with_extension("state.tmp");
        let context = |what: &str| format!("cannot {what} the state file {}", tmp.display());
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| Error::io(context("create"), e))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io(context("write"), e))?;
        fs::rename(&tmp, &self.path).map_err(|e| Error::io(context("rename"), e))?;
        if let Some(dir) = self.path.parent() {
            // The rename itself is durable once the directory is synced.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        self.written = Some(Instant::now());
        self.last = Some(point);
        Ok(())
    }

    /// The stream ended cleanly: nothing is left to resume.
    pub fn finished(self) {
        let _ = fs::remove_file(&self.path);
    }
}

impl Producer {
    /// Where this producer resumed the stream of a predecessor under its
    /// name (from its state file; see
    /// [`ProducerOptions::durable`](super::ProducerOptions::durable)): its
    /// first epoch is `epoch`, and begins with the row at position `row`,
    /// which the caller publishes first. None when it starts afresh.
    pub fn resumed(&self) -> Option<ResumePoint> {
        self.resumed
    }

    /// Writes the resume point to the state file if it is due (`boundary`:
    /// at an epoch's edge, always if it moved).
    pub(super) fn save_state(&mut self, boundary: bool) -> Result<()> {
        let Some(file) = self.state_file.as_mut() else {
            return Ok(());
        };
        if self.published == 0 && self.resumed.is_none() {
            // Nothing to resume yet: a restart starts the same way.
            return Ok(());
        }
        let (low, consumers) = {
            let state = self.shared.lock();
            (state.low_water(), state.consumer_count() as u32)
        };
        let Some((epoch, row)) = low else {
            return Ok(());
        };
        let mut point = ResumePoint {
            epoch,
            row,
            consumers,
        };
        if let Some(floor) = self.floor {
            if consumers >= floor.consumers {
                self.floor = None;
            } else {
                point = floor.min_position(point);
            }
        }
        let Some((point, payload)) = self.payloads.settle(point) else {
            return Ok(()); // no payload known there yet: keep the older point
        };
        if file.due(&point, boundary) {
            let slot_size = self.arena.as_ref().map(|a| a.slot_size() as u64);
            file.write(&Saved {
                point,
                payload,
                slot_size,
            })?;
        }
        Ok(())
    }
}

/// `NAME.state` beside the socket.
pub(crate) fn state_path(endpoint: &Endpoint) -> PathBuf {
    endpoint.dir().join(format!("{}.state", endpoint.name()))
}

fn refusal_path(endpoint: &Endpoint) -> PathBuf {
    endpoint.dir().join(format!("{}.refused", endpoint.name()))
}

/// A producer took the name: a refusal left by an earlier one is stale.
pub(crate) fn clear_refusal(endpoint: &Endpoint) {
    let _ = fs::remove_file(refusal_path(endpoint));
}

/// Why the last producer started under this name refused to resume its
/// stream, if it did (for the consumers waiting to reattach).
pub(crate) fn read_refusal(endpoint: &Endpoint) -> Option<String> {
    read_bounded(&refusal_path(endpoint)).ok().flatten()
}

fn note_refusal(endpoint: &Endpoint, message: &str) {
    let _ = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(refusal_path(endpoint))
        .and_then(|mut f| f.write_all(message.as_bytes()));
}

fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("cannot remove {}", path.display()), e)),
    }
}

/// The file's text, read up to [`MAX_FILE`] bytes; None if it is absent.
fn read_bounded(path: &Path) -> Result<Option<String>> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), e)),
    };
    let mut bytes = Vec::new();
    f.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    // An oversized or non-UTF-8 file fails the parse with a message.
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The keys whose values differ between two identities, as
/// `key: then A, now B`, joined by "; " (empty when they are the same).
pub fn differences(then: &str, now: &str) -> String {
    let pairs = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap_or((l, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect()
    };
    let (then, now) = (pairs(then), pairs(now));
    let find = |list: &[(String, String)], key: &str| {
        list.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    };
    let mut keys: Vec<&String> = then.iter().chain(&now).map(|(k, _)| k).collect();
    keys.dedup();
    let mut seen = std::collections::BTreeSet::new();
    keys.into_iter()
        .filter(|k| seen.insert(k.as_str()))
        .filter_map(|k| {
            let (a, b) = (find(&then, k), find(&now, k));
            (a != b).then(|| {
                let show = |v: Option<String>| v.unwrap_or_else(|| "(none)".into());
                format!("{k}: then {}, now {}", show(a), show(b))
            })
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point() -> ResumePoint {
        ResumePoint {
            epoch: 1,
            row: 350,
            consumers: 3,
        }
    }

    fn saved(payload: Option<&str>) -> Saved {
        Saved {
            point: point(),
            payload: payload.map(str::to_owned),
            slot_size: None,
        }
    }

    fn endpoint(dir: &Path) -> Endpoint {
        Endpoint::in_dir("durable", dir).unwrap()
    }

    #[test]
    fn a_written_point_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let d = Durability::new("data=/x\nseed=7");
        let (mut f, none) = StateFile::open(&endpoint(dir.path()), &d).unwrap();
        assert_eq!(none, None);
        f.write(&saved(None)).unwrap();
        let path = state_path(&endpoint(dir.path()));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (mut f, got) = StateFile::open(&endpoint(dir.path()), &d).unwrap();
        assert_eq!(got, Some(saved(None)));
        let with = Saved {
            slot_size: Some(8192),
            ..saved(Some("{\"k\": [1, 2]}"))
        };
        f.write(&with).unwrap();
        let (_, got) = StateFile::open(&endpoint(dir.path()), &d).unwrap();
        assert_eq!(got, Some(with));
    }

    #[test]
    fn another_seed_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let ep = endpoint(dir.path());
        let (mut f, _) = StateFile::open(&ep, &Durability::new("data=/x\nseed=7")).unwrap();
        f.write(&saved(None)).unwrap();
        let err = StateFile::open(&ep, &Durability::new("data=/x\nseed=8"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("seed: then 7, now 8"), "{err}");
        assert!(!err.contains("data:"), "{err}");
        assert!(err.contains("--fresh"), "{err}");
        assert_eq!(read_refusal(&ep).as_deref(), Some(err.as_str()));
        // --fresh starts afresh, and a producer that takes the name clears
        // the refusal.
        let mut fresh = Durability::new("data=/x\nseed=8");
        fresh.fresh = true;
        let opts = super::super::ProducerOptions {
            dir: Some(dir.path().to_owned()),
            durable: Some(fresh),
            ..Default::default()
        };
        let producer = Producer::create("durable", opts).unwrap();
        assert_eq!(producer.resumed(), None);
        assert_eq!(read_refusal(&ep), None);
    }

    #[test]
    fn damaged_files_are_refused_not_reset() {
        let dir = tempfile::tempdir().unwrap();
        let ep = endpoint(dir.path());
        let d = Durability::new("seed=7");
        let (mut f, _) = StateFile::open(&ep, &d).unwrap();
        f.write(&saved(None)).unwrap();
        let path = state_path(&ep);
        let whole = fs::read_to_string(&path).unwrap();
        let cases = [
            (whole[..whole.len() / 2].to_owned(), "truncated"),
            (whole.replace("row 350", "row 950"), "corrupt"),
            (
                whole.replace("batchcast-state 1", "batchcast-state 9"),
                "version",
            ),
            ("x".repeat(MAX_FILE as usize + 1), "larger than"),
        ];
        for (size, why) in [(1, "slot size 1 "), (u64::MAX, "at most")] {
            f.write(&Saved {
                slot_size: Some(size),
                ..saved(None)
            })
            .unwrap();
            let err = StateFile::open(&ep, &d).unwrap_err().to_string();
            assert!(err.contains(why) && err.contains("--fresh"), "{err}");
        }
        for (text, why) in cases {
            fs::write(&path, &text).unwrap();
            let err = StateFile::open(&ep, &d).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
            assert!(
                err.contains("--fresh") && err.contains("durable.state"),
                "{err}"
            );
            // Still there: nothing was reset.
            assert_eq!(fs::read_to_string(&path).unwrap(), text);
        }
    }

    #[test]
    fn writes_are_due_on_moves_once_the_interval_passed_or_a_tenth_at_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Durability::new("seed=7");
        d.interval = Duration::from_secs(3600);
        let (mut f, _) = StateFile::open(&endpoint(dir.path()), &d).unwrap();
        assert!(f.due(&point(), false), "never written");
        f.write(&saved(None)).unwrap();
        assert!(!f.due(&point(), true), "unchanged");
        let moved = ResumePoint {
            row: 400,
            ..point()
        };
        assert!(!f.due(&moved, false), "within the interval");
        assert!(!f.due(&moved, true), "a boundary within a tenth of it");
        d.interval = Duration::from_millis(50);
        let (mut f, _) = StateFile::open(&endpoint(dir.path()), &d).unwrap();
        f.write(&saved(None)).unwrap();
        std::thread::sleep(Duration::from_millis(6));
        assert!(f.due(&moved, true), "a boundary after a tenth of it");
        std::thread::sleep(Duration::from_millis(45));
        assert!(f.due(&moved, false), "after the interval");
    }
}
