//! Out: [`ArrayView`] and the DLPack capsules it exports, each owning a
//! hold on the slot (or on a private copy) that its deleter drops, or, for
//! a view placed on a device, hands to the consumer's deferred list (see
//! [`super::device`]).

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use batchcast::{DType, Keepalive};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::device::{DeviceHold, Placement};
use super::{
    dl_dtype, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    CAPSULE, CAPSULE_VERSIONED, DL_CPU, FLAG_IS_COPIED, FLAG_READ_ONLY,
};

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

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One hold on a leaf's memory: the core's keepalive, counted by the
/// consumer's tracker while it is a lease on shared memory.
pub(super) struct Held {
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
    /// Set when the bytes are read on a device, at `place.addr`.
    place: Option<Placement>,
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
            place: None,
        })
    }

    /// The same view, its bytes read at `place` on a device instead.
    pub(crate) fn placed(mut self, place: Placement) -> Self {
        self.place = Some(place);
        self
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `addr..addr + nbytes` lies in memory that the keepalive
        // (a lease on the slot, or an owned buffer) keeps mapped and unchanged
        // while it lives, and `self.held` holds it.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.nbytes) }
    }

    /// The hold to export a tensor with, once `dl_device` (when given) is
    /// the CPU, this process received the batch, and the array is not
    /// released.
    fn exportable(&self, dl_device: Option<(i32, i32)>) -> PyResult<Keepalive> {
        if let (Some(asked), Some(place)) = (dl_device, &self.place) {
            let here = place.map.dl_device;
            if asked != here {
                return Err(PyBufferError::new_err(format!(
                    "this batchcast array lives on DLPack device {here:?}; cannot export it to \
                     device {asked:?} (copy the tensor there instead: tensor.to(device))"
                )));
            }
        } else if let Some((kind, id)) = dl_device {
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
        self.held
            .keep
            .clone()
            .ok_or_else(|| PyBufferError::new_err("the array was released"))
    }
}

/// What a DLPack deleter frees: the shape and strides the `DLTensor` points
/// to, and the hold that keeps the data alive; for a device view, the
/// hold goes to the consumer's deferred list with the mapping instead.
struct Ctx {
    shape: Vec<i64>,
    strides: Vec<i64>,
    held: Option<Held>,
    device: Option<Placement>,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        let (Some(held), Some(place)) = (self.held.take(), self.device.take()) else {
            return;
        };
        if held.pid != std::process::id() {
            // A forked child: `held` leaks itself and the list is the
            // parent's; the mapping is left too (unmapping it would be a
            // CUDA call after fork).
            std::mem::forget(place);
            return;
        }
        let map = place.map;
        map.deferred.push(DeviceHold::new(held, map.keep));
    }
}

impl Drop for ArrayView {
    fn drop(&mut self) {
        if self.held.pid != std::process::id() {
            // A forked child: the device mapping is the parent's; unmapping
            // it here would be a CUDA call after fork.
            if let Some(place) = self.place.take() {
                std::mem::forget(place);
            }
        }
    }
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

/// The two DLPack managed-tensor structs (before 1.0, and 1.0's
/// versioned one): what [`delete`] and [`capsule`] need of each.
trait Managed: Sized {
    /// The name of a capsule that holds one.
    const CAPSULE: &'static CStr;
    /// One whose deleter is [`delete`]; `flags` are DLPack 1.0's (the
    /// struct before 1.0 has none).
    fn new(dl_tensor: DLTensor, manager_ctx: *mut c_void, flags: u64) -> Self;
    /// The `Box<Ctx>` that `__dlpack__` made, as the struct holds it.
    fn manager_ctx(&self) -> *mut c_void;
}

impl Managed for DLManagedTensor {
    const CAPSULE: &'static CStr = CAPSULE;
    fn new(dl_tensor: DLTensor, manager_ctx: *mut c_void, _flags: u64) -> Self {
        DLManagedTensor {
            dl_tensor,
            manager_ctx,
            deleter: Some(delete),
        }
    }
    fn manager_ctx(&self) -> *mut c_void {
        self.manager_ctx
    }
}

impl Managed for DLManagedTensorVersioned {
    const CAPSULE: &'static CStr = CAPSULE_VERSIONED;
    fn new(dl_tensor: DLTensor, manager_ctx: *mut c_void, flags: u64) -> Self {
        DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx,
            deleter: Some(delete),
            flags,
            dl_tensor,
        }
    }
    fn manager_ctx(&self) -> *mut c_void {
        self.manager_ctx
    }
}

/// The deleter of the tensors [`capsule`] makes.
unsafe extern "C" fn delete<M: Managed>(m: *mut M) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` was made by `Box::into_raw` in `capsule`, its context by
    // `Box::into_raw` in `ArrayView::__dlpack__`, and DLPack calls the
    // deleter exactly once.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx().cast::<Ctx>()));
    }
}

/// Capsule destructor: frees the tensor unless a consumer took it (and
/// renamed the capsule `used_dltensor`, or `used_dltensor_versioned`).
unsafe extern "C" fn destroy_capsule<M: Managed>(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule. `PyCapsule_IsValid`
    // never raises; with the name it checked, `PyCapsule_GetPointer` cannot
    // fail either, so the error indicator is left untouched. A capsule
    // `capsule` made still holds, under that name, the `M` it built with
    // `M::new`, whose deleter is `delete::<M>`; `delete` ignores a null
    // pointer.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, M::CAPSULE.as_ptr()) == 1 {
            delete(ffi::PyCapsule_GetPointer(capsule, M::CAPSULE.as_ptr()).cast::<M>());
        }
    }
}

/// A capsule of the tensor `dl_tensor` (an `M` whose deleter is
/// [`delete`]): `dltensor_versioned` (DLPack 1.0) or `dltensor` (before
/// 1.0), as `M` is.
///
/// # Safety
///
/// `manager_ctx` is a `Box<Ctx>` leaked by `Box::into_raw`, whose
/// ownership passes to the capsule (it is freed with the tensor).
unsafe fn capsule<M: Managed>(
    py: Python<'_>,
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    flags: u64,
) -> PyResult<Bound<'_, PyAny>> {
    let m = Box::into_raw(Box::new(M::new(dl_tensor, manager_ctx, flags)));
    // SAFETY: the managed tensor and its context are leaked into the
    // capsule; the capsule destructor or the consumer calls the deleter,
    // which frees both exactly once (here when no capsule was made). The
    // name is a static string.
    unsafe {
        let raw = ffi::PyCapsule_New(m.cast(), M::CAPSULE.as_ptr(), Some(destroy_capsule::<M>));
        if raw.is_null() {
            delete(m);
        }
        Bound::from_owned_ptr_or_err(py, raw)
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
        let keepalive = self.exportable(dl_device)?;
        let copied = copy == Some(true);
        if copied && self.place.is_some() {
            return Err(PyBufferError::new_err(
                "copy=True: this batchcast array lives on a device, where this module copies \
                 nothing; export it without copy and clone the tensor (tensor.clone())",
            ));
        }
        let (data, held) = if copied {
            let own = Arc::new(AlignedCopy::of(self.bytes()));
            let data = own.words.as_ptr() as *mut c_void;
            (data, Held::new(own, None, self.held.pid))
        } else {
            let tracker = self.held.tracker.clone();
            let addr = match &self.place {
                Some(place) => place.addr as usize,
                None => self.addr,
            };
            (
                addr as *mut c_void,
                Held::new(keepalive, tracker, self.held.pid),
            )
        };
        let (device_type, device_id) = self.__dlpack_device__();
        let mut ctx = Box::new(Ctx {
            shape: self.shape.clone(),
            strides: compact_strides(&self.shape),
            held: Some(held),
            device: self.place.clone(),
        });
        let tensor = DLTensor {
            data,
            device: DLDevice {
                device_type,
                device_id,
            },
            ndim: self.shape.len() as i32,
            dtype: dl_dtype(self.dtype),
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx.strides.as_mut_ptr(),
            byte_offset: 0,
        };
        let ctx = Box::into_raw(ctx).cast::<c_void>();
        // SAFETY: `ctx` was leaked just above and is handed to the capsule.
        unsafe {
            if max_version.is_some_and(|(major, _)| major >= 1) {
                let flags = if copied {
                    FLAG_IS_COPIED
                } else if self.zero_copy {
                    FLAG_READ_ONLY
                } else {
                    0
                };
                capsule::<DLManagedTensorVersioned>(py, tensor, ctx, flags)
            } else {
                capsule::<DLManagedTensor>(py, tensor, ctx, 0)
            }
        }
    }

    /// `(kDLCPU, 0)`, or for a view on a device that device
    /// (`(kDLCUDA, ordinal)`).
    fn __dlpack_device__(&self) -> (i32, i32) {
        match &self.place {
            Some(place) => place.map.dl_device,
            None => (DL_CPU, 0),
        }
    }

    /// True when the bytes are read on a device (the producer's mirror of
    /// the arena there), not in this process's memory.
    #[getter]
    fn on_device(&self) -> bool {
        self.place.is_some()
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
            "ArrayView(shape={:?}, dtype={}, zero_copy={}, on_device={})",
            self.shape,
            self.dtype.name(),
            self.zero_copy,
            self.place.is_some()
        )
    }
}
