//! `batchcast._native.Producer`: the core producer, driven by the
//! pure-Python `batchcast.Producer`.
//!
//! `publish` takes a batch already flattened by `batchcast._tree`: a tree
//! spec and a list of `(kind, value)` leaves. With the GIL held it exports
//! every array through DLPack and extracts every list, keeping the exported
//! capsules alive; then, with the GIL released, it loans a slot (blocking
//! while the window is full, Ctrl-C checked every 100 ms), copies the bytes
//! and publishes. The capsules are dropped afterwards, which hands each
//! tensor back to its owner.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use batchcast::StatusReport;
use batchcast::MAX_DEPTH;
use batchcast::{
    DType, Durability, Error, IdlePolicy, LagBudget, LagPolicy, LeafKind, LeafSpec, Mirror, Node,
    Producer, ProducerOptions, ShutdownReason,
};
use batchcast_device::ServedDevice;
use batchcast_serve::StartWait;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::dlpack;
use crate::errors::{to_py, Exc};
use crate::warnings::Queued;
use crate::{blocking, seconds, Guarded};

/// Leaf kinds as `batchcast._tree` numbers them.
pub(crate) const KIND_ARRAY: u8 = 0;
pub(crate) const KIND_INTS: u8 = 1;
pub(crate) const KIND_FLOATS: u8 = 2;
pub(crate) const KIND_STRS: u8 = 3;

/// Bytes to copy into one leaf of a slot.
enum Source {
    /// Memory of an exported array, kept alive by its capsule.
    Raw {
        addr: usize,
        len: usize,
    },
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Strs(Vec<String>),
}

impl Source {
    fn write(&self, out: &mut [u8]) {
        match self {
            Source::Raw { addr, len } => {
                // SAFETY: `addr..addr + len` is the data of an array whose
                // DLPack capsule the caller holds until the copy is done, so
                // its owner cannot free it; `out` is a slot we hold the loan
                // of, sized from the same shape and dtype (checked by
                // `Layout::plan`), so the two ranges have the same length and
                // do not overlap.
                let src = unsafe { std::slice::from_raw_parts(*addr as *const u8, *len) };
                out[..*len].copy_from_slice(src);
            }
            Source::Ints(v) => {
                for (dst, x) in out.chunks_exact_mut(8).zip(v) {
                    dst.copy_from_slice(&x.to_le_bytes());
                }
            }
            Source::Floats(v) => {
                for (dst, x) in out.chunks_exact_mut(8).zip(v) {
                    dst.copy_from_slice(&x.to_le_bytes());
                }
            }
            Source::Strs(v) => {
                let table = 8 * (v.len() + 1);
                let (offsets, text) = out.split_at_mut(table);
                let mut at = 0usize;
                offsets[..8].copy_from_slice(&0u64.to_le_bytes());
                for (i, s) in v.iter().enumerate() {
                    text[at..at + s.len()].copy_from_slice(s.as_bytes());
                    at += s.len();
                    offsets[8 * (i + 1)..8 * (i + 2)].copy_from_slice(&(at as u64).to_le_bytes());
                }
            }
        }
    }
}

/// The tree spec of `batchcast._tree`: an int is leaf i; `("t", [...])`,
/// `("l", [...])` and `("d", [(key, child), ...])` are tuples, lists and dicts.
pub(crate) fn node_from_py(spec: &Bound<'_, PyAny>, depth: usize) -> PyResult<Node> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "the batch is nested deeper than {MAX_DEPTH} levels"
        )));
    }
    if let Ok(i) = spec.extract::<u32>() {
        return Ok(Node::Leaf(i));
    }
    let bad = || PyTypeError::new_err("malformed batch tree spec");
    let tuple = spec.cast::<PyTuple>().map_err(|_| bad())?;
    if tuple.len() != 2 {
        return Err(bad());
    }
    let tag: String = tuple.get_item(0)?.extract()?;
    let items = tuple.get_item(1)?;
    let items = items.cast::<PyList>().map_err(|_| bad())?;
    match tag.as_str() {
        "t" | "l" => {
            let children = items
                .iter()
                .map(|c| node_from_py(&c, depth + 1))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(if tag == "t" {
                Node::Tuple(children)
            } else {
                Node::List(children)
            })
        }
        "d" => {
            let mut entries = Vec::with_capacity(items.len());
            for item in items.iter() {
                let (key, child): (String, Bound<'_, PyAny>) = item.extract()?;
                entries.push((key, node_from_py(&child, depth + 1)?));
            }
            Ok(Node::Dict(entries))
        }
        _ => Err(bad()),
    }
}

/// `max_lag`: an int of bytes, or a string ("512MiB", "100batches").
fn lag_budget(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<LagBudget> {
    if let Ok(s) = v.extract::<String>() {
        return LagBudget::parse(&s).map_err(|e| to_py(py, e, None));
    }
    match v.extract::<u64>() {
        Ok(bytes) if !v.is_instance_of::<pyo3::types::PyBool>() => Ok(LagBudget::Bytes(bytes)),
        _ => Err(PyTypeError::new_err(
            "max_lag must be a number of bytes (an int of at least 0) or a string such as \
             \"512MiB\" or \"100batches\"",
        )),
    }
}

/// `(epoch, row, consumers, payload)` of a resumed stream.
type Resumed = (u64, u64, u32, Option<String>);

/// The core producer under a name (private API: use `batchcast.Producer`).
#[pyclass(module = "batchcast._native", name = "Producer", frozen)]
pub struct PyProducer {
    inner: Guarded<Producer>,
    name: String,
    socket_path: PathBuf,
    /// The core's warnings, logged after each publish.
    warnings: Queued,
    /// The GPUs its arena is mirrored on, with their copy counters.
    devices: Vec<ServedDevice>,
}

impl Drop for PyProducer {
    fn drop(&mut self) {
        // In a forked child (a DataLoader worker) the producer's sockets are
        // copies of the parent's and its control thread does not exist:
        // shutting down from here would tell the parent's consumers the
        // stream is over. Leave it alone. In its own process, dropping it
        // shuts it down with `Finished`.
        drop(self.inner.take_for_drop());
    }
}

fn parse_reason(reason: &str, message: Option<String>) -> PyResult<ShutdownReason> {
    match reason {
        "finished" => Ok(ShutdownReason::Finished),
        "interrupted" => Ok(ShutdownReason::Interrupted),
        "failed" => Ok(ShutdownReason::Failed(message.unwrap_or_default())),
        _ => Err(PyValueError::new_err(format!(
            "unknown shutdown reason {reason:?}; use \"finished\", \"interrupted\" or \"failed\""
        ))),
    }
}

impl PyProducer {
    /// The live figures. A publish blocked on a full window holds the
    /// producer, so then the control thread is asked over the socket, as
    /// `batchcast status` does.
    fn report(&self, py: Python<'_>) -> PyResult<StatusReport> {
        if let Some(r) = self.inner.try_with(|p| p.status()) {
            return Ok(r);
        }
        if self.inner.is_closed() {
            return Err(Exc::UsageError.err(
                py,
                format!("producer {:?} is closed", self.name),
                &[],
            ));
        }
        let dir = self
            .socket_path
            .parent()
            .map(|d| d.to_path_buf())
            .unwrap_or_default();
        let name = self.name.clone();
        blocking(py, move |_| {
            let endpoint = batchcast::Endpoint::in_dir(&name, dir)?;
            batchcast::query_status(&endpoint, Duration::from_secs(5))
        })
    }
}

#[pymethods]
impl PyProducer {
    /// Claims `name` and starts serving consumers.
    #[new]
    #[pyo3(signature = (name, *, window=8, slot_size=None, samples_per_epoch=None, batch_size=None,
                        wait_for_consumers=true, idle_timeout=None, dir=None, max_lag=None,
                        lag_policy="wait", stall_timeout=10.0, durable=None, fresh=false,
                        device=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: String,
        window: usize,
        slot_size: Option<usize>,
        samples_per_epoch: Option<u64>,
        batch_size: Option<u64>,
        wait_for_consumers: bool,
        idle_timeout: Option<f64>,
        dir: Option<PathBuf>,
        max_lag: Option<Bound<'_, PyAny>>,
        lag_policy: &str,
        stall_timeout: f64,
        durable: Option<String>,
        fresh: bool,
        device: Option<String>,
    ) -> PyResult<Self> {
        if fresh && durable.is_none() {
            return Err(Exc::InvalidArgument.err(
                py,
                "fresh=True discards a state file, which only a durable producer keeps: pass \
                 durable=True too, or leave fresh out",
                &[],
            ));
        }
        let durable = durable.map(|identity| Durability {
            fresh,
            ..Durability::new(identity)
        });
        let max_lag = match max_lag {
            None => None,
            Some(v) => Some(lag_budget(py, &v)?),
        };
        let lag_policy =
            LagPolicy::parse(lag_policy, stall_timeout).map_err(|e| to_py(py, e, None))?;
        let idle = if wait_for_consumers {
            IdlePolicy::Wait(seconds(py, idle_timeout, "idle_timeout")?)
        } else {
            IdlePolicy::Run
        };
        let warnings = Queued::default();
        let (mirrors, devices) = serve_devices(py, device.as_deref(), &warnings)?;
        let opts = ProducerOptions {
            window,
            slot_size,
            samples_per_epoch,
            batch_size,
            idle,
            dir,
            max_lag,
            lag_policy,
            warn: warnings.sink(),
            durable,
            mirrors,
        };
        let producer = blocking(py, |_| Producer::create(&name, opts))?;
        let socket_path = producer.socket_path();
        Ok(PyProducer {
            inner: Guarded::new(producer, format!("batchcast.Producer {name:?}")),
            name,
            socket_path,
            warnings,
            devices,
        })
    }

    /// The GPUs the arena is mirrored on (`device=`): one dict each, with
    /// its copies so far.
    #[getter]
    fn devices<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.devices
            .iter()
            .map(|(info, stats)| {
                let d = PyDict::new(py);
                d.set_item("device", &info.uuid)?;
                d.set_item("ordinal", info.ordinal)?;
                d.set_item("name", &info.name)?;
                d.set_item("copies", stats.copies())?;
                d.set_item("bytes", stats.bytes())?;
                d.set_item("seconds", stats.seconds())?;
                d.set_item("pinned", stats.pinned())?;
                d.set_item("p50_seconds", stats.latency_quantile(0.5))?;
                d.set_item("p99_seconds", stats.latency_quantile(0.99))?;
                Ok(d)
            })
            .collect()
    }

    /// Where this producer resumed the stream of a predecessor under its
    /// name: `(epoch, row, consumers, payload)`, None when it started
    /// afresh.
    #[getter]
    fn resumed(&self, py: Python<'_>) -> PyResult<Option<Resumed>> {
        self.inner.call(py, |p, _| {
            Ok(p.resumed().map(|r| {
                let payload = p.resumed_payload().map(str::to_owned);
                (r.epoch, r.row, r.consumers, payload)
            }))
        })
    }

    /// Notes the one-line text that restores the loader at the producer's
    /// head (after a batch, or after `end_epoch`); the state file keeps it
    /// with the resume point.
    fn set_resume_payload(&self, py: Python<'_>, payload: String) -> PyResult<()> {
        self.inner.call(py, |p, _| p.set_resume_payload(payload))
    }

    /// The producer's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The Unix socket consumers connect to.
    #[getter]
    fn socket_path(&self) -> PathBuf {
        self.socket_path.clone()
    }

    /// Bytes per slot, once the first batch sized the arena.
    #[getter]
    fn slot_size(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        self.inner.call(py, |p, _| Ok(p.slot_size()))
    }

    /// Consumers connected now.
    #[getter]
    fn consumers(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.report(py)?.consumers.len())
    }

    /// True once finished or closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Sets the samples of the coming epochs (before `begin_epoch`).
    #[pyo3(signature = (samples))]
    fn set_samples_per_epoch(&self, py: Python<'_>, samples: Option<u64>) -> PyResult<()> {
        self.inner.call(py, |p, _| {
            p.set_samples_per_epoch(samples);
            Ok(())
        })
    }

    /// Sets the metadata (a JSON text) announced to consumers that join
    /// from now on.
    fn set_metadata(&self, py: Python<'_>, json: String) -> PyResult<()> {
        self.inner.call(py, |p, _| p.set_metadata(json))
    }

    /// Waits until `n` consumers are connected; False on timeout.
    #[pyo3(signature = (n, timeout=None))]
    fn wait_for_consumers(&self, py: Python<'_>, n: usize, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = seconds(py, timeout, "timeout")?;
        self.inner.call(py, |producer, interrupt| {
            let deadline = timeout.map(|t| Instant::now() + t);
            loop {
                if producer.wait_for_consumers(n, Some(Duration::from_millis(100))) {
                    return Ok(true);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(false);
                }
                if interrupt() {
                    return Err(Error::Interrupted);
                }
            }
        })
    }

    /// Waits before the first epoch for `asked` consumers and for the
    /// `trainers` that `batchcast run` announced (`trainers_from_env()`),
    /// for at most `timeout` seconds (None: until interrupted); too few in
    /// time raise `NoConsumers` with the message `batchcast serve` prints.
    #[pyo3(signature = (asked, trainers, timeout=None))]
    fn wait_for_start(
        &self,
        py: Python<'_>,
        asked: usize,
        trainers: usize,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let within = seconds(py, timeout, "timeout")?;
        let start = StartWait { asked, trainers };
        let waited = self.inner.call(py, |producer, interrupt| {
            match start.wait(producer, within, interrupt) {
                Ok(true) => Ok(Ok(())),
                Ok(false) => Err(Error::Interrupted),
                Err(too_few) => Ok(Err(too_few)),
            }
        })?;
        waited.map_err(|e| Exc::NoConsumers.err(py, e.to_string(), &[]))
    }

    /// Begins the next epoch; returns its number.
    fn begin_epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.inner.call(py, |p, _| p.begin_epoch())
    }

    /// Publishes one flattened batch; returns its sequence number. Waits
    /// (GIL released) while every slot is leased.
    fn publish(
        &self,
        py: Python<'_>,
        tree: &Bound<'_, PyAny>,
        leaves: &Bound<'_, PyList>,
    ) -> PyResult<u64> {
        let node = node_from_py(tree, 0)?;
        let mut specs = Vec::with_capacity(leaves.len());
        let mut sources = Vec::with_capacity(leaves.len());
        let mut capsules = Vec::new();
        for (i, item) in leaves.iter().enumerate() {
            let (kind, value): (u8, Bound<'_, PyAny>) = item.extract()?;
            let what = format!("leaf {i}");
            match kind {
                KIND_ARRAY => {
                    let imported = dlpack::import(&value, &what)?;
                    specs.push(LeafSpec::array(imported.dtype, imported.shape));
                    sources.push(Source::Raw {
                        addr: imported.addr,
                        len: imported.nbytes,
                    });
                    capsules.push(imported.capsule);
                }
                KIND_INTS => {
                    let v: Vec<i64> = value.extract()?;
                    specs.push(list_spec(LeafKind::IntList, DType::I64, v.len(), 0));
                    sources.push(Source::Ints(v));
                }
                KIND_FLOATS => {
                    let v: Vec<f64> = value.extract()?;
                    specs.push(list_spec(LeafKind::FloatList, DType::F64, v.len(), 0));
                    sources.push(Source::Floats(v));
                }
                KIND_STRS => {
                    let v: Vec<String> = value.extract()?;
                    let text: usize = v.iter().map(|s| s.len()).sum();
                    specs.push(list_spec(
                        LeafKind::StrList,
                        DType::U8,
                        v.len(),
                        text as u64,
                    ));
                    sources.push(Source::Strs(v));
                }
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "{what}: unknown leaf kind {kind}"
                    )))
                }
            }
        }
        let seq = self.inner.call(py, move |producer, interrupt| {
            let mut slot = producer.loan(node, &specs, interrupt)?;
            for (out, src) in slot.leaves_mut().into_iter().zip(&sources) {
                src.write(out);
            }
            slot.publish()
        });
        self.warnings.log(py);
        // Only now may the arrays' owners have them back.
        drop(capsules);
        seq
    }

    /// Ends the epoch; returns `(epoch, batches, samples)`.
    fn end_epoch(&self, py: Python<'_>) -> PyResult<(u64, u64, u64)> {
        let s = self.inner.call(py, |p, _| p.end_epoch())?;
        Ok((s.epoch, s.batches, s.samples))
    }

    /// Tells every consumer the stream is over and releases the name.
    /// `reason`: "finished", "interrupted" or "failed" (with `message`).
    /// Idempotent; a no-op in a forked child. A publish blocked in another
    /// thread gives up (UsageError) within 100 ms.
    #[pyo3(signature = (reason="finished", message=None))]
    fn finish(&self, py: Python<'_>, reason: &str, message: Option<String>) -> PyResult<()> {
        let reason = parse_reason(reason, message)?;
        if let Some(producer) = self.inner.take(py) {
            py.detach(move || producer.finish(reason));
        }
        Ok(())
    }

    /// `finish("finished")`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, "finished", None)
    }

    /// Live figures, as `batchcast status` shows them.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.report(py)?;
        let d = PyDict::new(py);
        d.set_item("name", r.name)?;
        d.set_item("pid", r.pid)?;
        d.set_item("uptime_seconds", r.uptime_secs)?;
        d.set_item("slots", r.slots)?;
        d.set_item("slot_size", r.slot_size)?;
        d.set_item("epoch", r.epoch)?;
        d.set_item("published", r.published)?;
        d.set_item("batches_per_second", r.batches_per_sec)?;
        d.set_item("blocked_seconds", r.blocked_secs)?;
        d.set_item("lag_slots", r.lag_slots)?;
        d.set_item("lag_slots_used", r.lag_slots_used)?;
        d.set_item("lag_policy", r.lag_policy)?;
        d.set_item("evictions", r.evictions)?;
        d.set_item("batch_size", r.batch_size)?;
        d.set_item("samples_per_epoch", r.samples_per_epoch)?;
        d.set_item("stream", crate::stream::stream_to_py(py, &r.stream)?)?;
        let consumers = PyList::empty(py);
        for c in r.consumers {
            let e = PyDict::new(py);
            e.set_item("id", c.id)?;
            e.set_item("pid", c.pid)?;
            e.set_item("label", c.label)?;
            e.set_item("batch_size", c.batch_size)?;
            e.set_item("join", c.join)?;
            e.set_item("state", c.state)?;
            e.set_item("position", c.position)?;
            e.set_item("lag", c.lag)?;
            e.set_item("behind", c.behind)?;
            e.set_item("evictions", c.evictions)?;
            e.set_item("delivered", c.delivered)?;
            e.set_item("wait_seconds", c.wait_secs)?;
            consumers.append(e)?;
        }
        d.set_item("consumers", consumers)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<batchcast._native.Producer {:?}{}>",
            self.name,
            self.inner.closed_mark()
        )
    }
}

fn list_spec(kind: LeafKind, dtype: DType, rows: usize, text_bytes: u64) -> LeafSpec {
    LeafSpec {
        kind,
        dtype,
        shape: vec![rows as u64],
        text_bytes,
    }
}

/// The mirrors for `device=` (`"cuda:0"`, `"cuda:0,cuda:1"`), and the
/// devices to show; where they cannot be made, none, and a warning saying
/// why (the producer serves on the host path). A malformed list is an
/// InvalidArgument.
fn serve_devices(
    py: Python<'_>,
    device: Option<&str>,
    warnings: &Queued,
) -> PyResult<(Vec<Mirror>, Vec<ServedDevice>)> {
    let Some(list) = device else {
        return Ok((Vec::new(), Vec::new()));
    };
    let served = batchcast_device::serve_devices(list)
        .map_err(|e| Exc::InvalidArgument.err(py, format!("device={list:?}: {e}"), &[]))?;
    if let Some(why) = &served.fallback {
        warnings.push(why);
    }
    Ok(served.into_parts())
}
