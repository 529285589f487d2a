//! The GPUs of this machine, behind one trait so that tests can fake them.
//!
//! Everything batchcast asks of GPUs goes through [`GpuLayer`]: which GPUs
//! and MIG instances exist (to place a plan's rows), their metrics (for the
//! GPU listener), and the MPS control daemon (for `Collocation = MPS`). The
//! real layer loads NVML at run time; a machine without it gets a layer
//! whose every call says why. [`FakeGpus`] stands in for hardware in tests.

mod fake;
mod mps;
mod nvml;

use std::fmt;

pub use fake::FakeGpus;

/// A MIG (multi-instance GPU) instance of a GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct MigInstance {
    /// The UUID that `CUDA_VISIBLE_DEVICES` takes (`MIG-...`).
    pub uuid: String,
    /// The profile name, such as `3g.20gb`.
    pub profile: String,
}

/// One GPU as the layer sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuInfo {
    /// Its index, as NVML and `CUDA_VISIBLE_DEVICES` number it.
    pub index: u32,
    /// Its UUID (`GPU-...`).
    pub uuid: String,
    /// Its product name, such as `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Whether MIG mode is on.
    pub mig_enabled: bool,
    /// Its MIG instances (empty when MIG is off).
    pub mig: Vec<MigInstance>,
}

/// Why the GPUs cannot be asked.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// No NVML library, no driver, or no GPU: nothing GPU-related can run.
    #[error("no GPU available: {reason}")]
    Unavailable {
        /// Why, in words.
        reason: String,
    },
    /// A GPU was asked for something it does not offer (a metric, MIG).
    #[error("GPU {index}: {what} is not supported ({reason})")]
    NotSupported {
        /// The GPU asked.
        index: u32,
        /// What was asked of it.
        what: String,
        /// Why it cannot give it.
        reason: String,
    },
    /// Starting or stopping the MPS control daemon failed.
    #[error("MPS: {0}")]
    Mps(String),
}

/// What batchcast asks of the machine's GPUs.
pub trait GpuLayer: Send + Sync + fmt::Debug {
    /// Every GPU, by index.
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError>;

    /// Current metrics of GPU `index`, as `(field, value)` pairs named
    /// after NVML (`power_w`, `util_sm_percent`, ...) or, for activity,
    /// after DCGM (`DCGM_FI_PROF_SM_ACTIVE`, ...). Fields the GPU does not
    /// offer are left out.
    fn sample(&self, index: u32) -> Result<Vec<(String, f64)>, GpuError>;

    /// Whether an MPS control daemon serves the GPUs now.
    fn mps_running(&self) -> Result<bool, GpuError>;

    /// Starts the MPS control daemon (for all of this machine's GPUs).
    fn mps_start(&self) -> Result<(), GpuError>;

    /// Stops the MPS control daemon started by [`GpuLayer::mps_start`].
    fn mps_stop(&self) -> Result<(), GpuError>;
}

/// The layer of a machine with no usable GPU: every call fails with
/// `reason`.
#[derive(Clone, Debug)]
pub struct NoGpus {
    /// Why there is no usable GPU.
    pub reason: String,
}

impl GpuLayer for NoGpus {
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
        Err(GpuError::Unavailable {
            reason: self.reason.clone(),
        })
    }
    fn sample(&self, _index: u32) -> Result<Vec<(String, f64)>, GpuError> {
        Err(GpuError::Unavailable {
            reason: self.reason.clone(),
        })
    }
    fn mps_running(&self) -> Result<bool, GpuError> {
        Err(GpuError::Unavailable {
            reason: self.reason.clone(),
        })
    }
    fn mps_start(&self) -> Result<(), GpuError> {
        Err(GpuError::Unavailable {
            reason: self.reason.clone(),
        })
    }
    fn mps_stop(&self) -> Result<(), GpuError> {
        Err(GpuError::Unavailable {
            reason: self.reason.clone(),
        })
    }
}

/// This machine's GPUs: NVML when it loads, else [`NoGpus`] saying why.
pub fn system() -> Box<dyn GpuLayer> {
    match nvml::NvmlGpus::load() {
        Ok(layer) => Box::new(layer),
        Err(GpuError::Unavailable { reason }) => Box::new(NoGpus { reason }),
        Err(e) => Box::new(NoGpus {
            reason: e.to_string(),
        }),
    }
}
