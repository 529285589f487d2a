//! One live producer per name: an `flock` on `NAME.lock`.
//!
//! The kernel releases an flock when its holder dies, however it dies, so a
//! killed producer never blocks its successor, and two live producers can
//! never both hold a name. The lock file holds the holder's pid, for the
//! error message.
//!
//! A killed producer leaves its socket and lock file behind. Any batchcast
//! process that finds them ([`clear_if_stale`]: a consumer whose connect is
//! refused, `batchcast status`) takes the flock itself, checks it locked the
//! file that is still at the path, and removes both files while holding it,
//! so it can never remove the files of a producer that is starting.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};

/// Tries before [`NameLock::acquire`] gives up.
const MAX_ATTEMPTS: usize = 40;

/// A held name.
pub(crate) struct NameLock {
    file: File,
    path: PathBuf,
}

impl NameLock {
    /// Takes the name, or fails with [`Error::NameInUse`].
    pub fn acquire(endpoint: &Endpoint) -> Result<NameLock> {
        let path = endpoint.lock_path();
        for attempt in 0..MAX_ATTEMPTS {
            let mut file = open_lock(&path, true)?;
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    let pid: Option<u32> = text.trim().parse().ok();
                    // A holder whose recorded pid is not alive is a process
                    // clearing the dead one's files (or a producer between
                    // its lock and its pid write): both let go within
                    // microseconds, and no event says when.
                    if !pid.is_some_and(alive) && attempt + 1 < MAX_ATTEMPTS {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    return Err(Error::NameInUse {
                        name: endpoint.name().to_owned(),
                        pid,
                    });
                }
                Err(e) => return Err(Error::io(format!("cannot lock {}", path.display()), e)),
            }
            // A previous holder may have unlinked the file between our open and
            // our lock: then we locked an orphan, and must try again.
            if !still_at(&file, &path) {
                continue;
            }
            file.set_len(0)
                .and_then(|_| file.rewind())
                .and_then(|_| write!(file, "{}", std::process::id()))
                .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
            return Ok(NameLock { file, path });
        }
        Err(Error::Usage(format!(
            "could not lock {} (it kept changing); try again",
            path.display()
        )))
    }

    /// Removes the lock file, then drops the lock.
    pub fn release(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

/// Removes the socket and lock file of `endpoint` when no live process holds
/// the name (its producer was killed). Returns true when it removed them.
pub(crate) fn clear_if_stale(endpoint: &Endpoint) -> bool {
    let path = endpoint.lock_path();
    let socket = endpoint.socket_path();
    let file = match open_lock(&path, false) {
        Ok(f) => f,
        // No lock file: a socket alone is a leftover only if nobody is
        // creating the lock right now, which the flock below decides.
        Err(_) if socket.exists() => match open_lock(&path, true) {
            Ok(f) => f,
            Err(_) => return false,
        },
        Err(_) => return false,
    };
    if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        return false; // a live producer (or another cleaner) holds it
    }
    if !still_at(&file, &path) {
        return false; // replaced since we opened it: not ours to judge
    }
    let _ = std::fs::remove_file(&socket);
    let removed = std::fs::remove_file(&path).is_ok();
    drop(file);
    removed
}

fn open_lock(path: &Path, create: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))
}

/// True when `file` is the file at `path` now.
fn still_at(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// True when a process with this pid exists (ours or another user's).
fn alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_name_is_not_stale_and_a_released_one_is_cleared() {
        let tmp = tempfile::tempdir().unwrap();
        let ep = Endpoint::in_dir("n", tmp.path()).unwrap();
        let lock = NameLock::acquire(&ep).unwrap();
        std::fs::write(ep.socket_path(), b"").unwrap();
        assert!(!clear_if_stale(&ep));
        assert!(ep.socket_path().exists() && ep.lock_path().exists());
        // Dropped without release: the files stay, as after a SIGKILL.
        drop(lock);
        assert!(clear_if_stale(&ep));
        assert!(!ep.socket_path().exists() && !ep.lock_path().exists());
        assert!(!clear_if_stale(&ep));
        NameLock::acquire(&ep).unwrap().release();
    }
}
