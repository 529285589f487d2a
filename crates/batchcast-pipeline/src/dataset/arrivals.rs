//! Arrival times from a sidecar: [`ARRIVALS_FILE`] in a watched dataset's
//! folder, a CSV of `path,timestamp` rows, gives the samples of the files
//! (or shards) it names their arrival time instead of the file's mtime.
//!
//! - `path` is relative to the dataset's folder (it may hold commas: the
//!   last field is split off first); `timestamp` is seconds since the Unix
//!   epoch (a decimal number). A file it does not name keeps its mtime; a
//!   row for a file not (yet) there is kept for when it arrives; the last
//!   row of a path counts.
//! - Bounded before anything is kept: the file's size
//!   ([`MAX_ARRIVALS_BYTES`]), its rows (the watch's file limit), a path's
//!   length. A bad row is refused with its line number; so is a path that
//!   is absolute or holds `..` (it would name a file outside the folder).
//! - Fields are not quoted: a path is taken as written, quotes included.
//! - Read again when its mtime or size moves, before a rescan looks at
//!   new files: append the rows of new files before (or as) they are
//!   renamed in.

use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use crate::PipelineError;

/// The sidecar's name in the dataset's folder.
pub const ARRIVALS_FILE: &str = "batchcast-arrivals.csv";
/// Largest sidecar read, in bytes.
pub const MAX_ARRIVALS_BYTES: u64 = 256 << 20;
/// Longest `path` of a row, in bytes.
const MAX_PATH: usize = 4096;
/// The header the sidecar starts with.
const HEADER: &str = "path,timestamp";

/// The sidecar of one dataset folder, as last read.
#[derive(Debug)]
pub(crate) struct Arrivals {
    path: PathBuf,
    root: PathBuf,
    /// Its mtime and size when read (None: not there).
    seen: Option<(SystemTime, u64)>,
    times: HashMap<PathBuf, f64>,
    max_rows: usize,
}

fn bad(path: &Path, line: usize, reason: impl Into<String>) -> PipelineError {
    PipelineError::BadArrivals {
        path: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

impl Arrivals {
    /// The sidecar of the folder `root` (read if it is there), holding at
    /// most `max_rows` rows.
    pub fn open(root: &Path, max_rows: usize) -> Result<Arrivals, PipelineError> {
        let mut a = Arrivals {
            path: root.join(ARRIVALS_FILE),
            root: root.to_path_buf(),
            seen: None,
            times: HashMap::new(),
            max_rows,
        };
        a.refresh()?;
        Ok(a)
    }

    /// Reads the sidecar again if its mtime or size moved since the last
    /// read.
    pub fn refresh(&mut self) -> Result<(), PipelineError> {
        let seen = fs::metadata(&self.path)
            .and_then(|m| Ok((m.modified()?, m.len())))
            .ok();
        if seen == self.seen {
            return Ok(());
        }
        self.times = match seen {
            None => HashMap::new(),
            Some(_) => self.read()?,
        };
        self.seen = seen;
        Ok(())
    }

    /// The arrival time the sidecar gives the file `path`, if it names it.
    pub fn time(&self, path: &Path) -> Option<f64> {
        self.times.get(path).copied()
    }

    fn read(&self) -> Result<HashMap<PathBuf, f64>, PipelineError> {
        let csv = &self.path;
        let text = super::read_csv(csv, MAX_ARRIVALS_BYTES, HEADER, |line, why| {
            bad(csv, line, why)
        })?;
        let mut times = HashMap::new();
        for (n, line) in super::csv_rows(&text) {
            if times.len() >= self.max_rows {
                let why = format!("more than {} rows (the watch's file limit)", self.max_rows);
                return Err(bad(csv, n, why));
            }
            let (path, time) = self.row(n, line)?;
            times.insert(path, time);
        }
        Ok(times)
    }

    /// One data line (`line` numbered from 1, the header being 1).
    fn row(&self, line: usize, text: &str) -> Result<(PathBuf, f64), PipelineError> {
        let csv = &self.path;
        let Some((path, time)) = text.rsplit_once(',') else {
            return Err(bad(
                csv,
                line,
                format!("{HEADER} has 2 fields, not {text:?}"),
            ));
        };
        if path.is_empty() || path.len() > MAX_PATH {
            let why = format!("the path is empty or longer than {MAX_PATH} bytes");
            return Err(bad(csv, line, why));
        }
        let relative = Path::new(path);
        if relative.is_absolute() || relative.has_root() {
            let why = format!("{path:?} is absolute; write it relative to the dataset's folder");
            return Err(bad(csv, line, why));
        }
        if relative.components().any(|c| c == Component::ParentDir) {
            let why = format!("{path:?} leaves the dataset's folder (`..`); name a file inside it");
            return Err(bad(csv, line, why));
        }
        match time.trim().parse::<f64>() {
            Ok(t) if t.is_finite() && t >= 0.0 => Ok((self.root.join(path), t)),
            _ => Err(bad(
                csv,
                line,
                format!(
                    "the timestamp {time:?} is not seconds since the Unix epoch (1764000000.5)"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_give_times_and_bad_rows_name_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut a = Arrivals::open(root, 10).unwrap();
        assert_eq!(a.time(&root.join("a/x.jpg")), None, "no sidecar");
        let csv = root.join(ARRIVALS_FILE);
        fs::write(
            &csv,
            "path,timestamp\na/x.jpg,100.5\n\nb,c.jpg,7\na/x.jpg,200\n",
        )
        .unwrap();
        a.refresh().unwrap();
        assert_eq!(
            a.time(&root.join("a/x.jpg")),
            Some(200.0),
            "the last row counts"
        );
        assert_eq!(a.time(&root.join("b,c.jpg")), Some(7.0));
        for (text, line, why) in [
            ("path,time\n", 1, "the first line must be path,timestamp"),
            ("path,timestamp\na.jpg,1\nb.jpg\n", 3, "2 fields"),
            ("path,timestamp\n/abs.jpg,1\n", 2, "is absolute"),
            (
                "path,timestamp\n../out.jpg,1\n",
                2,
                "leaves the dataset's folder",
            ),
            (
                "path,timestamp\na/../../out.jpg,1\n",
                2,
                "leaves the dataset's folder",
            ),
            ("path,timestamp\na.jpg,soon\n", 2, "not seconds"),
            ("path,timestamp\na.jpg,-1\n", 2, "not seconds"),
        ] {
            fs::write(&csv, text).unwrap();
            let err = Arrivals::open(root, 10).unwrap_err().to_string();
            let at = format!("{}:{line}: ", csv.display());
            assert!(err.contains(&at) && err.contains(why), "{text:?}: {err}");
        }
        let many: String = (0..4).map(|i| format!("{i}.jpg,1\n")).collect();
        fs::write(&csv, format!("path,timestamp\n{many}")).unwrap();
        let err = Arrivals::open(root, 3).unwrap_err().to_string();
        assert!(err.contains(":5: more than 3 rows"), "{err}");
    }
}
