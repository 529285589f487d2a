//! The real GPU layer: NVML, loaded at run time (the `nvml-wrapper` crate
//! opens `libnvidia-ml.so.1` with `dlopen`), so batchcast builds and runs on
//! machines without an NVIDIA driver.
//!
//! Metrics of a GPU, named as the listener stores them under `gpu/<i>/`:
//! `power_w`, `util_gpu_percent` and `util_memory_percent` (NVML's
//! utilisation: the share of time *any* kernel ran, which reads busy for a
//! kernel on one SM), `mem_used_bytes`, `mem_total_bytes`, `clock_sm_mhz`,
//! `clock_mem_mhz`, `pstate`, `temperature_c`, `pcie_tx_bytes_per_s`,
//! `pcie_rx_bytes_per_s`; and on GPUs with GPM (Hopper and newer) the
//! activity metrics DCGM reports, under DCGM's names and as DCGM's
//! fractions 0..1: `DCGM_FI_PROF_SM_ACTIVE`, `DCGM_FI_PROF_SM_OCCUPANCY`,
//! `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`, `DCGM_FI_PROF_DRAM_ACTIVE`,
//! `DCGM_FI_PROF_GR_ENGINE_ACTIVE`. GPM metrics compare two samples, so
//! they appear from a GPU's second sample on.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::{gpm_metrics_get, GpmSample};
use nvml_wrapper::{Device, Nvml};

use super::{mps, GpuError, GpuInfo, GpuLayer, MigInstance};

/// GPM metrics and the DCGM fields they equal.
const GPM_FIELDS: [(GpmMetricId, &str); 5] = [
    (GpmMetricId::SmUtil, "DCGM_FI_PROF_SM_ACTIVE"),
    (GpmMetricId::SmOccupancy, "DCGM_FI_PROF_SM_OCCUPANCY"),
    (
        GpmMetricId::AnyTensorUtil,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ),
    (GpmMetricId::DramBwUtil, "DCGM_FI_PROF_DRAM_ACTIVE"),
    (GpmMetricId::GraphicsUtil, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
];

/// NVML, initialised once per process and kept for its life (GPM samples
/// borrow it, and NVML's own init is reference-counted and cheap to keep).
/// A machine where it cannot be loaded gets [`GpuError::Unavailable`]
/// saying why.
fn nvml() -> Result<&'static Nvml, GpuError> {
    static NVML: OnceLock<Result<Nvml, GpuError>> = OnceLock::new();
    NVML.get_or_init(|| {
        Nvml::init().map_err(|e| GpuError::Unavailable {
            reason: format!("NVML (libnvidia-ml.so.1) could not be loaded: {e}"),
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// This machine's GPUs through NVML.
pub(super) struct NvmlGpus {
    nvml: &'static Nvml,
    /// The previous GPM sample of each GPU that offers GPM.
    gpm: Mutex<HashMap<u32, GpmSample<'static>>>,
}

impl std::fmt::Debug for NvmlGpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlGpus")
    }
}

impl NvmlGpus {
    /// NVML, or why it cannot be used here.
    pub(super) fn load() -> Result<NvmlGpus, GpuError> {
        let nvml = nvml()?;
        Ok(NvmlGpus {
            nvml,
            gpm: Mutex::new(HashMap::new()),
        })
    }

    fn device(&self, index: u32) -> Result<Device<'static>, GpuError> {
        self.nvml
            .device_by_index(index)
            .map_err(|e| GpuError::Unavailable {
                reason: format!("GPU {index}: {e}"),
            })
    }

    fn gpm_fields(&self, index: u32, device: &Device<'static>, out: &mut Vec<(String, f64)>) {
        if !device.gpm_support().unwrap_or(false) {
            return;
        }
        let Ok(now) = device.gpm_sample() else {
            return;
        };
        let mut previous = self.gpm.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(before) = previous.get(&index) {
            let ids: Vec<GpmMetricId> = GPM_FIELDS.iter().map(|(id, _)| *id).collect();
            if let Ok(results) = gpm_metrics_get(self.nvml, before, &now, &ids) {
                for ((_, name), r) in GPM_FIELDS.iter().zip(results) {
                    if let Ok(r) = r {
                        // GPM reports percent; DCGM's fields are fractions.
                        out.push((name.to_string(), r.value / 100.0));
                    }
                }
            }
        }
        previous.insert(index, now);
    }
}

fn mig_instances(device: &Device<'static>) -> Vec<MigInstance> {
    let max = device.mig_device_count().unwrap_or(0);
    (0..max)
        .filter_map(|i| device.mig_device_by_index(i).ok())
        .filter_map(|m| {
            let uuid = m.uuid().ok()?;
            // "NVIDIA A100-SXM4-40GB MIG 3g.20gb" -> "3g.20gb"
            let name = m.name().ok()?;
            let profile = name
                .rsplit(" MIG ")
                .next()
                .unwrap_or(&name)
                .trim()
                .to_string();
            Some(MigInstance { uuid, profile })
        })
        .collect()
}

impl GpuLayer for NvmlGpus {
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| GpuError::Unavailable {
                reason: format!("NVML cannot count the GPUs: {e}"),
            })?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let d = self.device(index)?;
            let mig_enabled = d.mig_mode().map(|m| m.current == 1).unwrap_or(false);
            gpus.push(GpuInfo {
                index,
                uuid: d.uuid().unwrap_or_default(),
                name: d.name().unwrap_or_default(),
                mig_enabled,
                mig: if mig_enabled {
                    mig_instances(&d)
                } else {
                    Vec::new()
                },
            });
        }
        Ok(gpus)
    }

    fn sample(&self, index: u32) -> Result<Vec<(String, f64)>, GpuError> {
        let d = self.device(index)?;
        let mut out: Vec<(String, f64)> = Vec::new();
        let mut put = |name: &str, v: Option<f64>| {
            if let Some(v) = v {
                out.push((name.to_string(), v));
            }
        };
        put(
            "power_w",
            d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        );
        if let Ok(u) = d.utilization_rates() {
            put("util_gpu_percent", Some(f64::from(u.gpu)));
            put("util_memory_percent", Some(f64::from(u.memory)));
        }
        if let Ok(m) = d.memory_info() {
            put("mem_used_bytes", Some(m.used as f64));
            put("mem_total_bytes", Some(m.total as f64));
        }
        put("clock_sm_mhz", d.clock_info(Clock::SM).ok().map(f64::from));
        put(
            "clock_mem_mhz",
            d.clock_info(Clock::Memory).ok().map(f64::from),
        );
        put(
            "pstate",
            d.performance_state()
                .ok()
                .map(|p| p.as_c() as f64)
                .filter(|p| *p <= 15.0),
        );
        put(
            "temperature_c",
            d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
        );
        // NVML gives PCIe throughput in KB/s.
        for (counter, name) in [
            (PcieUtilCounter::Send, "pcie_tx_bytes_per_s"),
            (PcieUtilCounter::Receive, "pcie_rx_bytes_per_s"),
        ] {
            put(
                name,
                d.pcie_throughput(counter)
                    .ok()
                    .map(|k| f64::from(k) * 1024.0),
            );
        }
        self.gpm_fields(index, &d, &mut out);
        Ok(out)
    }

    fn mps_running(&self) -> Result<bool, GpuError> {
        mps::running()
    }

    fn mps_start(&self) -> Result<(), GpuError> {
        mps::start()
    }

    fn mps_stop(&self) -> Result<(), GpuError> {
        mps::stop()
    }
}
