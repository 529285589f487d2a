//! A dataset replayed as if it arrived: [`Replay`] reads a CSV trace of
//! `path,label,timestamp` rows and appends each row's sample to the
//! [`Dataset`] once a replay clock has passed its timestamp, with the
//! timestamp as its arrival time (as [`Watcher`](super::Watcher) appends
//! new files with their mtime).
//!
//! - The header is `path,label,timestamp`. `path` is relative to the
//!   CSV's folder (it may hold commas: the last two fields are split off
//!   first); `label` is a class index, `0..MAX_REPLAY_LABEL`; `timestamp`
//!   is seconds since the Unix epoch (a decimal number, fractions
//!   allowed). Rows need not be in time order: a stable sort by timestamp
//!   gives the arrival order (rows of one timestamp keep the file's order).
//! - Bounded before anything is kept: the file's size, the rows, a path's
//!   length, a label. A bad row (a missing field, an absolute path, a file
//!   that is not there, a label or timestamp that is not a number) is
//!   refused with its line number.
//! - The dataset starts with the rows of the first timestamp; indices are
//!   stable, later rows are appended in arrival order.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{Dataset, DatasetKind, Entry, Growth, Location};
use crate::PipelineError;

/// Largest replay CSV read, in bytes.
pub const MAX_REPLAY_BYTES: u64 = 1 << 30;
/// Most rows of a replay CSV.
pub const MAX_REPLAY_ROWS: usize = 10_000_000;
/// Longest `path` of a row, in bytes.
pub const MAX_REPLAY_PATH: usize = 4096;
/// Labels are below this.
pub const MAX_REPLAY_LABEL: i64 = 1 << 20;

/// The header a replay CSV starts with.
const HEADER: &str = "path,label,timestamp";

/// One row of the trace.
#[derive(Debug, Clone)]
struct Row {
    path: PathBuf,
    label: i64,
    time: f64,
}

/// A trace being replayed into a dataset; see the module's documentation.
#[derive(Debug)]
pub struct Replay {
    /// The rows, in arrival order.
    rows: Vec<Row>,
    /// Rows already in the dataset (a prefix of `rows`).
    joined: usize,
}

fn bad(path: &Path, line: usize, reason: impl Into<String>) -> PipelineError {
    PipelineError::BadReplay {
        path: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

/// Parses one data line (`line` numbered from 1, the header being 1).
fn parse_row(csv: &Path, root: &Path, line: usize, text: &str) -> Result<Row, PipelineError> {
    let mut fields = text.rsplitn(3, ',');
    let (Some(time), Some(label), Some(path)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err(bad(
            csv,
            line,
            format!("{HEADER} has 3 fields, not {text:?}"),
        ));
    };
    if path.is_empty() {
        return Err(bad(csv, line, "the path is empty"));
    }
    if path.len() > MAX_REPLAY_PATH {
        return Err(bad(
            csv,
            line,
            format!("the path is longer than {MAX_REPLAY_PATH} bytes"),
        ));
    }
    let rel = Path::new(path);
    if rel.is_absolute() {
        return Err(bad(
            csv,
            line,
            format!("{path:?} is absolute; write it relative to the CSV's folder"),
        ));
    }
    let label: i64 = match label.trim().parse() {
        Ok(l) if (0..MAX_REPLAY_LABEL).contains(&l) => l,
        _ => {
            return Err(bad(
                csv,
                line,
                format!("the label {label:?} is not a class index in 0..{MAX_REPLAY_LABEL}"),
            ))
        }
    };
    let time: f64 = match time.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => t,
        _ => {
            return Err(bad(
                csv,
                line,
                format!(
                    "the timestamp {time:?} is not seconds since the Unix epoch (1764000000.5)"
                ),
            ))
        }
    };
    let full = root.join(rel);
    if !full.is_file() {
        return Err(bad(csv, line, format!("{} is not a file", full.display())));
    }
    Ok(Row {
        path: full,
        label,
        time,
    })
}

impl Replay {
    /// Reads the trace `csv` and opens the dataset it starts with: the
    /// rows of the first timestamp. Its classes are `"0"`, `"1"`, ... up
    /// to the largest label of the whole trace.
    ///
    /// # Errors
    /// An unreadable or oversized file, a wrong header, a bad row (with
    /// its line), more than [`MAX_REPLAY_ROWS`] rows, no row.
    pub fn open(csv: &Path) -> Result<(Dataset, Replay), PipelineError> {
        let text = super::read_csv(csv, MAX_REPLAY_BYTES, HEADER, |line, why| {
            bad(csv, line, why)
        })?;
        let root = match csv.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut rows = Vec::new();
        for (n, line) in super::csv_rows(&text) {
            if rows.len() >= MAX_REPLAY_ROWS {
                return Err(bad(
                    csv,
                    n,
                    format!("more than {MAX_REPLAY_ROWS} rows; split the trace"),
                ));
            }
            rows.push(parse_row(csv, &root, n, line)?);
        }
        rows.sort_by(|a, b| a.time.total_cmp(&b.time));
        let Some(first) = rows.first().map(|r| r.time) else {
            return Err(bad(csv, 1, "no rows after the header"));
        };
        let classes = rows.iter().map(|r| r.label).max().unwrap_or(0) + 1;
        let mut dataset = Dataset {
            root,
            kind: DatasetKind::ImageFolder,
            class_names: (0..classes).map(|c| c.to_string()).collect(),
            shards: Vec::new(),
            entries: Vec::new(),
        };
        let mut replay = Replay { rows, joined: 0 };
        replay.advance(&mut dataset, first);
        Ok((dataset, replay))
    }

    /// The timestamp of the trace's first row.
    pub fn first_time(&self) -> f64 {
        self.rows.first().map_or(0.0, |r| r.time)
    }

    /// The timestamp of the next row still to join (None: all joined).
    pub fn next_time(&self) -> Option<f64> {
        self.rows.get(self.joined).map(|r| r.time)
    }

    /// Rows in the trace.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// The arrival time (timestamp) of sample `index`, `None` past the
    /// samples joined so far.
    pub fn arrival(&self, index: usize) -> Option<f64> {
        self.rows[..self.joined].get(index).map(|r| r.time)
    }

    /// Appends to `dataset` the rows whose timestamp is at most `clock`.
    pub fn advance(&mut self, dataset: &mut Dataset, clock: f64) -> Growth {
        let t0 = Instant::now();
        let end = self.joined + self.rows[self.joined..].partition_point(|r| r.time <= clock);
        let new = &self.rows[self.joined..end];
        dataset.entries.extend(new.iter().map(|r| Entry {
            location: Location::File(r.path.clone()),
            label: r.label,
        }));
        let arrivals = match (new.first(), new.last()) {
            (Some(a), Some(b)) => Some((a.time, b.time)),
            _ => None,
        };
        self.joined = end;
        Growth {
            added: new.len(),
            arrivals,
            seconds: t0.elapsed().as_secs_f64(),
            ..Growth::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn trace(dir: &Path, body: &str) -> PathBuf {
        for f in ["a.jpg", "b.jpg", "c,d.jpg"] {
            fs::write(dir.join(f), b"x").unwrap();
        }
        let p = dir.join("t.csv");
        fs::write(&p, format!("{HEADER}\n{body}")).unwrap();
        p
    }

    #[test]
    fn rows_join_in_time_order_as_the_clock_passes_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = trace(
            dir.path(),
            "b.jpg,1,20\r\na.jpg,0,10\n\nc,d.jpg,3,10\na.jpg,2,30.5\n",
        );
        let (mut ds, mut r) = Replay::open(&p).unwrap();
        assert_eq!((ds.len(), ds.num_classes(), r.rows()), (2, 4, 4));
        assert_eq!((ds.label(0), ds.label(1)), (Some(0), Some(3)));
        assert!(ds.sample_name(1).unwrap().ends_with("c,d.jpg"));
        assert_eq!((r.first_time(), r.next_time()), (10.0, Some(20.0)));
        assert_eq!(r.advance(&mut ds, 19.9).added, 0);
        let g = r.advance(&mut ds, 100.0);
        assert_eq!((g.added, g.arrivals), (2, Some((20.0, 30.5))));
        assert_eq!(
            (ds.len(), ds.label(3), r.arrival(3)),
            (4, Some(2), Some(30.5))
        );
        assert_eq!(r.next_time(), None);
        let mut buf = Vec::new();
        ds.read_sample(2, &mut buf).unwrap();
        assert_eq!(buf, b"x");
    }

    #[test]
    fn bad_rows_are_refused_with_their_line() {
        let dir = tempfile::tempdir().unwrap();
        for (body, line, what) in [
            ("a.jpg,0,1\nb.jpg,1\n", 3, "3 fields"),
            ("a.jpg,x,1\n", 2, "not a class index"),
            ("a.jpg,0,1\na.jpg,-1,1\n", 3, "not a class index"),
            ("a.jpg,0,yesterday\n", 2, "not seconds"),
            ("a.jpg,0,inf\n", 2, "not seconds"),
            ("/etc/passwd,0,1\n", 2, "absolute"),
            ("a.jpg,0,1\n\nnope.jpg,0,1\n", 4, "not a file"),
            ("", 1, "no rows"),
        ] {
            let p = trace(dir.path(), body);
            let err = Replay::open(&p).unwrap_err().to_string();
            assert!(err.contains(&format!(":{line}: ")), "{body:?}: {err}");
            assert!(err.contains(what), "{body:?}: {err}");
        }
        let p = dir.path().join("h.csv");
        fs::write(&p, "file,label,time\na.jpg,0,1\n").unwrap();
        let err = Replay::open(&p).unwrap_err().to_string();
        assert!(err.contains(":1: ") && err.contains(HEADER), "{err}");
    }
}
