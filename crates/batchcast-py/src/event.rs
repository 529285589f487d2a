//! The events of `_native.Consumer` as Python tuples: a batch's arrays as
//! [`ArrayView`]s (placed on the device when the consumer maps the
//! producer's mirror there), its per-sample lists as Python lists.

use std::sync::Arc;

use batchcast::{Event, Keepalive, LeafKind, Node, ShutdownReason};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::dlpack::{ArrayView, DeviceMap, LeaseTracker};
use crate::errors::Exc;

pub(crate) fn tree_to_py<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    Ok(match node {
        Node::Leaf(i) => i.into_pyobject(py)?.into_any(),
        Node::Tuple(items) | Node::List(items) => {
            let tag = if matches!(node, Node::Tuple(_)) {
                "t"
            } else {
                "l"
            };
            let children = items
                .iter()
                .map(|c| tree_to_py(py, c))
                .collect::<PyResult<Vec<_>>>()?;
            (tag, PyList::new(py, children)?)
                .into_pyobject(py)?
                .into_any()
        }
        Node::Dict(items) => {
            let entries = items
                .iter()
                .map(|(k, c)| (k, tree_to_py(py, c)?).into_pyobject(py))
                .collect::<PyResult<Vec<_>>>()?;
            ("d", PyList::new(py, entries)?)
                .into_pyobject(py)?
                .into_any()
        }
    })
}

fn words<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    bytes.chunks_exact(N).map(|c| {
        let mut w = [0u8; N];
        w.copy_from_slice(c);
        w
    })
}

fn batch_to_py<'py>(
    py: Python<'py>,
    batch: batchcast::Batch,
    tracker: &Arc<LeaseTracker>,
    plane: Option<&DeviceMap>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (epoch, index, rows) = (batch.epoch, batch.index, batch.rows());
    let (tree, leaves) = batch.into_parts();
    let spec = tree_to_py(py, &tree)?;
    let out = PyList::empty(py);
    for leaf in leaves {
        match leaf.kind() {
            LeafKind::Array => {
                let keep: Keepalive = leaf.keepalive().ok_or_else(|| {
                    Exc::ProtocolError.err(py, "an array leaf without memory", &[])
                })?;
                let mut view = ArrayView::new(
                    keep,
                    leaf.bytes(),
                    leaf.dtype(),
                    leaf.shape(),
                    leaf.is_zero_copy(),
                    tracker,
                )?;
                // A view of a slot lies at the same offset of the mirror;
                // an assembled batch is host memory.
                let place = plane.zip(leaf.arena_offset()).map(|(map, offset)| {
                    map.place(offset as u64, leaf.bytes().len() as u64)
                        .ok_or_else(|| {
                            let msg = "an array outside the device's mirror of the arena";
                            Exc::ProtocolError.err(py, msg, &[])
                        })
                });
                if let Some(place) = place {
                    view = view.placed(place?);
                }
                out.append(Bound::new(py, view)?)?;
            }
            LeafKind::IntList => {
                let v: Vec<i64> = words::<8>(leaf.bytes()).map(i64::from_le_bytes).collect();
                out.append(PyList::new(py, v)?)?;
            }
            LeafKind::FloatList => {
                let v: Vec<f64> = words::<8>(leaf.bytes()).map(f64::from_le_bytes).collect();
                out.append(PyList::new(py, v)?)?;
            }
            LeafKind::StrList => {
                out.append(PyList::new(py, leaf.strings().unwrap_or(&[]))?)?;
            }
        }
    }
    ("batch", epoch, index, spec, out, rows).into_pyobject(py)
}

fn reason_to_py(reason: &ShutdownReason) -> (&'static str, String) {
    match reason {
        ShutdownReason::Finished => ("finished", String::new()),
        ShutdownReason::Interrupted => ("interrupted", String::new()),
        ShutdownReason::Failed(why) => ("failed", why.clone()),
    }
}

/// A core event as the tuple `next_event` returns.
pub(crate) fn event_to_py<'py>(
    py: Python<'py>,
    event: Event,
    tracker: &Arc<LeaseTracker>,
    plane: Option<&DeviceMap>,
) -> PyResult<Bound<'py, PyTuple>> {
    match event {
        Event::EpochStart(info) => (
            "start",
            info.epoch,
            info.samples,
            info.batches,
            info.batch_size,
            info.partial,
            info.first_row,
        )
            .into_pyobject(py),
        Event::Batch(batch) => batch_to_py(py, batch, tracker, plane),
        Event::EpochEnd { epoch, samples } => ("end", epoch, samples).into_pyobject(py),
        Event::Trigger(t) => {
            let (first, last) = t.arrivals.unzip();
            ("trigger", t.id, t.seq, t.epoch, t.samples, first, last).into_pyobject(py)
        }
        Event::Finished(reason) => {
            let (kind, message) = reason_to_py(&reason);
            ("finished", kind, message).into_pyobject(py)
        }
    }
}
