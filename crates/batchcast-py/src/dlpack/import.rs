//! In: [`import`] checks the `DLTensor` an array exports and says where
//! its bytes are.

use batchcast::DType;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict};

use super::{
    from_dl_dtype, DLManagedTensor, DLManagedTensorVersioned, DLTensor, CAPSULE, CAPSULE_VERSIONED,
    DL_CPU, DL_CUDA_HOST, FLAG_READ_ONLY,
};

/// Where the bytes of an exported array are, while its capsule lives.
pub(crate) struct Imported<'py> {
    /// Keeps the bytes alive; dropping it returns the tensor to its owner.
    pub capsule: Bound<'py, PyCapsule>,
    /// First byte.
    pub addr: usize,
    /// Bytes.
    pub nbytes: usize,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// The exporter marked the array read-only (DLPack 1.0's flag).
    pub read_only: bool,
}

/// Exports `obj` (a NumPy array, a PyTorch tensor, anything with
/// `__dlpack__`) and checks it is a C-contiguous CPU array of a supported
/// dtype. `what` names the array in errors.
pub(crate) fn import<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Imported<'py>> {
    let capsule = export(obj, what)?;
    let (t, read_only) = tensor_of(&capsule, what)?;
    if t.device.device_type != DL_CPU && t.device.device_type != DL_CUDA_HOST {
        return Err(PyTypeError::new_err(format!(
            "{what}: the array is on DLPack device type {}; move it to the CPU first",
            t.device.device_type
        )));
    }
    let dtype = from_dl_dtype(t.dtype).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{what}: cannot send DLPack dtype (code {}, bits {}, lanes {}); batchcast sends bool, \
             (u)int8-64, float16, bfloat16, float32 and float64",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;
    let shape = c_contiguous_shape(t, what)?;
    let nbytes = shape
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| PyTypeError::new_err(format!("{what}: the array is too large")))?;
    let addr = (t.data as usize).wrapping_add(t.byte_offset as usize);
    if addr == 0 && nbytes > 0 {
        return Err(PyTypeError::new_err(format!(
            "{what}: the array has no data"
        )));
    }
    Ok(Imported {
        capsule,
        addr,
        nbytes,
        dtype,
        shape,
        read_only,
    })
}

/// The capsule `obj.__dlpack__` returns, asked for DLPack 1.0 where the
/// exporter knows it.
fn export<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyCapsule>> {
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1u32, 0u32))?;
    let exported = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        // Exporters older than DLPack 1.0 take no max_version.
        Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
        Err(e) => return Err(e),
    };
    exported
        .cast_into::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: __dlpack__ did not return a capsule")))
}

/// The `DLTensor` in an unconsumed DLPack capsule (versioned 1.x or
/// legacy), and whether the exporter marked it read-only.
fn tensor_of<'c>(capsule: &'c Bound<'_, PyCapsule>, what: &str) -> PyResult<(&'c DLTensor, bool)> {
    let mut read_only = false;
    let tensor: *const DLTensor = if capsule.is_valid_checked(Some(CAPSULE_VERSIONED)) {
        let m = capsule.pointer_checked(Some(CAPSULE_VERSIONED))?;
        let m = m.as_ptr().cast::<DLManagedTensorVersioned>();
        // SAFETY: a valid, unconsumed versioned capsule holds a
        // DLManagedTensorVersioned that lives as long as the capsule.
        let major = unsafe { (*m).version.major };
        if major != 1 {
            return Err(PyBufferError::new_err(format!(
                "{what}: DLPack version {major} is not supported"
            )));
        }
        // SAFETY: as above.
        read_only = unsafe { (*m).flags } & FLAG_READ_ONLY != 0;
        // SAFETY: as above.
        unsafe { &raw const (*m).dl_tensor }
    } else if capsule.is_valid_checked(Some(CAPSULE)) {
        let m = capsule.pointer_checked(Some(CAPSULE))?;
        // SAFETY: a valid, unconsumed legacy capsule holds a DLManagedTensor
        // that lives as long as the capsule.
        unsafe { &raw const (*m.as_ptr().cast::<DLManagedTensor>()).dl_tensor }
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what}: __dlpack__ returned a capsule that is not a DLPack tensor"
        )));
    };
    // SAFETY: the DLTensor lives as long as the capsule, which the returned
    // reference borrows.
    Ok((unsafe { &*tensor }, read_only))
}

/// The shape of `t`, once its dimensions are checked (at most
/// [`batchcast::MAX_NDIM`], none negative) and its strides are C-contiguous.
fn c_contiguous_shape(t: &DLTensor, what: &str) -> PyResult<Vec<u64>> {
    let ndim = usize::try_from(t.ndim)
        .ok()
        .filter(|&n| n <= batchcast::MAX_NDIM)
        .ok_or_else(|| {
            PyTypeError::new_err(format!("{what}: bad number of dimensions {}", t.ndim))
        })?;
    let dims: &[i64] = if ndim == 0 {
        &[]
    } else if t.shape.is_null() {
        return Err(PyTypeError::new_err(format!(
            "{what}: the exporter gave {ndim} dimensions but no shape (a broken __dlpack__)"
        )));
    } else {
        // SAFETY: a DLTensor's shape holds ndim entries.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let shape = dims
        .iter()
        .map(|&d| u64::try_from(d))
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: negative dimension")))?;
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: when present, strides hold ndim entries.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut expected = 1i64;
        for i in (0..ndim).rev() {
            if dims[i] > 1 && strides[i] != expected {
                return Err(PyTypeError::new_err(format!(
                    "{what}: the array is not C-contiguous (call .contiguous() or \
                     numpy.ascontiguousarray first)"
                )));
            }
            expected = expected.saturating_mul(dims[i].max(1));
        }
    }
    Ok(shape)
}
