//! The figures a job reports about itself: the runner tells each job it
//! starts a path in [`FIGURES_ENV`], inside a directory of that run's own
//! (0700, removed with the run's [`FiguresSlot`]); a job that writes there
//! one JSON object of name -> number gets each number recorded as the
//! run's metric `figure/<name>` ([`crate::keys::figure`]) once it has ended,
//! whatever its status. The file is bounded before it is parsed
//! ([`MAX_BYTES`], [`MAX_NAMES`], [`MAX_NAME_CHARS`]); a file that breaks a
//! rule is recorded as one event of the run naming the problem, and none of
//! its figures are recorded.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The environment variable that holds where a job may write its figures.
pub const FIGURES_ENV: &str = "BATCHCAST_FIGURES";
/// Largest figures file read.
pub const MAX_BYTES: u64 = 1 << 20;
/// Most figures in one file.
pub const MAX_NAMES: usize = 1000;
/// Longest figure name, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// The file's name inside the run's directory.
const FILE_NAME: &str = "figures.json";

/// Why a job's figures file was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum FiguresError {
    /// It could not be opened or read (a symlink is not followed).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// It is not a regular file.
    #[error("{0} is not a regular file; write the figures as one JSON file there")]
    NotFile(PathBuf),
    /// It is larger than [`MAX_BYTES`].
    #[error("{path} holds {len} bytes, more than the {MAX_BYTES} read; write fewer figures")]
    TooBig {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// It is not JSON, or not one object.
    #[error("{path} is not one JSON object of name -> number: {why}")]
    NotObject {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        why: String,
    },
    /// It holds more than [`MAX_NAMES`] figures.
    #[error("{path} holds {count} figures, more than the {MAX_NAMES} recorded; write fewer")]
    TooMany {
        /// The file.
        path: PathBuf,
        /// How many it holds.
        count: usize,
    },
    /// A name is empty or longer than [`MAX_NAME_CHARS`].
    #[error("{path}: figure name {name:?} is empty or longer than {MAX_NAME_CHARS} characters")]
    BadName {
        /// The file.
        path: PathBuf,
        /// The name (cut to [`MAX_NAME_CHARS`] characters).
        name: String,
    },
    /// A value is not a finite number.
    #[error("{path}: figure {name:?} is {value}, not a finite number")]
    NotNumber {
        /// The file.
        path: PathBuf,
        /// The figure's name.
        name: String,
        /// The value as JSON (cut to 60 characters).
        value: String,
    },
}

/// The private directory of one run's figures; removed when dropped.
#[derive(Debug)]
pub struct FiguresSlot {
    dir: tempfile::TempDir,
}

impl FiguresSlot {
    /// Makes a directory only this user can enter, under the system's
    /// temporary directory.
    pub fn new() -> std::io::Result<FiguresSlot> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("batchcast-figures-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        Ok(FiguresSlot { dir })
    }

    /// The path a job is given in [`FIGURES_ENV`].
    pub fn file(&self) -> PathBuf {
        self.dir.path().join(FILE_NAME)
    }

    /// The figures the job wrote: `None` when it wrote none.
    pub fn read(&self) -> Result<Option<Vec<(String, f64)>>, FiguresError> {
        read(&self.file())
    }
}

/// Reads a figures file: `Ok(None)` when there is none, else its figures
/// by name.
pub fn read(path: &Path) -> Result<Option<Vec<(String, f64)>>, FiguresError> {
    let read_err = |source| FiguresError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match File::options()
        .read(true)
        // Not a symlink; a FIFO opens without waiting for a writer, and is
        // then refused as not a regular file.
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(FiguresError::NotFile(path.to_path_buf()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(FiguresError::TooBig {
            path: path.to_path_buf(),
            len: meta.len().max(bytes.len() as u64),
        });
    }
    parse(path, &bytes).map(Some)
}

/// Writes `figures` where the runner asked a job to ([`FIGURES_ENV`]), as
/// one JSON object, the file 0600; returns `false` (and writes nothing)
/// when the job was not started by a runner.
pub fn write_for_runner(figures: &[(&str, f64)]) -> std::io::Result<bool> {
    let Some(path) = std::env::var_os(FIGURES_ENV).filter(|p| !p.is_empty()) else {
        return Ok(false);
    };
    write(Path::new(&path), figures)?;
    Ok(true)
}

/// Writes `figures` to `path` as one JSON object (a non-finite number is
/// left out: JSON has none), the file 0600, not following a symlink.
pub fn write(path: &Path, figures: &[(&str, f64)]) -> std::io::Result<()> {
    use std::io::Write;
    let object: serde_json::Map<String, serde_json::Value> = figures
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(k, v)| ((*k).to_string(), serde_json::json!(v)))
        .collect();
    let mut file = File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    // `mode` applies only when the file is created: one already there gets
    // 0600 too.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(serde_json::Value::Object(object).to_string().as_bytes())
}

/// Checks and parses the bytes of a figures file.
fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<(String, f64)>, FiguresError> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(bytes)
        .map_err(|e| FiguresError::NotObject {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    if object.len() > MAX_NAMES {
        return Err(FiguresError::TooMany {
            path: path.to_path_buf(),
            count: object.len(),
        });
    }
    let mut figures = Vec::with_capacity(object.len());
    for (name, value) in object {
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
            return Err(FiguresError::BadName {
                path: path.to_path_buf(),
                name: name.chars().take(MAX_NAME_CHARS).collect(),
            });
        }
        match value.as_f64() {
            Some(v) if v.is_finite() => figures.push((name, v)),
            _ => {
                return Err(FiguresError::NotNumber {
                    path: path.to_path_buf(),
                    name,
                    value: value.to_string().chars().take(60).collect(),
                })
            }
        }
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(slot: &FiguresSlot, bytes: &[u8]) {
        std::fs::write(slot.file(), bytes).unwrap();
    }

    /// What the slot's read says of `bytes`, which it must refuse.
    fn refused(slot: &FiguresSlot, bytes: &[u8]) -> FiguresError {
        put(slot, bytes);
        slot.read().unwrap_err()
    }

    #[test]
    fn what_write_writes_read_reads() {
        let slot = FiguresSlot::new().unwrap();
        // A file already there, readable by others, becomes 0600.
        std::fs::write(slot.file(), b"{}").unwrap();
        std::fs::set_permissions(slot.file(), std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&slot.file(), &[("samples", 40.0), ("nan", f64::NAN)]).unwrap();
        let mode = std::fs::metadata(slot.file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            slot.read().unwrap().unwrap(),
            vec![("samples".to_string(), 40.0)]
        );
    }

    #[test]
    fn no_file_is_no_figures() {
        let slot = FiguresSlot::new().unwrap();
        assert!(slot.read().unwrap().is_none());
    }

    #[test]
    fn directory_is_private_and_removed_with_the_slot() {
        use std::os::unix::fs::PermissionsExt;
        let slot = FiguresSlot::new().unwrap();
        let dir = slot.file().parent().unwrap().to_path_buf();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(slot);
        assert!(!dir.exists());
    }

    #[test]
    fn numbers_are_read_by_name() {
        let slot = FiguresSlot::new().unwrap();
        put(
            &slot,
            br#"{"samples_per_s": 1200.5, "epochs": 2, "a/b": -1e-3}"#,
        );
        let got = slot.read().unwrap().unwrap();
        assert_eq!(
            got,
            vec![
                ("a/b".to_string(), -1e-3),
                ("epochs".to_string(), 2.0),
                ("samples_per_s".to_string(), 1200.5),
            ]
        );
    }

    #[test]
    fn bad_json_is_refused() {
        let slot = FiguresSlot::new().unwrap();
        let e = refused(&slot, br#"{"a": 1"#);
        assert!(matches!(e, FiguresError::NotObject { .. }), "{e}");
        let e = refused(&slot, b"[1, 2]");
        assert!(e.to_string().contains("not one JSON object"), "{e}");
    }

    #[test]
    fn nan_is_refused() {
        let slot = FiguresSlot::new().unwrap();
        let e = refused(&slot, br#"{"a": NaN}"#);
        assert!(matches!(e, FiguresError::NotObject { .. }), "{e}");
        refused(&slot, br#"{"a": 1e999}"#);
    }

    #[test]
    fn a_value_that_is_not_a_number_is_named() {
        let slot = FiguresSlot::new().unwrap();
        let e = refused(&slot, br#"{"ok": 1, "model": "resnet"}"#);
        match &e {
            FiguresError::NotNumber { name, .. } => assert_eq!(name, "model"),
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains("\"resnet\""), "{e}");
        let e = refused(&slot, br#"{"nested": {"a": 1}}"#);
        assert!(matches!(e, FiguresError::NotNumber { .. }), "{e}");
    }

    #[test]
    fn too_big_is_refused_before_parsing() {
        let slot = FiguresSlot::new().unwrap();
        let mut text = b"{\"a\": 1".to_vec();
        text.resize(MAX_BYTES as usize + 10, b' ');
        let e = refused(&slot, &text);
        assert!(matches!(e, FiguresError::TooBig { .. }), "{e}");
    }

    #[test]
    fn too_many_names_and_long_names_are_refused() {
        let slot = FiguresSlot::new().unwrap();
        let many: serde_json::Map<String, serde_json::Value> = (0..=MAX_NAMES)
            .map(|i| (format!("f{i}"), serde_json::json!(i)))
            .collect();
        let e = refused(&slot, serde_json::to_string(&many).unwrap().as_bytes());
        assert!(matches!(e, FiguresError::TooMany { .. }), "{e}");
        let long = format!("{{\"{}\": 1}}", "n".repeat(MAX_NAME_CHARS + 1));
        let e = refused(&slot, long.as_bytes());
        assert!(matches!(e, FiguresError::BadName { .. }), "{e}");
        let e = refused(&slot, br#"{"": 1}"#);
        assert!(matches!(e, FiguresError::BadName { .. }), "{e}");
    }

    #[test]
    fn a_symlink_is_not_followed() {
        let slot = FiguresSlot::new().unwrap();
        let elsewhere = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(elsewhere.path(), br#"{"a": 1}"#).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), slot.file()).unwrap();
        assert!(matches!(
            slot.read().unwrap_err(),
            FiguresError::Read { .. }
        ));
    }

    #[test]
    fn a_fifo_is_refused_without_waiting() {
        let slot = FiguresSlot::new().unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(slot.file())
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(slot.read().unwrap_err(), FiguresError::NotFile(_)));
    }
}
