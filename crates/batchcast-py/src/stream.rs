//! A producer's [`StreamSpec`] as the plain dict `batchcast._spec` reads:
//! `{"structure": str | None, "tree": spec | None, "leaves": [{"kind",
//! "dtype", "shape"}], "metadata": str}`, the tree in the form batches use.

use batchcast::dtype_name;
use batchcast::LeafKind;
use batchcast::StreamSpec;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::event::tree_to_py;

pub(crate) fn stream_to_py<'py>(
    py: Python<'py>,
    spec: &StreamSpec,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("metadata", &spec.metadata)?;
    let leaves = PyList::empty(py);
    match &spec.first_batch {
        Some(shape) => {
            d.set_item("structure", shape.describe())?;
            d.set_item("tree", tree_to_py(py, &shape.tree)?)?;
            for l in &shape.leaves {
                let e = PyDict::new(py);
                let kind = match l.kind {
                    LeafKind::Array => "array",
                    LeafKind::IntList => "ints",
                    LeafKind::FloatList => "floats",
                    LeafKind::StrList => "strs",
                };
                e.set_item("kind", kind)?;
                e.set_item("dtype", dtype_name(l.dtype))?;
                e.set_item("shape", PyTuple::new(py, &l.sample_shape)?)?;
                leaves.append(e)?;
            }
        }
        None => {
            d.set_item("structure", py.None())?;
            d.set_item("tree", py.None())?;
        }
    }
    d.set_item("leaves", leaves)?;
    Ok(d)
}
