//! CUDA's virtual memory management: one allocation's properties, and
//! mapping a physical allocation at a reserved address range.

use cudarc::driver::sys::{
    self, CUdevice, CUdeviceptr, CUmemAccessDesc, CUmemAccess_flags,
    CUmemAllocationGranularity_flags, CUmemAllocationHandleType, CUmemAllocationProp,
    CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType,
};

use super::driver::check;
use crate::error::Result;

fn location(dev: CUdevice) -> CUmemLocation {
    CUmemLocation {
        type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: dev,
    }
}

/// Device memory on `dev`, exportable as a POSIX file descriptor.
pub(crate) fn prop(dev: CUdevice) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: location(dev),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The smallest granularity allocations on `dev` come in (current context
/// needed).
pub(crate) fn granularity(dev: CUdevice) -> Result<u64> {
    let prop = prop(dev);
    let mut g = 0usize;
    // SAFETY: g and prop are valid for the call.
    check("cuMemGetAllocationGranularity", || unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    })?;
    Ok(g as u64)
}

/// A physical allocation mapped at a reserved range of this process's
/// device address space; unmapped, freed and released by [`Mapped::free`].
pub(crate) struct Mapped {
    handle: CUmemGenericAllocationHandle,
    /// The reserved range's start; 0 when none is reserved.
    pub ptr: CUdeviceptr,
    pub size: usize,
    mapped: bool,
    released: bool,
}

impl Mapped {
    /// Maps `handle` (`size` bytes, a multiple of `granularity`) and grants
    /// `dev` `access` to it. Takes the handle: on failure it is released.
    /// A current context is needed.
    pub(crate) fn map(
        handle: CUmemGenericAllocationHandle,
        size: usize,
        granularity: usize,
        dev: CUdevice,
        access: CUmemAccess_flags,
    ) -> Result<Self> {
        let mut m = Mapped {
            handle,
            ptr: 0,
            size,
            mapped: false,
            released: false,
        };
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: ptr is a valid place for the address; size and alignment
        // are multiples of the granularity.
        let reserved = check("cuMemAddressReserve", || unsafe {
            sys::cuMemAddressReserve(&mut ptr, size, granularity, 0, 0)
        });
        if let Err(e) = reserved {
            m.free();
            return Err(e);
        }
        m.ptr = ptr;
        // SAFETY: the range was just reserved with the allocation's size.
        if let Err(e) = check("cuMemMap", || unsafe {
            sys::cuMemMap(ptr, size, 0, handle, 0)
        }) {
            m.free();
            return Err(e);
        }
        m.mapped = true;
        let desc = CUmemAccessDesc {
            location: location(dev),
            flags: access,
        };
        // SAFETY: the range is mapped; desc is one valid descriptor.
        if let Err(e) = check("cuMemSetAccess", || unsafe {
            sys::cuMemSetAccess(ptr, size, &desc, 1)
        }) {
            m.free();
            return Err(e);
        }
        Ok(m)
    }

    /// Unmaps, frees the range and releases the handle, each if it is
    /// still to do; errors are ignored (nothing is left to do about them).
    /// A current context is needed.
    pub(crate) fn free(&mut self) {
        // SAFETY: each call undoes one step `map` did, once (the flags are
        // cleared as it goes), in reverse order.
        unsafe {
            if self.mapped {
                let _ = check("cuMemUnmap", || sys::cuMemUnmap(self.ptr, self.size));
                self.mapped = false;
            }
            if self.ptr != 0 {
                let _ = check("cuMemAddressFree", || {
                    sys::cuMemAddressFree(self.ptr, self.size)
                });
                self.ptr = 0;
            }
            if !self.released {
                let _ = check("cuMemRelease", || sys::cuMemRelease(self.handle));
                self.released = true;
            }
        }
    }
}
