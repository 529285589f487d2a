//! Where a producer of a given name lives on the file system.
//!
//! `$BATCHCAST_DIR` if set, else `$XDG_RUNTIME_DIR/batchcast`, else
//! `/tmp/batchcast-UID`. The directory is created with mode 0700 and refused
//! if another user owns it or others can write to it. A producer holds
//! `NAME.lock` with `flock` for its whole life (the kernel drops the lock when
//! the process dies, however it dies) and listens on `NAME.sock` (mode 0600).
//! [`Endpoint::connect`] removes the files a killed producer left, so they
//! never accumulate.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Longest name accepted.
pub const MAX_NAME_LEN: usize = 64;

/// The files of one producer name.
#[derive(Debug, Clone)]
pub struct Endpoint {
    name: String,
    dir: PathBuf,
}

impl Endpoint {
    /// The endpoint of `name` in the default directory (see the module docs).
    pub fn new(name: &str) -> Result<Self> {
        validate_name(name)?;
        Ok(Endpoint {
            name: name.to_owned(),
            dir: default_dir(),
        })
    }

    /// The endpoint of `name` in `dir`, or in the default directory.
    pub fn resolve(name: &str, dir: Option<&Path>) -> Result<Self> {
        match dir {
            Some(dir) => Self::in_dir(name, dir),
            None => Self::new(name),
        }
    }

    /// The endpoint of `name` in `dir`.
    pub fn in_dir(name: &str, dir: impl Into<PathBuf>) -> Result<Self> {
        validate_name(name)?;
        Ok(Endpoint {
            name: name.to_owned(),
            dir: dir.into(),
        })
    }

    /// The producer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory holding the socket and the lock.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The Unix socket path.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join(format!("{}.sock", self.name))
    }

    /// The lock file path.
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(format!("{}.lock", self.name))
    }

    /// Connects to the producer's socket. `Ok(None)`: no producer listens
    /// (and the files of a killed one, if any, have been removed). A socket
    /// of another user is [`Error::PermissionDenied`].
    pub fn connect(&self) -> Result<Option<UnixStream>> {
        self.connect_or_clear(true)
    }

    /// As [`Endpoint::connect`]; with `clear` false, a killed producer's
    /// files are left for the producer restarted in its place to replace
    /// (a consumer waiting for that restart does not race it for them).
    pub(crate) fn connect_or_clear(&self, clear: bool) -> Result<Option<UnixStream>> {
        let path = self.socket_path();
        match UnixStream::connect(&path) {
            Ok(sock) => Ok(Some(sock)),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                if clear {
                    crate::producer::lock::clear_if_stale(self);
                }
                Ok(None)
            }
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                Err(Error::PermissionDenied { path })
            }
            Err(e) => Err(Error::io(
                format!("cannot connect to {}", path.display()),
                e,
            )),
        }
    }

    /// Creates the directory (0700) if needed and checks it is ours and private.
    pub fn ensure_dir(&self) -> Result<()> {
        ensure_private_dir(&self.dir)?;
        let sock = self.socket_path();
        // sockaddr_un holds 108 bytes including the terminating NUL.
        if sock.as_os_str().len() >= 108 {
            return Err(Error::UnsafeDirectory {
                path: self.dir.clone(),
                why: format!(
                    "the socket path {} is longer than the 107 bytes a Unix socket allows; \
                     set BATCHCAST_DIR to a shorter directory",
                    sock.display()
                ),
            });
        }
        Ok(())
    }
}

/// The directory used when none is given.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BATCHCAST_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(run).join("batchcast");
    }
    PathBuf::from(format!(
        "/tmp/batchcast-{}",
        rustix::process::getuid().as_raw()
    ))
}

/// Checks a producer name: it becomes a file name, so it must be a safe one.
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |why| {
        Err(Error::InvalidName {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("it is longer than 64 characters");
    }
    if name.starts_with('.') {
        return bad("it starts with '.'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("it has a character outside A-Z a-z 0-9 . _ -");
    }
    Ok(())
}

fn ensure_private_dir(dir: &Path) -> Result<()> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => {
            return Err(Error::io(
                format!("cannot create the socket directory {}", dir.display()),
                e,
            ))
        }
    }
    let meta = fs::symlink_metadata(dir)
        .map_err(|e| Error::io(format!("cannot inspect {}", dir.display()), e))?;
    let unsafe_dir = |why: String| {
        Err(Error::UnsafeDirectory {
            path: dir.to_owned(),
            why,
        })
    };
    if !meta.is_dir() {
        return unsafe_dir("it is not a directory (a symbolic link or a file?); remove it".into());
    }
    let uid = rustix::process::getuid().as_raw();
    if meta.uid() != uid {
        return unsafe_dir(format!(
            "it belongs to uid {}, not to this user (uid {uid}); set BATCHCAST_DIR to a \
             directory of your own",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        // Ours: tighten it rather than fail.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("cannot chmod 0700 {}", dir.display()), e))?;
    }
    Ok(())
}

/// Lists the names that have a socket or a lock file in `dir`.
pub fn list_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let name = file
                .strip_suffix(".sock")
                .or_else(|| file.strip_suffix(".lock"))?;
            validate_name(name).ok()?;
            Some(name.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_safe_file_names_pass() {
        for ok in ["cifar", "imagenet-1k", "a.b_c", "X9"] {
            validate_name(ok).unwrap();
        }
    }

    #[test]
    fn unsafe_names_are_refused_with_the_rule() {
        for (bad, rule) in [
            ("", "empty"),
            ("../etc", "starts with '.'"),
            ("a/b", "character"),
            ("a b", "character"),
            (".hidden", "starts with '.'"),
        ] {
            let err = validate_name(bad).unwrap_err().to_string();
            assert!(err.contains(rule), "{bad:?}: {err}");
        }
        assert!(validate_name(&"x".repeat(65)).is_err());
    }

    #[test]
    fn dir_is_created_private_and_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let ep = Endpoint::in_dir("cifar", tmp.path().join("d")).unwrap();
        ep.ensure_dir().unwrap();
        let mode = fs::metadata(ep.dir()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::write(ep.socket_path(), b"").unwrap();
        fs::write(ep.lock_path(), b"").unwrap();
        fs::write(ep.dir().join("other.lock"), b"").unwrap();
        fs::write(ep.dir().join("junk.txt"), b"").unwrap();
        assert_eq!(list_names(ep.dir()), vec!["cifar", "other"]);
    }

    #[test]
    fn connecting_to_a_dead_name_removes_its_files() {
        let tmp = tempfile::tempdir().unwrap();
        let ep = Endpoint::in_dir("dead", tmp.path()).unwrap();
        // A bound socket nobody listens on, and a lock nobody holds: what a
        // SIGKILLed producer leaves.
        drop(std::os::unix::net::UnixListener::bind(ep.socket_path()).unwrap());
        fs::write(ep.lock_path(), b"4242").unwrap();
        assert!(ep.connect().unwrap().is_none());
        assert!(!ep.socket_path().exists());
        assert!(!ep.lock_path().exists());
    }

    #[test]
    fn too_long_socket_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let ep = Endpoint::in_dir("x", tmp.path().join("d".repeat(110))).unwrap();
        let err = ep.ensure_dir().unwrap_err().to_string();
        assert!(err.contains("BATCHCAST_DIR"), "{err}");
    }
}
