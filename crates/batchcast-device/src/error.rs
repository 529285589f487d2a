//! The one error type of device calls.

use std::io;

/// What went wrong with a device, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library could not be loaded.
    #[error(
        "the CUDA driver library {library} could not be loaded ({message}): install the \
         NVIDIA driver or put {library} on LD_LIBRARY_PATH; to test without a GPU, set \
         BATCHCAST_DEVICE_STAND_IN=N for N host-memory stand-in devices"
    )]
    NoDriver {
        /// The library looked for.
        library: String,
        /// The dynamic loader's message.
        message: String,
    },
    /// The device cannot share its memory with other processes.
    #[error(
        "device {device} cannot share memory between processes (virtual memory management: \
         {vmm}, POSIX file-descriptor handles: {posix_fd}): serve it on the host path (no \
         device), or use a GPU and driver that support both"
    )]
    NotShareable {
        /// The device's UUID.
        device: String,
        /// Whether it supports CUDA's virtual memory management.
        vmm: bool,
        /// Whether it exports allocations as POSIX file descriptors.
        posix_fd: bool,
    },
    /// No visible device has that name.
    #[error(
        "no visible device is {wanted}; visible: {visible}: name one of these, as cuda:N or by \
         UUID (check CUDA_VISIBLE_DEVICES)"
    )]
    UnknownDevice {
        /// The name asked for.
        wanted: String,
        /// The visible devices, `ordinal=uuid` each, or "none".
        visible: String,
    },
    /// A device name that is not `cuda`, `cuda:N`, `N` or a UUID.
    #[error("{spec:?} is not a device name ({reason}): write cuda:N, N, cuda, or a GPU UUID")]
    BadSpec {
        /// The name, cut to a bounded length.
        spec: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The device is a MIG instance.
    #[error(
        "device {device} is a MIG instance: CUDA cannot share memory between processes across \
         MIG instances; serve it on the host path, or use a whole GPU"
    )]
    Mig {
        /// The instance's UUID.
        device: String,
    },
    /// A CUDA driver call failed.
    #[error("the CUDA call {call} failed: {code}; check the driver (nvidia-smi) and the device")]
    Driver {
        /// The call.
        call: &'static str,
        /// The driver's result, by name and number.
        code: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The import information is not what this build writes.
    #[error(
        "bad device import information ({0}): producer and consumer must run the same \
         batchcast version"
    )]
    BadImportInfo(String),
}

/// A device call's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Io { source, what } => {
                io::Error::new(source.kind(), format!("{what}: {source}"))
            }
            other => io::Error::other(other),
        }
    }
}
