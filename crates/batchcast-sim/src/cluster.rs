//! The cluster: racks of machines of GPUs (optionally grouped in slots),
//! CPU cores per machine, and which job holds each GPU.

use serde::{Deserialize, Serialize};

use crate::error::SimError;
use crate::job::Locality;

/// The shape of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Racks.
    pub racks: u32,
    /// Machines in each rack.
    pub machines_per_rack: u32,
    /// GPUs in each machine.
    pub gpus_per_machine: u32,
    /// GPUs per slot (a PCIe switch / NVLink island); equal to
    /// `gpus_per_machine` when a machine is one slot.
    #[serde(default)]
    pub gpus_per_slot: u32,
    /// CPU cores per machine available to data loading.
    pub cpu_cores: f64,
    /// Memory per machine, GiB (recorded; not a constraint yet).
    #[serde(default)]
    pub memory_gib: f64,
}

/// Largest cluster accepted, in GPUs (bounds allocation).
pub const MAX_GPUS: u64 = 1 << 20;

impl ClusterSpec {
    /// `racks x machines x gpus` with one slot per machine.
    pub fn new(racks: u32, machines_per_rack: u32, gpus_per_machine: u32, cpu_cores: f64) -> Self {
        ClusterSpec {
            racks,
            machines_per_rack,
            gpus_per_machine,
            gpus_per_slot: gpus_per_machine,
            cpu_cores,
            memory_gib: 0.0,
        }
    }

    /// Refuses shapes the simulator cannot represent.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |why: String| Err(SimError::Config(why));
        if self.racks == 0 || self.machines_per_rack == 0 || self.gpus_per_machine == 0 {
            return bad(
                "racks, machines per rack and GPUs per machine must all be at least 1".into(),
            );
        }
        let slot = self.slot_size();
        if !self.gpus_per_machine.is_multiple_of(slot) {
            return bad(format!(
                "{} GPUs per slot do not divide {} GPUs per machine; pick a divisor",
                slot, self.gpus_per_machine
            ));
        }
        if self.total_gpus() > MAX_GPUS {
            return bad(format!(
                "{} GPUs exceed the limit of {MAX_GPUS}",
                self.total_gpus()
            ));
        }
        if !(self.cpu_cores.is_finite() && self.cpu_cores > 0.0) {
            return bad("CPU cores per machine must be a positive number".into());
        }
        Ok(())
    }

    /// GPUs per slot (0 in the spec means one slot per machine).
    pub fn slot_size(&self) -> u32 {
        if self.gpus_per_slot == 0 {
            self.gpus_per_machine
        } else {
            self.gpus_per_slot
        }
    }

    /// Machines in the cluster.
    pub fn machines(&self) -> usize {
        self.racks as usize * self.machines_per_rack as usize
    }

    /// GPUs in the cluster (saturating: a spec from a file may ask for more
    /// than a u64 holds, which [`validate`](Self::validate) then refuses).
    pub fn total_gpus(&self) -> u64 {
        (self.racks as u64)
            .saturating_mul(self.machines_per_rack as u64)
            .saturating_mul(self.gpus_per_machine as u64)
    }

    /// GPUs in one rack.
    pub fn rack_gpus(&self) -> u32 {
        self.machines_per_rack * self.gpus_per_machine
    }

    /// The rack of machine `m`.
    pub fn rack_of(&self, m: usize) -> usize {
        m / self.machines_per_rack as usize
    }

    /// Machine and slot of global GPU index `g`.
    pub fn locate(&self, g: u32) -> (usize, u32) {
        let m = (g / self.gpus_per_machine) as usize;
        (m, (g % self.gpus_per_machine) / self.slot_size())
    }

    /// The widest level a set of GPUs spans.
    pub fn span(&self, gpus: &[u32]) -> Locality {
        let Some(&first) = gpus.first() else {
            return Locality::Slot;
        };
        let (m0, s0) = self.locate(first);
        let mut level = Locality::Slot;
        for &g in gpus {
            let (m, s) = self.locate(g);
            if self.rack_of(m) != self.rack_of(m0) {
                return Locality::Cluster;
            }
            if m != m0 {
                level = Locality::Rack;
            } else if s != s0 && level < Locality::Machine {
                level = Locality::Machine;
            }
        }
        level
    }

    /// The tightest level at which `gpus` GPUs can possibly fit.
    pub fn tightest_fit(&self, gpus: u32) -> Locality {
        if gpus <= self.slot_size() {
            Locality::Slot
        } else if gpus <= self.gpus_per_machine {
            Locality::Machine
        } else if gpus <= self.rack_gpus() {
            Locality::Rack
        } else {
            Locality::Cluster
        }
    }
}

/// Which job (by index) holds each GPU, with free counts kept per machine
/// and rack. Invariant: `free_*` always equal the count of `None` owners.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// The shape.
    pub spec: ClusterSpec,
    owner: Vec<Option<u32>>,
    free_machine: Vec<u32>,
    free_rack: Vec<u32>,
    free_total: u64,
}

impl Cluster {
    /// An empty cluster of shape `spec` (validated by the caller).
    pub fn new(spec: ClusterSpec) -> Self {
        Cluster {
            spec,
            owner: vec![None; spec.total_gpus() as usize],
            free_machine: vec![spec.gpus_per_machine; spec.machines()],
            free_rack: vec![spec.rack_gpus(); spec.racks as usize],
            free_total: spec.total_gpus(),
        }
    }

    /// Free GPUs in the whole cluster.
    pub fn free_total(&self) -> u64 {
        self.free_total
    }

    /// Free GPUs per machine.
    pub fn free_machines(&self) -> &[u32] {
        &self.free_machine
    }

    /// Free GPUs per rack.
    pub fn free_racks(&self) -> &[u32] {
        &self.free_rack
    }

    /// The owner of GPU `g`.
    pub fn owner(&self, g: u32) -> Option<u32> {
        self.owner[g as usize]
    }

    /// Free GPUs of machine `m`, in index order.
    pub fn free_gpus_of(&self, m: usize) -> impl Iterator<Item = u32> + '_ {
        let per = self.spec.gpus_per_machine;
        let base = m as u32 * per;
        (base..base + per).filter(|&g| self.owner[g as usize].is_none())
    }

    /// Gives `gpus` to `job`. Panics (a simulator bug, not user input) if
    /// one is taken: the no-double-booking invariant.
    pub fn assign(&mut self, job: u32, gpus: &[u32]) {
        for &g in gpus {
            let slot = &mut self.owner[g as usize];
            assert!(slot.is_none(), "GPU {g} double-booked");
            *slot = Some(job);
            let m = (g / self.spec.gpus_per_machine) as usize;
            self.free_machine[m] -= 1;
            self.free_rack[self.spec.rack_of(m)] -= 1;
            self.free_total -= 1;
        }
    }

    /// Takes `gpus` back from `job`.
    pub fn release(&mut self, job: u32, gpus: &[u32]) {
        for &g in gpus {
            let slot = &mut self.owner[g as usize];
            assert_eq!(*slot, Some(job), "GPU {g} released by a job not holding it");
            *slot = None;
            let m = (g / self.spec.gpus_per_machine) as usize;
            self.free_machine[m] += 1;
            self.free_rack[self.spec.rack_of(m)] += 1;
            self.free_total += 1;
        }
    }
}
