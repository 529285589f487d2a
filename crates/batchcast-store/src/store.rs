//! The run store: one SQLite file in WAL mode.
//!
//! Several runners and readers may use one file at once: SQLite's WAL lets
//! readers go on while one writer commits, and every connection waits up to
//! [`BUSY_TIMEOUT`] for a lock instead of failing. Each thread opens its own
//! [`Store`] (a connection is not shared between threads).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Result, StoreError};
use crate::schema;

/// How long a connection waits for another's lock before it gives up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to a run store.
pub struct Store {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens a store for writing, creating the file (and its directory) when
    /// there is none: the directories it makes 0700 and the file 0600 (its
    /// WAL files follow), since runs hold command lines, environments and
    /// output. A file that is not a batchcast store is refused and left
    /// untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| StoreError::CreateDir {
                    path: path.clone(),
                    source,
                })?;
        }
        // Made here only for its mode: an existing file is left as it is,
        // and any other failure is SQLite's to report just below.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        let conn = Connection::open(&path).map_err(StoreError::sqlite(&path))?;
        let store = Store::configure(conn, path)?;
        // Look before writing anything: a foreign file is left as it was.
        let found = store.inspect()?;
        if let schema::Found::Foreign(_) = found {
            store.check(schema::SCHEMA_VERSION)?;
        }
        // Switching a file to WAL needs it to itself for a moment; SQLite
        // answers BUSY at once (without its busy handler) while another
        // runner opening the same new store holds it, so retry until the
        // usual lock timeout.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match store.conn.pragma_update(None, "journal_mode", "WAL") {
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::DatabaseBusy
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other.map_err(store.err())?,
            }
        }
        store
            .conn
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(store.err())?;
        if matches!(found, schema::Found::Empty)
            || matches!(found, schema::Found::Store(v) if v < schema::SCHEMA_VERSION)
        {
            schema::create(&store.conn).map_err(store.err())?;
        }
        store.check(schema::SCHEMA_VERSION)?;
        Ok(store)
    }

    /// Opens an existing store for reading only (the dashboard, `runs list`).
    /// Writers may go on meanwhile; this connection never writes.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        if !path.is_file() {
            return Err(StoreError::Missing { path });
        }
        match Store::read_only_connection(&path, false) {
            // A WAL store needs its `-shm` file, which SQLite cannot make
            // in a directory this user may not write (a copy, another
            // user's store). With no `-wal` file beside it, every commit is
            // in the file itself, and nobody can be writing it (a writer
            // would have made both files): read it as it stands.
            Err(StoreError::Sqlite {
                source: rusqlite::Error::SqliteFailure(f, _),
                ..
            }) if matches!(
                f.code,
                rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen
            ) && !Store::dir_writable(&path) =>
            {
                if Store::has_wal(&path) {
                    Err(StoreError::WalUnreadable { path })
                } else {
                    Store::read_only_connection(&path, true)
                }
            }
            other => other,
        }
    }

    /// Whether this user may create files beside `path`.
    fn dir_writable(path: &Path) -> bool {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok()
    }

    /// A read-only connection to `path`, checked to be a store; `immutable`
    /// tells SQLite that nobody writes the file (no locks, no `-shm`).
    fn read_only_connection(path: &Path, immutable: bool) -> Result<Store> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = if immutable {
            Connection::open_with_flags(format!("{}?mode=ro&immutable=1", file_uri(path)), flags)
        } else {
            Connection::open_with_flags(path, flags)
        }
        .map_err(StoreError::sqlite(path))?;
        let store = Store::configure(conn, path.to_path_buf())?;
        store.check(schema::OLDEST_READABLE)?;
        Ok(store)
    }

    /// Whether `path` has a `-wal` file beside it holding anything.
    fn has_wal(path: &Path) -> bool {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::metadata(PathBuf::from(wal)).is_ok_and(|m| m.len() > 0)
    }

    /// The store used when none is named: `$BATCHCAST_STORE`, else
    /// `$XDG_DATA_HOME/batchcast/runs.sqlite`, else
    /// `~/.local/share/batchcast/runs.sqlite`, else `./batchcast-runs.sqlite`.
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os("BATCHCAST_STORE").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let data = std::env::var_os("XDG_DATA_HOME")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|p| !p.is_empty())
                    .map(|h| PathBuf::from(h).join(".local/share"))
            });
        match data {
            Some(dir) => dir.join("batchcast").join("runs.sqlite"),
            None => PathBuf::from("batchcast-runs.sqlite"),
        }
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn configure(conn: Connection, path: PathBuf) -> Result<Store> {
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(StoreError::sqlite(&path))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(StoreError::sqlite(&path))?;
        Ok(Store { conn, path })
    }

    fn inspect(&self) -> Result<schema::Found> {
        schema::inspect(&self.conn).map_err(|e| match e {
            // "file is not a database": some other kind of file.
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
                StoreError::NotAStore {
                    path: self.path.clone(),
                    found: 0,
                }
            }
            e => StoreError::Sqlite {
                path: self.path.clone(),
                source: e,
            },
        })
    }

    /// Whether this is a store of a layout from `oldest` to the current one.
    fn check(&self, oldest: i64) -> Result<()> {
        match self.inspect()? {
            schema::Found::Store(v) if (oldest..=schema::SCHEMA_VERSION).contains(&v) => Ok(()),
            schema::Found::Store(v) if v > schema::SCHEMA_VERSION => Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: v,
                supported: schema::SCHEMA_VERSION,
            }),
            schema::Found::Store(v) => Err(StoreError::Corrupt {
                field: "user_version",
                value: v.to_string(),
            }),
            schema::Found::Empty => Err(StoreError::NotAStore {
                path: self.path.clone(),
                found: 0,
            }),
            schema::Found::Foreign(app) => Err(StoreError::NotAStore {
                path: self.path.clone(),
                found: app,
            }),
        }
    }

    pub(crate) fn err(&self) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
        StoreError::sqlite(&self.path)
    }

    /// Every row `sql` returns with `params`, each made by `row`.
    pub(crate) fn all<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let mut st = self.conn.prepare_cached(sql).map_err(self.err())?;
        let rows = st.query_map(params, row).map_err(self.err())?;
        rows.collect::<rusqlite::Result<_>>().map_err(self.err())
    }
}

/// `path` as a `file:` URI, each byte but ASCII letters, digits and
/// `/-_.~` percent-escaped: `file:///abs/path`, or `file:rel/path` when
/// the path cannot be made absolute (no current directory). SQLite opens a
/// store by it, and MLflow's file store names directories with it.
pub fn file_uri(path: &Path) -> String {
    let (mut uri, path) = match std::path::absolute(path) {
        Ok(abs) => (String::from("file://"), abs),
        Err(_) => (String::from("file:"), path.to_path_buf()),
    };
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read of a store in a directory this user may not write opens
    /// the file by its URI, whatever its path holds.
    #[test]
    fn an_immutable_read_opens_a_path_that_its_uri_must_escape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a b%#?é/runs.sqlite");
        Store::open(&path).unwrap().experiment("e").unwrap();
        let ro = Store::read_only_connection(&path, true).unwrap();
        assert_eq!(ro.experiments().unwrap().len(), 1);
    }
}
