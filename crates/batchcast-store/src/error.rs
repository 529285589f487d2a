//! The errors of the run store, and of what the runs crate builds on it
//! (exports, the MLflow endpoint), which callers meet as one type.

use std::path::PathBuf;

/// What can go wrong opening, writing or reading a run store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Opened read-only, but there is no file.
    #[error(
        "no run store at {path}: run `batchcast run` first, or pass --store with the file it wrote"
    )]
    Missing {
        /// The path asked for.
        path: PathBuf,
    },
    /// The file is SQLite (or not even that) but not a batchcast store.
    #[error("{path} is not a batchcast run store (application id {found:#x}); pass --store with a file that `batchcast run` wrote")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// Its SQLite application id.
        found: i64,
    },
    /// The store was written by a newer batchcast.
    #[error("{path} has store schema {found}, newer than this batchcast understands ({supported}); upgrade batchcast")]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest schema version this batchcast reads.
        supported: i64,
    },
    /// The directory for the store could not be made.
    #[error("cannot create the directory for the run store {path}: {source}; pass --store with a writable path")]
    CreateDir {
        /// The store's path.
        path: PathBuf,
        /// Why the directory could not be made.
        source: std::io::Error,
    },
    /// A run, workload or experiment that the caller named does not exist.
    #[error("{what} not found in the run store; `batchcast runs list` shows what it holds")]
    NotFound {
        /// What was asked for, as the user named it.
        what: String,
    },
    /// A value in the store that a batchcast writer would never have written.
    #[error("the run store holds a bad value in {field}: {value:?} (was it edited by hand?)")]
    Corrupt {
        /// The table and column (`runs.status`).
        field: &'static str,
        /// The value found.
        value: String,
    },
    /// Read-only, in a directory this user cannot write, with commits
    /// still in the `-wal` file, which SQLite cannot read without a `-shm`.
    #[error(
        "cannot read the run store {path}: its directory is not writable by this user and commits are still in \
         its -wal file; read it as a user who may write the directory, or copy it with \
         `sqlite3 {path} '.backup copy.sqlite'` where it is"
    )]
    WalUnreadable {
        /// The store's path.
        path: PathBuf,
    },
    /// An export could not be written.
    #[error("cannot write the export: {0}")]
    Export(String),
    /// A file of an export could not be read, written or moved.
    #[error("cannot write the export: {what} {}: {error}", path.display())]
    ExportFile {
        /// What was being done: `cannot create`, `cannot move into place`, ...
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why it failed: in the message, so not the error's `source()`
        /// (a reader of the whole chain, `{:#}`, would print it twice).
        error: std::io::Error,
    },
    /// A local server (the MLflow endpoint) could not listen.
    #[error("cannot serve on 127.0.0.1: {0}")]
    Serve(String),
    /// The recorder's writer thread could not be started.
    #[error("cannot start the run store's writer thread: {0}")]
    Thread(std::io::Error),
    /// SQLite itself failed (disk full, file locked for too long, I/O error).
    #[error("run store {path}: {source}")]
    Sqlite {
        /// The store's path.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

impl StoreError {
    /// For `map_err`: the export's file operation `what` on `path` failed.
    pub fn export_file<'p>(
        what: &'static str,
        path: &'p std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> StoreError + 'p {
        move |error| StoreError::ExportFile {
            what,
            path: path.to_path_buf(),
            error,
        }
    }

    pub(crate) fn sqlite(
        path: &std::path::Path,
    ) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `Result` with a [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_file_error_says_what_failed_on_which_file_and_why() {
        let path = std::path::Path::new("/no/such/dir/out.csv");
        let source = std::fs::File::open(path).unwrap_err();
        let e = StoreError::export_file("cannot create", path)(source);
        assert_eq!(
            e.to_string(),
            "cannot write the export: cannot create /no/such/dir/out.csv: \
             No such file or directory (os error 2)"
        );
        // The reason is in the message only: `{:#}` of the chain says it once.
        assert!(std::error::Error::source(&e).is_none());
    }
}
