//! DLPack in both directions, for CPU memory.
//!
//! Out (consumer): [`ArrayView`] is a small Python object with
//! `__dlpack__` / `__dlpack_device__`, so `torch.from_dlpack(view)` and
//! `numpy.from_dlpack(view)` build a tensor on the arena's memory without a
//! copy. Each `__dlpack__` call makes a `DLManagedTensor` (or, when the
//! caller asks for DLPack >= 1.0, a `DLManagedTensorVersioned` flagged
//! read-only) whose `manager_ctx` owns a clone of the core's [`Keepalive`];
//! its deleter drops that clone, and dropping the last one releases the
//! slot's lease. The capsule's own destructor calls the deleter only when
//! nobody consumed the capsule (its name is still `dltensor`), as the DLPack
//! rules say.
//!
//! In (producer): [`import`] calls an array's `__dlpack__`, checks the
//! `DLTensor` (CPU, one lane, a supported dtype, C-contiguous) and returns
//! where its bytes are. The capsule is kept alive, unconsumed, until the
//! bytes are copied; its destructor then gives the tensor back to its owner.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use batchcast::DType;
use batchcast::Keepalive;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict, PyTuple};

const CAPSULE: &CStr = c"dltensor";
const CAPSULE_VERSIONED: &CStr = c"dltensor_versioned";
const DL_CPU: i32 = 1;
const DL_CUDA_HOST: i32 = 3;
const FLAG_READ_ONLY: u64 = 1 << 0;
const FLAG_IS_COPIED: u64 = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

fn dl_dtype(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::Bool => (6, 8),
        DType::U8 => (1, 8),
        DType::I8 => (0, 8),
        DType::U16 => (1, 16),
        DType::I16 => (0, 16),
        DType::U32 => (1, 32),
        DType::I32 => (0, 32),
        DType::U64 => (1, 64),
        DType::I64 => (0, 64),
        DType::F16 => (2, 16),
        DType::BF16 => (4, 16),
        DType::F32 => (2, 32),
        DType::F64 => (2, 64),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

fn from_dl_dtype(t: DLDataType) -> Option<DType> {
    if t.lanes != 1 {
        return None;
    }
    Some(match (t.code, t.bits) {
        (6, 8) => DType::Bool,
        (1, 8) => DType::U8,
        (0, 8) => DType::I8,
        (1, 16) => DType::U16,
        (0, 16) => DType::I16,
        (1, 32) => DType::U32,
        (0, 32) => DType::I32,
        (1, 64) => DType::U64,
        (0, 64) => DType::I64,
        (2, 16) => DType::F16,
        (4, 16) => DType::BF16,
        (2, 32) => DType::F32,
        (2, 64) => DType::F64,
        _ => return None,
    })
}

/// Bytes of memory of our own, 8-byte aligned (for `copy=True`).
struct AlignedCopy {
    words: Vec<u64>,
}

impl AlignedCopy {
    fn of(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `words` owns at least `bytes.len()` bytes, u8 has no
        // alignment needs, and the two buffers do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                words.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            )
        };
        AlignedCopy { words }
    }
}

/// Counts the slots that Python objects of one consumer keep leased (a
/// slot counts once however many arrays view it), so that a consumer waiting
/// for a batch can tell when its own kept batches hold the producer's whole
/// window, which would wait forever.
#[derive(Default)]
pub(crate) struct LeaseTracker {
    held: Mutex<HashMap<usize, usize>>,
}

impl LeaseTracker {
    fn add(&self, key: usize) {
        *lock(&self.held).entry(key).or_insert(0) += 1;
    }

    fn remove(&self, key: usize) {
        let mut held = lock(&self.held);
        if let Some(n) = held.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&key);
            }
        }
    }

    /// Slots held now.
    pub(crate) fn slots_held(&self) -> usize {
        lock(&self.held).len()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One hold on a leaf's memory: the core's keepalive, counted by the
/// consumer's tracker while it is a lease on shared memory.
struct Held {
    keep: Option<Keepalive>,
    tracker: Option<Arc<LeaseTracker>>,
    /// The process that made it.
    pid: u32,
}

impl Held {
    fn new(keep: Keepalive, tracker: Option<Arc<LeaseTracker>>, pid: u32) -> Self {
        if let Some(t) = &tracker {
            t.add(key_of(&keep));
        }
        Held {
            keep: Some(keep),
            tracker,
            pid,
        }
    }
}

fn key_of(keep: &Keepalive) -> usize {
    Arc::as_ptr(keep) as *const () as usize
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(keep) = self.keep.take() else {
            return;
        };
        if std::process::id() != self.pid {
            // A forked child (a DataLoader worker): the lease belongs to the
            // parent, and releasing it from here would send a second
            // `Release` on the parent's connection. Leak this copy instead.
            std::mem::forget(keep);
            return;
        }
        if let Some(t) = &self.tracker {
            t.remove(key_of(&keep));
        }
    }
}

/// An array of a consumer batch that can cross into PyTorch or NumPy
/// through DLPack.
#[pyclass(module = "batchcast._native", name = "ArrayView", frozen)]
pub struct ArrayView {
    held: Held,
    /// Address of the first byte (kept as an integer so the class is Send).
    addr: usize,
    nbytes: usize,
    dtype: DType,
    shape: Vec<i64>,
    /// True for a view of the read-only shared arena (no copy was made).
    zero_copy: bool,
}

impl ArrayView {
    /// A view of `bytes`, which `keepalive` keeps valid. A zero-copy view
    /// is counted by `tracker` while it (or a tensor made from it) lives.
    pub(crate) fn new(
        keepalive: Keepalive,
        bytes: &[u8],
        dtype: DType,
        shape: &[u64],
        zero_copy: bool,
        tracker: &Arc<LeaseTracker>,
    ) -> PyResult<Self> {
        let shape = shape
            .iter()
            .map(|&d| i64::try_from(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| PyBufferError::new_err("array dimension out of range"))?;
        let tracker = zero_copy.then(|| Arc::clone(tracker));
        Ok(ArrayView {
            held: Held::new(keepalive, tracker, std::process::id()),
            addr: bytes.as_ptr() as usize,
            nbytes: bytes.len(),
            dtype,
            shape,
            zero_copy,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `addr..addr + nbytes` lies in memory that the keepalive
        // (a lease on the slot, or an owned buffer) keeps mapped and unchanged
        // while it lives, and `self.held` holds it.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.nbytes) }
    }
}

/// What a DLPack deleter frees: the shape and strides the `DLTensor` points
/// to, and the hold that keeps the data alive.
struct Ctx {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _held: Held,
}

fn compact_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1));
    }
    strides
}

unsafe extern "C" fn delete_legacy(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were made by `Box::into_raw` in
    // `ArrayView::__dlpack__`, and DLPack calls the deleter exactly once.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx.cast::<Ctx>()));
    }
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: as in `delete_legacy`.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx.cast::<Ctx>()));
    }
}

/// Capsule destructor: frees the tensor unless a consumer took it (and
/// renamed the capsule `used_dltensor`).
unsafe extern "C" fn capsule_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule. `PyCapsule_IsValid`
    // never raises; with the name it checked, `PyCapsule_GetPointer` cannot
    // fail either, so the error indicator is left untouched.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, CAPSULE.as_ptr()).cast::<DLManagedTensor>();
            if !m.is_null() {
                if let Some(deleter) = (*m).deleter {
                    deleter(m);
                }
            }
        }
    }
}

unsafe extern "C" fn capsule_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `capsule_legacy`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE_VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if !m.is_null() {
                if let Some(deleter) = (*m).deleter {
                    deleter(m);
                }
            }
        }
    }
}

#[pymethods]
impl ArrayView {
    /// Exports the array as a DLPack capsule (CPU). Zero-copy views are
    /// read-only: with `max_version >= (1, 0)` the capsule says so.
    /// `copy=True` exports a private, writable copy instead.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // CPU memory needs no stream; any value asks for no synchronisation.
        let _ = stream;
        if let Some((kind, id)) = dl_device {
            if kind != DL_CPU || id != 0 {
                return Err(PyBufferError::new_err(format!(
                    "batchcast arrays live in CPU memory; cannot export to DLPack device ({kind}, {id})"
                )));
            }
        }
        if self.held.pid != std::process::id() {
            return Err(PyBufferError::new_err(
                "this batch was received by another process (this is a forked child); \
                 batches cannot cross a fork",
            ));
        }
        let keepalive = self
            .held
            .keep
            .clone()
            .ok_or_else(|| PyBufferError::new_err("the array was released"))?;
        let copied = copy == Some(true);
        let (data, held) = if copied {
            let own = Arc::new(AlignedCopy::of(self.bytes()));
            let data = own.words.as_ptr() as *mut c_void;
            (data, Held::new(own, None, self.held.pid))
        } else {
            let tracker = self.held.tracker.clone();
            (
                self.addr as *mut c_void,
                Held::new(keepalive, tracker, self.held.pid),
            )
        };
        let mut ctx = Box::new(Ctx {
            shape: self.shape.clone(),
            strides: compact_strides(&self.shape),
            _held: held,
        });
        let tensor = DLTensor {
            data,
            device: DLDevice {
                device_type: DL_CPU,
                device_id: 0,
            },
            ndim: self.shape.len() as i32,
            dtype: dl_dtype(self.dtype),
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx.strides.as_mut_ptr(),
            byte_offset: 0,
        };
        let ctx = Box::into_raw(ctx).cast::<c_void>();
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        // SAFETY: the managed tensor and its context are leaked into the
        // capsule; the capsule destructor or the consumer calls the deleter,
        // which frees both exactly once. The names are static strings.
        let capsule = unsafe {
            if versioned {
                let flags = if copied {
                    FLAG_IS_COPIED
                } else if self.zero_copy {
                    FLAG_READ_ONLY
                } else {
                    0
                };
                let m = Box::into_raw(Box::new(DLManagedTensorVersioned {
                    version: DLPackVersion { major: 1, minor: 0 },
                    manager_ctx: ctx,
                    deleter: Some(delete_versioned),
                    flags,
                    dl_tensor: tensor,
                }));
                let raw = ffi::PyCapsule_New(
                    m.cast(),
                    CAPSULE_VERSIONED.as_ptr(),
                    Some(capsule_versioned),
                );
                if raw.is_null() {
                    delete_versioned(m);
                }
                Bound::from_owned_ptr_or_err(py, raw)?
            } else {
                let m = Box::into_raw(Box::new(DLManagedTensor {
                    dl_tensor: tensor,
                    manager_ctx: ctx,
                    deleter: Some(delete_legacy),
                }));
                let raw = ffi::PyCapsule_New(m.cast(), CAPSULE.as_ptr(), Some(capsule_legacy));
                if raw.is_null() {
                    delete_legacy(m);
                }
                Bound::from_owned_ptr_or_err(py, raw)?
            }
        };
        Ok(capsule)
    }

    /// `(kDLCPU, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (DL_CPU, 0)
    }

    /// The shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The element type's short name (`"f32"`, `"bf16"`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// Bytes of data.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// True for a view of the shared arena (read-only); False for an array
    /// assembled from two producer batches (a private copy).
    #[getter]
    fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    fn __repr__(&self) -> String {
        format!(
            "ArrayView(shape={:?}, dtype={}, zero_copy={})",
            self.shape,
            self.dtype.name(),
            self.zero_copy
        )
    }
}

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
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1u32, 0u32))?;
    let exported = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        // Exporters older than DLPack 1.0 take no max_version.
        Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
        Err(e) => return Err(e),
    };
    let capsule = exported.cast_into::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!("{what}: __dlpack__ did not return a capsule"))
    })?;
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
    // SAFETY: the DLTensor lives as long as the capsule, which we hold.
    let t = unsafe { &*tensor };
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
    let ndim = usize::try_from(t.ndim)
        .ok()
        .filter(|&n| n <= batchcast::MAX_NDIM)
        .ok_or_else(|| {
            PyTypeError::new_err(format!("{what}: bad number of dimensions {}", t.ndim))
        })?;
    let dims: &[i64] = if ndim == 0 || t.shape.is_null() {
        &[]
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
