//! The producer's mirror on a CUDA device: an exportable allocation, the
//! page-locked arena, and a stream that copies into it.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use batchcast::DeviceMirror;
use cudarc::driver::sys::{
    self, CUdevice, CUmemAccess_flags, CUmemAllocationHandleType, CUstream, CUstream_flags,
};

use super::driver::{check, Primary};
use super::vmm::{self, Mapped};
use crate::backend::{check_copy, Mirror};
use crate::error::{Error, Result};
use crate::import_info::ImportInfo;
use crate::stats::MirrorStats;

pub(super) fn new(dev: CUdevice, uuid: String) -> Result<Mirror> {
    let primary = Primary::retain(dev)?;
    let mut stream: CUstream = std::ptr::null_mut();
    {
        let _current = primary.push()?;
        // SAFETY: stream is a valid place for the handle; a context is
        // current.
        check("cuStreamCreate", || unsafe {
            sys::cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
    }
    let stats = Arc::new(MirrorStats::default());
    let inner = CudaMirror {
        uuid,
        dev,
        stream,
        mapped: None,
        info: None,
        len: 0,
        host: None,
        stats: stats.clone(),
        primary,
    };
    Ok(Mirror::new(Box::new(inner), stats))
}

struct CudaMirror {
    uuid: String,
    dev: CUdevice,
    stream: CUstream,
    mapped: Option<Mapped>,
    info: Option<ImportInfo>,
    /// The arena's length: copies end at or before it.
    len: u64,
    /// The page-locked arena range (address, length), where registering it
    /// succeeded.
    host: Option<(usize, usize)>,
    stats: Arc<MirrorStats>,
    /// Dropped last: the context is released after everything in it.
    primary: Primary,
}

// SAFETY: the stream is a driver handle any thread may use with its
// context current; the mirror is used by one thread at a time (&mut).
unsafe impl Send for CudaMirror {}

impl CudaMirror {
    fn allocate_inner(&mut self, len: u64, arena_addr: usize) -> Result<OwnedFd> {
        if self.mapped.is_some() {
            return Err(Error::io(
                "allocate",
                io::Error::other("this mirror is already allocated"),
            ));
        }
        let _current = self.primary.push()?;
        let granularity = vmm::granularity(self.dev)?;
        let info = ImportInfo::for_len(len, granularity)?;
        let size = usize::try_from(info.size)
            .map_err(|e| Error::io("mirror size", io::Error::other(e)))?;
        let prop = vmm::prop(self.dev);
        let mut handle = 0;
        // SAFETY: handle and prop are valid; size is a multiple of the
        // granularity.
        check("cuMemCreate", || unsafe {
            sys::cuMemCreate(&mut handle, size, &prop, 0)
        })?;
        let access = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        let mut mapped = Mapped::map(handle, size, granularity as usize, self.dev, access)?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: fd is a valid place for the exported descriptor.
        let exported = check("cuMemExportToShareableHandle", || unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                handle,
                CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        });
        if let Err(e) = exported {
            mapped.free();
            return Err(e);
        }
        self.mapped = Some(mapped);
        self.info = Some(info);
        self.len = len;
        // SAFETY: the driver just created this descriptor for the caller,
        // who now owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let host_len = usize::try_from(len).unwrap_or(usize::MAX);
        // SAFETY: the caller maps `len` bytes at arena_addr for as long as
        // this mirror lives (DeviceMirror::allocate's contract); they are
        // unregistered in Drop. PORTABLE: the page-locking serves every
        // context, so the mirrors on other GPUs copy from it too (their own
        // registration of the same range is refused as already registered,
        // and they leave the unregistering to this one).
        let pinned = check("cuMemHostRegister", || unsafe {
            sys::cuMemHostRegister_v2(
                arena_addr as *mut std::ffi::c_void,
                host_len,
                sys::CU_MEMHOSTREGISTER_PORTABLE,
            )
        });
        let already = matches!(&pinned, Err(Error::Driver { code, .. }) if code.contains("ALREADY_REGISTERED"));
        self.host = pinned.is_ok().then_some((arena_addr, host_len));
        self.stats.set_pinned(pinned.is_ok() || already);
        Ok(fd)
    }

    fn copy_inner(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let mapped = self
            .mapped
            .as_ref()
            .ok_or_else(|| Error::io("copy_in", io::Error::other("before allocate")))?;
        check_copy(offset, bytes.len(), self.len).map_err(|e| Error::io("copy_in", e))?;
        let _current = self.primary.push()?;
        let dst = mapped.ptr + offset;
        // SAFETY: dst..dst+len lies in the mapped allocation (checked
        // above); bytes is valid host memory until the stream is
        // synchronised below, before this returns.
        check("cuMemcpyHtoDAsync", || unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, bytes.as_ptr().cast(), bytes.len(), self.stream)
        })?;
        // SAFETY: the stream belongs to this mirror.
        check("cuStreamSynchronize", || unsafe {
            sys::cuStreamSynchronize(self.stream)
        })
    }
}

impl DeviceMirror for CudaMirror {
    fn device(&self) -> &str {
        &self.uuid
    }

    fn import_info(&self) -> Vec<u8> {
        self.info.map(|i| i.encode()).unwrap_or_default()
    }

    fn allocate(&mut self, len: u64, arena_addr: usize) -> io::Result<OwnedFd> {
        Ok(self.allocate_inner(len, arena_addr)?)
    }

    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        Ok(self.copy_inner(offset, bytes)?)
    }
}

impl Drop for CudaMirror {
    fn drop(&mut self) {
        let Ok(_current) = self.primary.push() else {
            return;
        };
        // SAFETY: each handle below belongs to this mirror and is given
        // back once: copies are finished first (synchronise), then the
        // device memory goes, then the host registration and the stream.
        unsafe {
            let _ = check("cuStreamSynchronize", || {
                sys::cuStreamSynchronize(self.stream)
            });
            if let Some(mapped) = self.mapped.as_mut() {
                mapped.free();
            }
            if let Some((addr, _)) = self.host.take() {
                let _ = check("cuMemHostUnregister", || {
                    sys::cuMemHostUnregister(addr as *mut std::ffi::c_void)
                });
            }
            let _ = check("cuStreamDestroy", || sys::cuStreamDestroy_v2(self.stream));
        }
    }
}
