//! The Python exceptions of batchcast and the mapping from the core's
//! [`batchcast::Error`].
//!
//! Every exception derives from `batchcast.BatchcastError`; some also derive
//! from the built-in exception a caller would naturally catch
//! (`InvalidArgument` is a `ValueError`, `NoConsumers` a `TimeoutError`, ...).
//! The classes are made once per interpreter with
//! `PyErr_NewExceptionWithDoc`, which accepts a tuple of bases.
//! [`to_py`] matches every variant of the core's error; the enum is
//! `#[non_exhaustive]`, so a variant added later falls back to
//! `BatchcastError` until it gets its own class here.

use std::ffi::CStr;

use batchcast::{Error, ShutdownReason};
use pyo3::exceptions::{
    PyException, PyKeyboardInterrupt, PyOSError, PyPermissionError, PyRuntimeError, PyTimeoutError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::{ffi, PyTypeInfo};

/// The exception classes, in definition order (bases before subclasses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exc {
    Base,
    ProducerGone,
    ProducerNotFound,
    NameInUse,
    JoinRefused,
    BatchTooLarge,
    OutOfSharedMemory,
    NoConsumers,
    ProtocolError,
    ProducerFinished,
    InvalidArgument,
    InvalidBatch,
    PermissionDenied,
    UsageError,
    IoError,
    FellBehind,
}

const COUNT: usize = 16;

static TYPES: [PyOnceLock<Py<PyType>>; COUNT] = [const { PyOnceLock::new() }; COUNT];

impl Exc {
    pub(crate) const ALL: [Exc; COUNT] = [
        Exc::Base,
        Exc::ProducerGone,
        Exc::ProducerNotFound,
        Exc::NameInUse,
        Exc::JoinRefused,
        Exc::BatchTooLarge,
        Exc::OutOfSharedMemory,
        Exc::NoConsumers,
        Exc::ProtocolError,
        Exc::ProducerFinished,
        Exc::InvalidArgument,
        Exc::InvalidBatch,
        Exc::PermissionDenied,
        Exc::UsageError,
        Exc::IoError,
        Exc::FellBehind,
    ];

    /// The attribute name in the module.
    pub(crate) fn short_name(self) -> &'static str {
        let full = self
            .qualified()
            .to_str()
            .unwrap_or("batchcast.BatchcastError");
        full.rsplit('.').next().unwrap_or(full)
    }

    fn qualified(self) -> &'static CStr {
        match self {
            Exc::Base => c"batchcast.BatchcastError",
            Exc::ProducerGone => c"batchcast.ProducerGone",
            Exc::ProducerNotFound => c"batchcast.ProducerNotFound",
            Exc::NameInUse => c"batchcast.NameInUse",
            Exc::JoinRefused => c"batchcast.JoinRefused",
            Exc::BatchTooLarge => c"batchcast.BatchTooLarge",
            Exc::OutOfSharedMemory => c"batchcast.OutOfSharedMemory",
            Exc::NoConsumers => c"batchcast.NoConsumers",
            Exc::ProtocolError => c"batchcast.ProtocolError",
            Exc::ProducerFinished => c"batchcast.ProducerFinished",
            Exc::InvalidArgument => c"batchcast.InvalidArgument",
            Exc::InvalidBatch => c"batchcast.InvalidBatch",
            Exc::PermissionDenied => c"batchcast.PermissionDenied",
            Exc::UsageError => c"batchcast.UsageError",
            Exc::IoError => c"batchcast.IoError",
            Exc::FellBehind => c"batchcast.FellBehind",
        }
    }

    fn doc(self) -> &'static CStr {
        match self {
            Exc::Base => c"Base class of every batchcast error.",
            Exc::ProducerGone => {
                c"The producer's connection closed without a clean shutdown: it was killed or \
                crashed. `.name` is the producer's name."
            }
            Exc::ProducerNotFound => {
                c"No producer of that name is running. `.name` is the name, `.socket` the socket \
                path that was tried."
            }
            Exc::NameInUse => {
                c"A live producer already holds this name. `.name` is the name, `.pid` the \
                holder's pid when known."
            }
            Exc::JoinRefused => {
                c"The producer refused this consumer. `.name` is the producer, `.reason` its reason."
            }
            Exc::BatchTooLarge => {
                c"A batch does not fit in a slot. `.needed` and `.slot_size` are in bytes; pass \
                slot_size >= needed to Producer."
            }
            Exc::OutOfSharedMemory => c"Not enough memory for the shared arena (window x slot_size).",
            Exc::NoConsumers => {
                c"The producer waited idle_timeout seconds with no consumer attached. Also a \
                TimeoutError."
            }
            Exc::ProtocolError => {
                c"The peer sent something that is not valid batchcast protocol, or speaks another \
                protocol version."
            }
            Exc::ProducerFinished => {
                c"The producer has stopped: it served all its epochs, was interrupted (Ctrl-C), \
                or its loader failed. Raised by iter(consumer) once the producer has finished. \
                `.reason` is 'finished', 'interrupted' or 'failed'."
            }
            Exc::InvalidArgument => c"An argument out of range or malformed. Also a ValueError.",
            Exc::InvalidBatch => {
                c"A batch that breaks the rules (ragged rows, no rows, too deep). Also a ValueError."
            }
            Exc::PermissionDenied => {
                c"The socket directory or the peer belongs to another user (the producer runs as \
                another user). `.path` is the path refused, when known. Also a PermissionError."
            }
            Exc::UsageError => c"An API call out of order. Also a RuntimeError.",
            Exc::IoError => c"An operating-system call failed. Also an OSError.",
            Exc::FellBehind => {
                c"The producer evicted this consumer: it fell further behind the others than the \
                producer's lag budget allows, under lag_policy='evict'. `.behind` and `.budget` \
                are in batches, `.epoch` the epoch it was evicted from. Raise max_lag, use \
                lag_policy='wait', or pass on_evict='rejoin' to rejoin at the next epoch."
            }
        }
    }

    fn builtin_base(self, py: Python<'_>) -> Option<Bound<'_, PyType>> {
        match self {
            Exc::InvalidArgument | Exc::InvalidBatch => Some(PyValueError::type_object(py)),
            Exc::NoConsumers => Some(PyTimeoutError::type_object(py)),
            Exc::PermissionDenied => Some(PyPermissionError::type_object(py)),
            Exc::UsageError => Some(PyRuntimeError::type_object(py)),
            Exc::IoError => Some(PyOSError::type_object(py)),
            _ => None,
        }
    }

    /// The exception class, made on first use.
    pub(crate) fn type_object(self, py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
        let ty = TYPES[self as usize].get_or_try_init(py, || self.make(py))?;
        Ok(ty.bind(py).clone())
    }

    fn make(self, py: Python<'_>) -> PyResult<Py<PyType>> {
        let mut bases: Vec<Bound<'_, PyType>> = Vec::with_capacity(2);
        bases.push(match self {
            Exc::Base => PyException::type_object(py),
            _ => Exc::Base.type_object(py)?,
        });
        bases.extend(self.builtin_base(py));
        let bases = PyTuple::new(py, bases)?;
        // SAFETY: the name and doc are NUL-terminated static strings, the
        // bases a valid tuple of exception classes, and the dict may be NULL.
        // The call returns a new reference or NULL with an exception set.
        let ty = unsafe {
            let raw = ffi::PyErr_NewExceptionWithDoc(
                self.qualified().as_ptr(),
                self.doc().as_ptr(),
                bases.as_ptr(),
                std::ptr::null_mut(),
            );
            Bound::from_owned_ptr_or_err(py, raw)?
        };
        Ok(ty.cast_into::<PyType>()?.unbind())
    }

    /// An exception of this class with `msg` and extra attributes.
    pub(crate) fn err<'py>(
        self,
        py: Python<'py>,
        msg: impl Into<String>,
        attrs: &[(&str, Bound<'py, PyAny>)],
    ) -> PyErr {
        let build = || -> PyResult<PyErr> {
            let ty = self.type_object(py)?;
            let value = ty.call1((msg.into(),))?;
            for (k, v) in attrs {
                value.setattr(*k, v)?;
            }
            Ok(PyErr::from_value(value))
        };
        build().unwrap_or_else(|e| e)
    }
}

/// An `InvalidArgument` (a `ValueError`) with `msg`.
pub(crate) fn invalid(py: Python<'_>, msg: String) -> PyErr {
    Exc::InvalidArgument.err(py, msg, &[])
}

/// Registers every class in the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for exc in Exc::ALL {
        m.add(exc.short_name(), exc.type_object(m.py())?)?;
    }
    Ok(())
}

/// The attributes that are set.
fn attrs(pairs: Attrs<'_>) -> Vec<(&'static str, Bound<'_, PyAny>)> {
    pairs
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
}

/// An exception's extra attributes; those that are None are not set.
type Attrs<'py> = Vec<(&'static str, Option<Bound<'py, PyAny>>)>;

/// Maps a core error to its Python exception. `pending` is the exception a
/// signal handler raised while a blocking call waited (it ended the call with
/// [`Error::Interrupted`]); it is re-raised as is.
pub(crate) fn to_py<'py>(py: Python<'py>, err: Error, pending: Option<PyErr>) -> PyErr {
    let msg = err.to_string();
    match err {
        Error::Interrupted => {
            pending.unwrap_or_else(|| PyKeyboardInterrupt::new_err("interrupted"))
        }
        Error::Io { ref source, .. } => io_error(py, msg, source),
        Error::Region(ref e) => match e.io_error() {
            Some(source) => io_error(py, msg, source),
            None => Exc::ProtocolError.err(py, msg, &[]),
        },
        ref other => {
            let (exc, pairs) = about_producer(py, other).unwrap_or_else(|| about_call(py, other));
            exc.err(py, msg, &attrs(pairs))
        }
    }
}

/// `v` as a Python `str`.
fn text<'py>(py: Python<'py>, v: &str) -> Option<Bound<'py, PyAny>> {
    v.into_pyobject(py).map(|o| o.into_any()).ok()
}

/// `v` as a Python `int`.
fn number(py: Python<'_>, v: u64) -> Option<Bound<'_, PyAny>> {
    v.into_pyobject(py).map(|o| o.into_any()).ok()
}

/// The class and attributes of an error about a producer of a name
/// (`.name` among them); None for the other errors.
fn about_producer<'py>(py: Python<'py>, err: &Error) -> Option<(Exc, Attrs<'py>)> {
    let s = |v: &str| text(py, v);
    let n = |v: u64| number(py, v);
    Some(match err {
        Error::InvalidName { name, .. } => (Exc::InvalidArgument, vec![("name", s(name))]),
        Error::ProducerNotFound { name, socket, .. } => (
            Exc::ProducerNotFound,
            vec![
                ("name", s(name)),
                ("socket", s(&socket.display().to_string())),
            ],
        ),
        Error::NameInUse { name, pid } => {
            let pid = match pid {
                Some(p) => n(u64::from(*p)),
                None => Some(py.None().into_bound(py)),
            };
            (Exc::NameInUse, vec![("name", s(name)), ("pid", pid)])
        }
        Error::ProducerGone { name, .. } => (Exc::ProducerGone, vec![("name", s(name))]),
        Error::StateFile { name, .. } | Error::StreamMismatch { name, .. } => {
            (Exc::InvalidArgument, vec![("name", s(name))])
        }
        Error::ProducerStopped { name, reason } => {
            let reason = match reason {
                ShutdownReason::Finished => "finished",
                ShutdownReason::Interrupted => "interrupted",
                ShutdownReason::Failed(_) => "failed",
            };
            (
                Exc::ProducerFinished,
                vec![("name", s(name)), ("reason", s(reason))],
            )
        }
        Error::JoinRefused { name, reason } => (
            Exc::JoinRefused,
            vec![("name", s(name)), ("reason", s(reason))],
        ),
        Error::FellBehind {
            name,
            epoch,
            behind,
            budget,
        } => (
            Exc::FellBehind,
            vec![
                ("name", s(name)),
                ("epoch", n(*epoch)),
                ("behind", n(*behind)),
                ("budget", n(*budget)),
            ],
        ),
        _ => return None,
    })
}

/// The class and attributes of an error that is not about a producer of a
/// name: arguments, batches, the protocol, permissions, usage. The enum is
/// #[non_exhaustive]: a variant added to the core after this mapping was
/// written is still a BatchcastError.
fn about_call<'py>(py: Python<'py>, err: &Error) -> (Exc, Attrs<'py>) {
    let n = |v: u64| number(py, v);
    match err {
        Error::InvalidArgument(_) => (Exc::InvalidArgument, vec![]),
        Error::BatchTooLarge { needed, slot_size } => (
            Exc::BatchTooLarge,
            vec![
                ("needed", n(*needed as u64)),
                ("slot_size", n(*slot_size as u64)),
            ],
        ),
        Error::OutOfSharedMemory { needed, .. } => {
            (Exc::OutOfSharedMemory, vec![("needed", n(*needed))])
        }
        Error::InvalidBatch(_) => (Exc::InvalidBatch, vec![]),
        Error::Protocol(_) | Error::VersionMismatch { .. } => (Exc::ProtocolError, vec![]),
        Error::ForeignPeer { .. } => (
            Exc::PermissionDenied,
            vec![("path", Some(py.None().into_bound(py)))],
        ),
        Error::PermissionDenied { path } | Error::UnsafeDirectory { path, .. } => (
            Exc::PermissionDenied,
            vec![("path", text(py, &path.display().to_string()))],
        ),
        Error::NoConsumers { .. } => (Exc::NoConsumers, vec![]),
        Error::Usage(_) => (Exc::UsageError, vec![]),
        _ => (Exc::Base, vec![]),
    }
}

/// An `IoError` with the OS error's number as `.errno`.
fn io_error(py: Python<'_>, msg: String, source: &std::io::Error) -> PyErr {
    let errno = source
        .raw_os_error()
        .and_then(|e| e.into_pyobject(py).ok())
        .map(|o| o.into_any());
    Exc::IoError.err(py, msg, &attrs(vec![("errno", errno)]))
}
