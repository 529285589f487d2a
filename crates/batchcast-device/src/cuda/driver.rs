//! Loading the driver library, checking calls, and the primary context.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUresult};

use crate::error::{Error, Result};

/// The library CUDA's driver API lives in.
pub(crate) const LIBCUDA: &str = "libcuda.so.1";

/// Checks that the driver library loads, before any call into it: cudarc
/// panics on first use when it cannot load the library, and a missing
/// driver must be an error, not a panic.
pub(crate) fn load() -> Result<()> {
    // SAFETY: loading libcuda runs its initialisers, which is what loading
    // it for any CUDA program does; nothing is called through it here.
    if unsafe { sys::is_culib_present() } {
        return Ok(());
    }
    Err(Error::NoDriver {
        library: LIBCUDA.to_string(),
        message: loader_message(),
    })
}

/// What the dynamic loader says about `libcuda.so.1`.
fn loader_message() -> String {
    const NAME: &CStr = c"libcuda.so.1";
    // SAFETY: NAME is a NUL-terminated string; a handle that comes back is
    // closed at once; dlerror's string is copied before any other dl call.
    unsafe {
        let handle = libc::dlopen(NAME.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if !handle.is_null() {
            libc::dlclose(handle);
            return "it loads, but none of cudarc's names for it did".to_string();
        }
        let msg = libc::dlerror();
        if msg.is_null() {
            return "the loader gave no reason".to_string();
        }
        CStr::from_ptr(msg).to_string_lossy().into_owned()
    }
}

/// Runs one driver call and turns its result into an error naming it.
/// cudarc resolves each symbol at its first call and panics when the
/// library lacks it (a driver older than the bindings): that panic is
/// caught here and becomes an error, so none crosses into a caller.
pub(crate) fn check(call: &'static str, f: impl FnOnce() -> CUresult) -> Result<()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(CUresult::CUDA_SUCCESS) => Ok(()),
        Ok(code) => Err(Error::Driver {
            call,
            code: format!("{code:?} ({})", code as u32),
        }),
        Err(_) => Err(Error::Driver {
            call,
            code: format!(
                "{LIBCUDA} lacks this call: update the NVIDIA driver (CUDA 12.8 or newer)"
            ),
        }),
    }
}

/// A device's primary context (the one PyTorch uses), retained; released
/// when dropped.
pub(crate) struct Primary {
    dev: CUdevice,
    ctx: CUcontext,
}

// SAFETY: a CUDA context is a driver handle that any thread may make
// current; this type only pushes, pops and releases it.
unsafe impl Send for Primary {}
// SAFETY: as above; no method mutates the handle itself.
unsafe impl Sync for Primary {}

impl Primary {
    pub(crate) fn retain(dev: CUdevice) -> Result<Self> {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: ctx is a valid place for the handle; dev came from
        // cuDeviceGet.
        check("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        Ok(Primary { dev, ctx })
    }

    /// Makes the context current on this thread until the guard drops.
    pub(crate) fn push(&self) -> Result<Current<'_>> {
        // SAFETY: ctx is a retained primary context.
        check("cuCtxPushCurrent", || unsafe {
            sys::cuCtxPushCurrent_v2(self.ctx)
        })?;
        Ok(Current { _primary: self })
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        // SAFETY: this value retained the context once; it releases it once.
        let _ = check("cuDevicePrimaryCtxRelease", || unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.dev)
        });
    }
}

/// The primary context is current on this thread while this lives.
pub(crate) struct Current<'a> {
    _primary: &'a Primary,
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: the matching push made a context current on this thread.
        let _ = check("cuCtxPopCurrent", || unsafe {
            sys::cuCtxPopCurrent_v2(&mut popped)
        });
    }
}
