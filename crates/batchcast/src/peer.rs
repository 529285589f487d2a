//! Who is at the other end of a Unix socket (`SO_PEERCRED`).
//!
//! Read with `getsockopt` into a plain `libc::ucred`, every field an integer
//! for which any bit pattern is valid. A peer in another pid namespace is
//! reported with pid 0; that is kept as "unknown" rather than put into a
//! non-zero pid type (where a 0 would be undefined behaviour).

use std::os::fd::{AsFd, AsRawFd};

use crate::error::{Error, Result};

/// The credentials of a socket's peer, as the kernel recorded them at
/// `connect`/`listen` time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerCred {
    /// The peer's pid; `None` when it is not visible from our pid namespace.
    pub pid: Option<u32>,
    /// The peer's uid.
    pub uid: u32,
}

/// Reads the peer credentials of `sock`.
pub(crate) fn peer_cred(sock: impl AsFd) -> Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is borrowed and open for the call; `cred` is a valid,
    // writable `ucred` of `len` bytes, and the kernel writes at most `len`
    // bytes of integers into it.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Error::io(
            "cannot read the peer's credentials",
            std::io::Error::last_os_error(),
        ));
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(Error::Protocol(format!(
            "the kernel returned {len} bytes of peer credentials"
        )));
    }
    Ok(PeerCred {
        pid: u32::try_from(cred.pid).ok().filter(|&p| p != 0),
        uid: cred.uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_socket_pair_peer_is_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_cred(&a).unwrap();
        assert_eq!(cred.pid, Some(std::process::id()));
        assert_eq!(cred.uid, rustix::process::getuid().as_raw());
    }

    #[test]
    fn a_non_socket_is_an_error_not_a_panic() {
        let file = tempfile::tempfile().unwrap();
        assert!(peer_cred(&file).is_err());
    }
}
