//! One live producer per name: an `flock` on `NAME.lock`.
//!
//! The kernel releases an flock when its holder dies, however it dies, so a
//! killed producer never blocks its successor, and two live producers can
//! never both hold a name. The lock file holds the holder's pid, for the
//! error message.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use rustix::fs::FlockOperation;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};

/// A held name.
pub(crate) struct NameLock {
    file: File,
    path: PathBuf,
}

impl NameLock {
    /// Takes the name, or fails with [`Error::NameInUse`].
    pub fn acquire(endpoint: &Endpoint) -> Result<NameLock> {
        let path = endpoint.lock_path();
        for _ in 0..10 {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path)
                .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    return Err(Error::NameInUse {
                        name: endpoint.name().to_owned(),
                        pid: text.trim().parse().ok(),
                    });
                }
                Err(e) => return Err(Error::io(format!("cannot lock {}", path.display()), e)),
            }
            // A previous holder may have unlinked the file between our open and
            // our lock: then we locked an orphan, and must try again.
            let same = match (file.metadata(), std::fs::metadata(&path)) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if !same {
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
