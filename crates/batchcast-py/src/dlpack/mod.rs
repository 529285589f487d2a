//! DLPack in both directions, for CPU memory (and out, device memory).
//!
//! Out (consumer): [`ArrayView`] is a small Python object with
//! `__dlpack__` / `__dlpack_device__`, so `torch.from_dlpack(view)` and
//! `numpy.from_dlpack(view)` build a tensor on the arena's memory without a
//! copy. Each `__dlpack__` call makes a `DLManagedTensor` (or, when the
//! caller asks for DLPack >= 1.0, a `DLManagedTensorVersioned` flagged
//! read-only) whose `manager_ctx` owns a clone of the core's [`Keepalive`](batchcast::Keepalive);
//! its deleter drops that clone, and dropping the last one releases the
//! slot's lease. The capsule's own destructor calls the deleter only when
//! nobody consumed the capsule (its name is still `dltensor`), as the DLPack
//! rules say.
//!
//! Device views ([`device`]): a consumer on a GPU the producer mirrors
//! its arena to places a batch's arrays at their address in its mapping of
//! that mirror; their capsules carry that device, and a freed tensor's
//! lease waits on the consumer's deferred list for a fence.
//!
//! In (producer): [`import`] calls an array's `__dlpack__`, checks the
//! `DLTensor` (CPU, one lane, a supported dtype, C-contiguous) and returns
//! where its bytes are. The capsule is kept alive, unconsumed, until the
//! bytes are copied; its destructor then gives the tensor back to its owner.

mod device;
mod export;
mod import;

use std::ffi::{c_void, CStr};

use batchcast::DType;

pub use device::Released;
pub(crate) use device::{Deferred, DeviceMap};
pub(crate) use export::lock;
pub use export::ArrayView;
pub(crate) use export::LeaseTracker;
pub(crate) use import::{import, Imported};

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
#[derive(Clone, Copy, PartialEq, Eq)]
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

/// The DLPack type of `d`: its type code (DLPack's `kDLInt` 0, `kDLUInt` 1,
/// `kDLFloat` 2, `kDLBfloat` 4, `kDLBool` 6), its element size in bits, one
/// lane.
fn dl_dtype(d: DType) -> DLDataType {
    let code = match d {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => 0,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => 1,
        DType::F16 | DType::F32 | DType::F64 => 2,
        DType::BF16 => 4,
        DType::Bool => 6,
    };
    DLDataType {
        code,
        // At most 8 bytes: 64 bits.
        bits: 8 * d.size() as u8,
        lanes: 1,
    }
}

/// The dtype whose DLPack type `t` is (`dl_dtype`'s inverse); None for
/// one batchcast does not carry (more than one lane included).
fn from_dl_dtype(t: DLDataType) -> Option<DType> {
    DType::ALL.into_iter().find(|&d| dl_dtype(d) == t)
}
