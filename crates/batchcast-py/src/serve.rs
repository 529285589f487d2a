//! `_native.serve` and `_native.ServeRule`: the serve loop of
//! `batchcast-serve` and the core's rule of when serving ends, for Python.
//!
//! `serve(args, events=None)` is `batchcast serve ARGS`, in this process:
//! the same flags (parsed by the same definitions), the same lines on
//! stderr, the same `--json` event lines (to `sys.stdout`, or each to
//! `events(line)`), the same loop. It runs with the GIL released; every
//! 100 ms while waiting and after each batch it runs Python's signal
//! handlers, so Ctrl-C (and SIGTERM, where a handler raises) stops it
//! cleanly: the consumers are told, the summary is printed, and the
//! exception is re-raised. `python -m batchcast.serve` and `batchcast.ray`
//! use it.
//!
//! `ServeRule` is [`batchcast::ServeUntil`], which `batchcast.Producer.run`
//! follows instead of a rule of its own; `trainers_from_env` is the count
//! of trainers `batchcast run` announced, which `batchcast.Producer` waits
//! for (with `_native.Producer.wait_for_start`) as `batchcast serve` does.

use batchcast::{AfterLoanError, ServeUntil};
use batchcast_pipeline::PipelineError;
use batchcast_serve::{Face, ServeArgs, ServeError};
use clap::Parser;
use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::errors::{to_py, Exc};

/// The flags of `batchcast serve`, as a program of their own.
#[derive(Debug, Parser)]
#[command(
    name = "python -m batchcast.serve",
    about = "Serve batches under a name (a producer), as `batchcast serve` does"
)]
struct Command {
    #[command(flatten)]
    args: ServeArgs,
}

/// The Python face of the serve loop.
struct PyFace {
    /// Called with each event line; `sys.stdout` when None.
    events: Option<Py<PyAny>>,
    /// The exception a signal handler or `events` raised.
    pending: Option<PyErr>,
}

impl Face for PyFace {
    fn interrupted(&mut self) -> bool {
        if self.pending.is_some() {
            return true;
        }
        match Python::try_attach(|py| py.check_signals()) {
            Some(Ok(())) => false,
            Some(Err(e)) => {
                self.pending = Some(e);
                true
            }
            // The interpreter is shutting down: stop.
            None => true,
        }
    }

    fn event(&mut self, line: &str) -> std::io::Result<()> {
        let written = Python::try_attach(|py| -> PyResult<()> {
            match &self.events {
                Some(f) => f.call1(py, (line,)).map(drop),
                None => {
                    let out = py.import("sys")?.getattr("stdout")?;
                    out.call_method1("write", (format!("{line}\n"),))?;
                    out.call_method0("flush").map(drop)
                }
            }
        });
        match written {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => {
                let msg = e.to_string();
                self.pending = Some(e);
                Err(std::io::Error::other(msg))
            }
            None => Err(std::io::Error::other("the interpreter is shutting down")),
        }
    }
}

/// A pipeline error as the Python exception a caller would catch.
pub(crate) fn pipeline_to_py(py: Python<'_>, err: &PipelineError, msg: String) -> PyErr {
    match err {
        PipelineError::Io { .. } | PipelineError::Write { .. } => Exc::IoError.err(py, msg, &[]),
        _ => Exc::InvalidArgument.err(py, msg, &[]),
    }
}

/// Maps a serve error (with its whole chain as the message) to Python;
/// `pending` is what a signal handler or the `events` callback raised.
fn serve_to_py(py: Python<'_>, err: ServeError, pending: Option<PyErr>) -> PyErr {
    let msg = err.chain();
    match err {
        ServeError::Core(e) => to_py(py, e, pending),
        ServeError::Pipeline(e) => pipeline_to_py(py, &e, msg),
        ServeError::Batch { error, .. } => match *error {
            ServeError::Pipeline(e) => pipeline_to_py(py, &e, msg),
            ServeError::Core(e) => to_py(py, e, pending),
            _ => Exc::InvalidArgument.err(py, msg, &[]),
        },
        ServeError::TooFewConsumers(_) => Exc::NoConsumers.err(py, msg, &[]),
        ServeError::ConsumersEnv(_) => Exc::InvalidArgument.err(py, msg, &[]),
        ServeError::Output(_) => pending.unwrap_or_else(|| Exc::IoError.err(py, msg, &[])),
        ServeError::InvalidArgument(_) => Exc::InvalidArgument.err(py, msg, &[]),
        _ => Exc::Base.err(py, msg, &[]),
    }
}

/// Runs `batchcast serve ARGS` in this process (see the module docs) and
/// returns its summary as a JSON object's text (the `summary` of the
/// `finished` event line). Flags it cannot parse (and `--help`)
/// raise `InvalidArgument` with the usage text and `.exit_code` (2, or 0
/// for `--help`).
#[pyfunction]
#[pyo3(signature = (args, events=None))]
pub(crate) fn serve(
    py: Python<'_>,
    args: Vec<String>,
    events: Option<Py<PyAny>>,
) -> PyResult<String> {
    let argv = std::iter::once("batchcast serve".to_string()).chain(args);
    let command = Command::try_parse_from(argv).map_err(|e| {
        let code = e.exit_code().into_pyobject(py).map(|c| c.into_any()).ok();
        let attrs: Vec<(&str, Bound<'_, PyAny>)> =
            code.into_iter().map(|c| ("exit_code", c)).collect();
        Exc::InvalidArgument.err(py, e.render().to_string().trim_end().to_string(), &attrs)
    })?;
    let mut face = PyFace {
        events,
        pending: None,
    };
    let result = py.detach(|| batchcast_serve::run(&command.args, &mut face));
    match result {
        Ok(summary) => match face.pending {
            // Interrupted cleanly: the consumers were told; re-raise.
            Some(e) => Err(e),
            None => serde_json::to_string(&summary)
                .map_err(|e| Exc::Base.err(py, format!("cannot encode the summary: {e}"), &[])),
        },
        Err(e) => Err(serve_to_py(py, e, face.pending)),
    }
}

/// When serving ends: `batchcast.ServeUntil` of the core, the rule that
/// `batchcast serve` follows (private API: `batchcast.Producer.run` uses it).
#[pyclass(module = "batchcast._native", name = "ServeRule", frozen)]
pub struct PyServeRule {
    until: ServeUntil,
}

#[pymethods]
impl PyServeRule {
    /// `epochs=None` serves until no consumer is left for the idle
    /// timeout (once a batch was served), `epochs=N` exactly N epochs,
    /// `forever=True` until interrupted.
    #[new]
    #[pyo3(signature = (epochs=None, *, forever=false))]
    fn new(py: Python<'_>, epochs: Option<Bound<'_, PyAny>>, forever: bool) -> PyResult<Self> {
        let count = match &epochs {
            None => None,
            Some(v) => match v.extract::<u64>() {
                Ok(n) if !v.is_instance_of::<PyBool>() => Some(n),
                _ => {
                    let shown = v.repr().map(|r| r.to_string()).unwrap_or_default();
                    return Err(Exc::InvalidArgument.err(
                        py,
                        format!("epochs must be a non-negative int or None, not {shown}"),
                        &[],
                    ));
                }
            },
        };
        let until = match (count, forever) {
            (Some(n), true) => {
                return Err(Exc::InvalidArgument.err(
                    py,
                    format!(
                        "forever=True serves until interrupted; it cannot be combined with \
                         epochs={n}"
                    ),
                    &[],
                ))
            }
            (Some(n), false) => ServeUntil::Epochs(n),
            (None, true) => ServeUntil::Interrupted,
            (None, false) => ServeUntil::Idle,
        };
        Ok(PyServeRule { until })
    }

    /// True when no consumer attached is waited out (`forever=True`).
    #[getter]
    fn forever(&self) -> bool {
        self.until == ServeUntil::Interrupted
    }

    /// True while another epoch is due after `done` epochs.
    fn wants_epoch(&self, done: u64) -> bool {
        self.until.wants_epoch(done)
    }

    /// What `NoConsumers` from a publish means, once `served` batches were
    /// published: "retry" (publish again), "end" (finish cleanly: no
    /// consumer is left) or "raise".
    fn after_no_consumers(&self, served: u64) -> &'static str {
        let idle = batchcast::Error::NoConsumers { secs: 0.0 };
        match self.until.after_loan_error(idle, served) {
            AfterLoanError::Retry => "retry",
            AfterLoanError::EndIdle => "end",
            AfterLoanError::EndInterrupted | AfterLoanError::Fail(_) => "raise",
        }
    }
}

/// The number of trainers `batchcast run` announced in
/// `BATCHCAST_CONSUMERS` (0: none); `InvalidArgument` when it is not a
/// whole number.
#[pyfunction]
pub(crate) fn trainers_from_env(py: Python<'_>) -> PyResult<usize> {
    batchcast_serve::trainers_from_env()
        .map_err(|e| Exc::InvalidArgument.err(py, e.to_string(), &[]))
}

/// Adds `serve`, `trainers_from_env` and `ServeRule` to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_function(wrap_pyfunction!(trainers_from_env, m)?)?;
    m.add_class::<PyServeRule>()
}
