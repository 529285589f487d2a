//! The GPU listener: each of a job's GPUs through the [`GpuLayer`], named
//! `gpu/<index>/<field>`. Without GPUs it says so once and records nothing.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use crate::gpu::{GpuError, GpuLayer};
use crate::keys;

pub(crate) struct Gpus {
    /// Indices of the job's GPUs, resolved at the first sample.
    indices: Option<Vec<u32>>,
    devices: Vec<String>,
}

impl Gpus {
    pub(crate) fn new(devices: &[String]) -> Gpus {
        Gpus {
            indices: None,
            devices: devices.to_vec(),
        }
    }

    /// One sample. `round` holds the GPUs already read this round (by
    /// another job on the same GPU), which are not read again. The first
    /// error is returned once (for an event); the listener then stays quiet.
    pub(crate) fn sample(
        &mut self,
        layer: &dyn GpuLayer,
        round: &mut HashMap<u32, Vec<(String, f64)>>,
        out: &mut Vec<(String, f64)>,
    ) -> Option<GpuError> {
        if self.indices.is_none() {
            match self.resolve(layer) {
                Ok(ix) => self.indices = Some(ix),
                Err(e) => {
                    self.indices = Some(Vec::new());
                    return Some(e);
                }
            }
        }
        for &i in self.indices.iter().flatten() {
            if let Entry::Vacant(slot) = round.entry(i) {
                if let Ok(fields) = layer.sample(i) {
                    slot.insert(fields);
                }
            }
            for (f, v) in round.get(&i).into_iter().flatten() {
                out.push((keys::gpu(i, f), *v));
            }
        }
        None
    }

    /// The job's devices as GPU indices: all GPUs for a CPU job that may
    /// still use one (no devices named), else the named ones, by index or UUID.
    fn resolve(&self, layer: &dyn GpuLayer) -> Result<Vec<u32>, GpuError> {
        let gpus = layer.gpus()?;
        if self.devices.is_empty() {
            return Ok(gpus.iter().map(|g| g.index).collect());
        }
        Ok(self
            .devices
            .iter()
            .filter_map(|d| {
                gpus.iter()
                    .find(|g| {
                        d.parse::<u32>().ok() == Some(g.index)
                            || g.uuid == *d
                            || g.mig.iter().any(|m| m.uuid == *d)
                    })
                    .map(|g| g.index)
            })
            .collect())
    }
}
