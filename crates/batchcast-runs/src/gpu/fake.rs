//! A made-up set of GPUs for tests of placement, MPS, MIG and the GPU
//! listener on machines that have none.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::{GpuError, GpuInfo, GpuLayer};

/// GPUs that exist only in memory. Samples are the given fields; MPS is a
/// flag that `mps_start`/`mps_stop` flip, counted so tests can check them.
#[derive(Debug, Default)]
pub struct FakeGpus {
    /// The GPUs this fake machine has.
    pub gpus: Vec<GpuInfo>,
    /// The fields every sample returns.
    pub fields: Vec<(String, f64)>,
    /// When set, MPS cannot be started, with this message (no daemon binary).
    pub mps_missing: Option<String>,
    state: Mutex<MpsState>,
    samples: AtomicU32,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MpsState {
    pub running: bool,
    pub starts: u32,
    pub stops: u32,
}

impl FakeGpus {
    /// `n` plain GPUs, indices 0..n, no MIG.
    pub fn plain(n: u32) -> FakeGpus {
        FakeGpus {
            gpus: (0..n)
                .map(|i| GpuInfo {
                    index: i,
                    uuid: format!("GPU-fake-{i}"),
                    name: "Fake GPU".into(),
                    mig_enabled: false,
                    mig: Vec::new(),
                })
                .collect(),
            ..FakeGpus::default()
        }
    }

    /// The same GPUs, whose samples return `fields`.
    pub fn with_fields(mut self, fields: Vec<(String, f64)>) -> FakeGpus {
        self.fields = fields;
        self
    }

    /// How many samples were asked of these GPUs.
    pub fn samples(&self) -> u32 {
        self.samples.load(Ordering::SeqCst)
    }

    /// How often MPS was started and stopped, and whether it runs now.
    pub fn mps_state(&self) -> MpsState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl GpuLayer for FakeGpus {
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
        Ok(self.gpus.clone())
    }

    fn sample(&self, index: u32) -> Result<Vec<(String, f64)>, GpuError> {
        self.samples.fetch_add(1, Ordering::SeqCst);
        if self.gpus.iter().any(|g| g.index == index) {
            Ok(self.fields.clone())
        } else {
            Err(GpuError::Unavailable {
                reason: format!("no GPU {index}"),
            })
        }
    }

    fn mps_running(&self) -> Result<bool, GpuError> {
        Ok(self.mps_state().running)
    }

    fn mps_start(&self) -> Result<(), GpuError> {
        if let Some(m) = &self.mps_missing {
            return Err(GpuError::Mps(m.clone()));
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.running = true;
        s.starts += 1;
        Ok(())
    }

    fn mps_stop(&self) -> Result<(), GpuError> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.running = false;
        s.stops += 1;
        Ok(())
    }
}
