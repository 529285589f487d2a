//! CUDA, through the driver API loaded at run time (cudarc's `sys`).
//!
//! Verified on a GPU: nothing yet (scripts/gpu-check.sh checks it).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, OwnedFd};

use batchcast::MirrorSpec;
use cudarc::driver::sys::{
    self, CUdevice, CUdevice_attribute, CUmemAccess_flags, CUmemAllocationHandleType, CUuuid,
};

use crate::backend::{Access, Backend, DeviceInfo, Mapping, Mirror};
use crate::error::{Error, Result};
use crate::import_info::ImportInfo;
use crate::visible::by_uuid;

mod driver;
mod mirror;
mod vmm;

use driver::{check, Primary};
use vmm::Mapped;

/// The CUDA devices this process sees (`CUDA_VISIBLE_DEVICES` applied by
/// the driver itself).
pub struct Cuda {
    devices: Vec<(CUdevice, DeviceInfo)>,
}

impl std::fmt::Debug for Cuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cuda")
            .field("devices", &self.devices)
            .finish()
    }
}

impl Cuda {
    /// Loads the driver, initialises it and lists the devices;
    /// [`Error::NoDriver`] where `libcuda.so.1` cannot be loaded.
    pub fn open() -> Result<Self> {
        driver::load()?;
        // SAFETY: cuInit takes flags 0 and may be called more than once.
        check("cuInit", || unsafe { sys::cuInit(0) })?;
        let mut count = 0;
        // SAFETY: count is a valid place for the result.
        check("cuDeviceGetCount", || unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        let devices = (0..count.max(0)).map(describe).collect::<Result<_>>()?;
        Ok(Cuda { devices })
    }

    fn device(&self, uuid: &str) -> Result<(CUdevice, DeviceInfo)> {
        let infos: Vec<DeviceInfo> = self.devices.iter().map(|(_, d)| d.clone()).collect();
        let info = by_uuid(uuid, &infos)?;
        if info.mig {
            return Err(Error::Mig { device: info.uuid });
        }
        let dev = self
            .devices
            .iter()
            .find(|(_, d)| d.uuid == info.uuid)
            .map_or(0, |(dev, _)| *dev);
        if !info.shareable {
            let (vmm, posix_fd) = shareable(dev)?;
            return Err(Error::NotShareable {
                device: info.uuid,
                vmm,
                posix_fd,
            });
        }
        Ok((dev, info))
    }
}

fn describe(ordinal: i32) -> Result<(CUdevice, DeviceInfo)> {
    let mut dev: CUdevice = 0;
    // SAFETY: dev is a valid place; ordinal < cuDeviceGetCount.
    check("cuDeviceGet", || unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: name holds the 256 bytes the call is told of.
    check("cuDeviceGetName", || unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev)
    })?;
    let name = name.map(|c| c as u8);
    let name = CStr::from_bytes_until_nul(&name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut v1 = CUuuid { bytes: [0; 16] };
    let mut v2 = CUuuid { bytes: [0; 16] };
    // SAFETY: v1 and v2 are valid places for a UUID.
    check("cuDeviceGetUuid", || unsafe {
        sys::cuDeviceGetUuid(&mut v1, dev)
    })?;
    // SAFETY: as above.
    check("cuDeviceGetUuid_v2", || unsafe {
        sys::cuDeviceGetUuid_v2(&mut v2, dev)
    })?;
    // A MIG instance: the v2 call names the instance, the v1 call the GPU
    // it is part of (unverified: no MIG GPU has run this).
    let mig = v1.bytes != v2.bytes;
    let (vmm, posix_fd) = shareable(dev)?;
    let info = DeviceInfo {
        ordinal: ordinal as u32,
        uuid: format_uuid(if mig { "MIG" } else { "GPU" }, &v2),
        name,
        mig,
        shareable: vmm && posix_fd,
    };
    Ok((dev, info))
}

fn shareable(dev: CUdevice) -> Result<(bool, bool)> {
    let attr = |a: CUdevice_attribute, call| {
        let mut v = 0;
        // SAFETY: v is a valid place for the attribute.
        check(call, || unsafe {
            sys::cuDeviceGetAttribute(&mut v, a, dev)
        })
        .map(|()| v != 0)
    };
    Ok((
        attr(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            "cuDeviceGetAttribute(VMM)",
        )?,
        attr(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            "cuDeviceGetAttribute(POSIX fd handles)",
        )?,
    ))
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as nvidia-smi writes it.
fn format_uuid(prefix: &str, uuid: &CUuuid) -> String {
    let hex: String = uuid
        .bytes
        .iter()
        .map(|&b| format!("{:02x}", b as u8))
        .collect();
    format!(
        "{prefix}-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

impl Backend for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self.devices.iter().map(|(_, d)| d.clone()).collect())
    }

    fn mirror(&self, uuid: &str) -> Result<Mirror> {
        let (dev, info) = self.device(uuid)?;
        mirror::new(dev, info.uuid)
    }

    fn import(&self, spec: &MirrorSpec, fd: OwnedFd, access: Access) -> Result<Mapping> {
        let (dev, info) = self.device(&spec.device)?;
        let geometry = ImportInfo::decode(&spec.import_info, spec.len)?;
        let size =
            usize::try_from(geometry.size).map_err(|_| Error::BadImportInfo("too large".into()))?;
        let primary = Primary::retain(dev)?;
        let current = primary.push()?;
        let granularity = geometry.granularity as usize;
        let import_and_map = |flags| {
            let mut handle = 0;
            // SAFETY: the fd is open for the call; the driver takes the
            // fd's number as the pointer-sized handle and does not keep
            // the descriptor (the caller closes it).
            check("cuMemImportFromShareableHandle", || unsafe {
                sys::cuMemImportFromShareableHandle(
                    &mut handle,
                    fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                    CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                )
            })?;
            Mapped::map(handle, size, granularity, dev, flags)
        };
        let read_write = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        let (mapped, enforced) = match access {
            Access::ReadWrite => (import_and_map(read_write)?, Some(false)),
            // A driver that refuses read-only access to device memory gets a
            // read-write mapping, reported as not enforced: the consumer's
            // copy_on_write clones never write it, and zero-copy users are
            // told (stats()["device_slots"]["read_only_enforced"]).
            Access::ReadOnly => {
                match import_and_map(CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ) {
                    Ok(mapped) => (mapped, None),
                    Err(Error::Driver {
                        call: "cuMemSetAccess",
                        ..
                    }) => (import_and_map(read_write)?, Some(false)),
                    Err(e) => return Err(e),
                }
            }
        };
        drop(fd);
        drop(current);
        Ok(Mapping {
            addr: mapped.ptr,
            len: spec.len,
            ordinal: info.ordinal,
            read_only_enforced: enforced,
            dl_device: (2, info.ordinal as i32),
            _owner: Box::new(Imported { mapped, primary }),
        })
    }
}

/// A consumer's mapping of a mirror: unmapped, then the context released.
struct Imported {
    mapped: Mapped,
    primary: Primary,
}

impl Drop for Imported {
    fn drop(&mut self) {
        if let Ok(_current) = self.primary.push() {
            // Work queued on tensors of this mapping may still read it (a
            // tensor freed after the consumer closed): it ends first.
            // SAFETY: the context is current (pushed above).
            let _ = check("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() });
            self.mapped.free();
        }
    }
}
