//! A host-memory stand-in for N GPUs, for tests and CI: never evidence of
//! GPU behaviour.
//!
//! A mirror is a memfd (anonymous, 0600, sealed against shrinking and
//! growing once sized), written through the producer's own shared mapping;
//! a consumer maps the fd `PROT_READ` (read-only: a write faults) or
//! `MAP_PRIVATE` (read-write: its writes stay its own). The exported fd is
//! writable: read-only here is the consumer's page protection, not the
//! file's. Devices are seen through `CUDA_VISIBLE_DEVICES` as CUDA reads
//! it, so processes that see different devices still agree on UUIDs.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use batchcast::{DeviceMirror, MirrorSpec};
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{MemfdFlags, SealFlags};

use crate::backend::{check_copy, Access, Backend, DeviceInfo, Mapping, Mirror};
use crate::error::{Error, Result};
use crate::import_info::ImportInfo;
use crate::stats::MirrorStats;
use crate::visible::{by_uuid, visible};

/// The variable that selects the stand-in: `N` fake devices.
pub const STAND_IN_ENV: &str = "BATCHCAST_DEVICE_STAND_IN";
/// Most fake devices.
pub const MAX_STAND_INS: u32 = 16;

/// N fake devices in host memory.
#[derive(Debug, Clone)]
pub struct StandIn {
    devices: Vec<DeviceInfo>,
}

impl StandIn {
    /// `n` fake devices (1 to [`MAX_STAND_INS`]), seen through
    /// `cuda_visible_devices` as CUDA would see them.
    pub fn new(n: u32, cuda_visible_devices: Option<&str>) -> Result<Self> {
        if !(1..=MAX_STAND_INS).contains(&n) {
            return Err(Error::io(
                format!("{STAND_IN_ENV}={n}"),
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the stand-in has 1 to {MAX_STAND_INS} devices"),
                ),
            ));
        }
        let physical: Vec<DeviceInfo> = (0..n)
            .map(|k| DeviceInfo {
                ordinal: k,
                uuid: stand_in_uuid(k),
                name: format!("batchcast stand-in {k}"),
                mig: false,
                shareable: true,
            })
            .collect();
        Ok(StandIn {
            devices: visible(cuda_visible_devices, &physical),
        })
    }

    /// The stand-in [`STAND_IN_ENV`] asks for, seen through this process's
    /// `CUDA_VISIBLE_DEVICES`; `None` when the variable is unset.
    pub fn from_env() -> Result<Option<Self>> {
        let Some(n) = std::env::var_os(STAND_IN_ENV) else {
            return Ok(None);
        };
        let n = n
            .to_str()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| {
                Error::io(
                    STAND_IN_ENV,
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "expected a number of devices, 1 to 16",
                    ),
                )
            })?;
        let cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        StandIn::new(n, cvd.as_deref()).map(Some)
    }
}

/// Fake device `k`'s UUID: "StandIn" in hex, then `k`.
pub fn stand_in_uuid(k: u32) -> String {
    format!("GPU-5374616e-6449-6e00-0000-{k:012x}")
}

impl Backend for StandIn {
    fn name(&self) -> &'static str {
        "stand-in"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self.devices.clone())
    }

    fn mirror(&self, uuid: &str) -> Result<Mirror> {
        let device = by_uuid(uuid, &self.devices)?;
        let stats = Arc::new(MirrorStats::default());
        let inner = StandInMirror {
            uuid: device.uuid,
            map: None,
            info: None,
        };
        Ok(Mirror::new(Box::new(inner), stats))
    }

    fn import(&self, spec: &MirrorSpec, fd: OwnedFd, access: Access) -> Result<Mapping> {
        let device = by_uuid(&spec.device, &self.devices)?;
        let len = spec.len;
        ImportInfo::decode(&spec.import_info, len)?;
        let file = File::from(fd);
        let size = file
            .metadata()
            .map_err(|e| Error::io("stat the mirror's fd", e))?
            .len();
        if size != len {
            return Err(Error::BadImportInfo(format!(
                "the mirror's fd holds {size} bytes, the arena {len}"
            )));
        }
        let map_len = usize::try_from(len).map_err(|_| Error::BadImportInfo("too large".into()))?;
        let options = {
            let mut o = MmapOptions::new();
            o.len(map_len);
            o
        };
        let map: MmapRaw = match access {
            Access::ReadOnly => options.map_raw_read_only(&file),
            // SAFETY: a private copy-on-write mapping: this process's view
            // is changed only by its own writes (or the producer's before
            // a page is first written), and it is reached as raw memory by
            // address only, never as a Rust reference to shared bytes.
            Access::ReadWrite => unsafe { options.map_copy(&file) }.map(MmapRaw::from),
        }
        .map_err(|e| Error::io("map the mirror", e))?;
        Ok(Mapping {
            addr: map.as_ptr() as u64,
            len,
            ordinal: device.ordinal,
            read_only_enforced: Some(access == Access::ReadOnly),
            dl_device: (1, 0),
            _owner: Box::new(map),
        })
    }
}

struct StandInMirror {
    uuid: String,
    map: Option<MmapRaw>,
    info: Option<ImportInfo>,
}

impl DeviceMirror for StandInMirror {
    fn device(&self) -> &str {
        &self.uuid
    }

    fn import_info(&self) -> Vec<u8> {
        self.info.map(|i| i.encode()).unwrap_or_default()
    }

    fn allocate(&mut self, len: u64, _arena_addr: usize) -> io::Result<OwnedFd> {
        if self.map.is_some() {
            return Err(io::Error::other("this mirror is already allocated"));
        }
        let info = ImportInfo::for_len(len, rustix::param::page_size() as u64)?;
        let fd = rustix::fs::memfd_create(
            "batchcast-device-stand-in",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&fd, len)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW)?;
        let exported = fd.as_fd().try_clone_to_owned()?;
        let map = MmapOptions::new()
            .len(usize::try_from(len).map_err(io::Error::other)?)
            .map_raw(&fd)?;
        self.map = Some(map);
        self.info = Some(info);
        Ok(exported)
    }

    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let map = self
            .map
            .as_ref()
            .ok_or_else(|| io::Error::other("copy_in before allocate"))?;
        check_copy(offset, bytes.len(), map.len() as u64)?;
        // SAFETY: offset + bytes.len() <= map.len() (checked above), so the
        // destination lies in this process's writable mapping; `bytes` is
        // host memory outside it (the producer's arena or a buffer), so the
        // ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                map.as_mut_ptr().add(offset as usize),
                bytes.len(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_env_needs_a_count() {
        assert!(StandIn::new(0, None).is_err());
        assert!(StandIn::new(MAX_STAND_INS + 1, None).is_err());
        assert_eq!(StandIn::new(2, None).unwrap().devices().unwrap().len(), 2);
    }

    #[test]
    fn uuids_are_recognisable() {
        assert_eq!(
            stand_in_uuid(11),
            "GPU-5374616e-6449-6e00-0000-00000000000b"
        );
    }
}
