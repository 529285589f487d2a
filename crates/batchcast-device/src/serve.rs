//! The producer's side in one call: the mirrors for the devices a user
//! named (`Producer(device=...)`, `batchcast serve --device`).

use std::sync::Arc;

use crate::backend::{Backend, DeviceInfo, Mirror};
use crate::error::{Error, Result};
use crate::stats::MirrorStats;
use crate::visible::resolve;

/// Mirrors of the arena on each device of `list` (`cuda:0,cuda:1`, as
/// [`parse_device_list`](crate::parse_device_list) reads it), in that
/// order, through `backend`. Two names of one GPU make one mirror. A device
/// that cannot share its memory (a MIG instance, no virtual memory
/// management or POSIX fd handles) is an error naming it: the caller falls
/// back to the host path for all of them and says why.
pub fn mirrors_for(backend: &dyn Backend, list: &str) -> Result<Vec<(DeviceInfo, Mirror)>> {
    let specs = crate::parse_device_list(list)?;
    let devices = backend.devices()?;
    let mut out: Vec<(DeviceInfo, Mirror)> = Vec::with_capacity(specs.len());
    for entry in list.split(',').map(str::trim).take(specs.len()) {
        let device = resolve(entry, &devices)?;
        if out.iter().any(|(d, _)| d.uuid == device.uuid) {
            continue;
        }
        if device.mig {
            return Err(Error::Mig {
                device: device.uuid,
            });
        }
        let mirror = backend.mirror(&device.uuid)?;
        out.push((device, mirror));
    }
    Ok(out)
}

/// A served device and its mirror's counters.
pub type ServedDevice = (DeviceInfo, Arc<MirrorStats>);

/// What a producer serves for `list`: the mirrors, or none and why.
#[derive(Debug)]
pub struct Served {
    /// Each device's mirror, in the order named.
    pub mirrors: Vec<(DeviceInfo, Mirror)>,
    /// Why there are none although devices were named: the one warning a
    /// producer prints ("… consumers copy each batch themselves").
    pub fallback: Option<String>,
}

impl Served {
    /// The mirrors as [`ProducerOptions::mirrors`](batchcast::ProducerOptions)
    /// takes them, and each device with its counters, to show.
    pub fn into_parts(self) -> (Vec<batchcast::Mirror>, Vec<ServedDevice>) {
        self.mirrors
            .into_iter()
            .map(|(info, mirror)| {
                let stats = mirror.stats();
                (batchcast::Mirror::new(mirror), (info, stats))
            })
            .unzip()
    }
}

/// The mirrors for `list` through the backend this process uses
/// ([`open`](crate::open)), or, where any step fails (no driver, a device
/// that cannot share, one not visible), none and the warning that says so:
/// a producer then serves on the host path, never silently. A malformed
/// list is the caller's error, not a fallback.
pub fn serve_devices(list: &str) -> Result<Served> {
    crate::parse_device_list(list)?;
    let attempt = crate::open().and_then(|backend| mirrors_for(backend.as_ref(), list));
    Ok(match attempt {
        Ok(mirrors) => Served {
            mirrors,
            fallback: None,
        },
        Err(e) => Served {
            mirrors: Vec::new(),
            fallback: Some(format!(
                "cannot serve {list} from device memory: {e}. Serving on the host path:                  consumers on a GPU copy each batch to it themselves"
            )),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StandIn;
    use batchcast::DeviceMirror;

    #[test]
    fn each_named_gpu_gets_one_mirror_in_order() {
        let backend = StandIn::new(3, None).unwrap();
        let got = mirrors_for(&backend, "cuda:2, 0,cuda:2").unwrap_err();
        assert!(
            got.to_string().contains("repeated") || got.to_string().contains("twice"),
            "{got}"
        );
        let got = mirrors_for(&backend, "cuda:2,0").unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|(d, m)| (d.ordinal, m.device().to_string()))
            .collect();
        assert_eq!(
            names,
            vec![(2, crate::stand_in_uuid(2)), (0, crate::stand_in_uuid(0))]
        );
    }

    #[test]
    fn a_device_that_is_not_visible_is_named_with_what_is() {
        let backend = StandIn::new(1, None).unwrap();
        let Err(err) = mirrors_for(&backend, "cuda:1") else {
            panic!("an invisible device was accepted");
        };
        let err = err.to_string();
        assert!(err.contains("cuda:1") && err.contains("cuda:0="), "{err}");
    }
}
