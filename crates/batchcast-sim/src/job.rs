//! Jobs as the simulator sees them: what a trace says about each one.

use serde::Serialize;

/// How widely a job's GPUs are spread; ordered from tightest to widest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Locality {
    /// All GPUs inside one slot of one machine.
    Slot,
    /// One machine, several slots.
    Machine,
    /// Several machines of one rack.
    Rack,
    /// Several racks.
    Cluster,
}

impl Locality {
    /// The lower-case name used in tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Locality::Slot => "slot",
            Locality::Machine => "machine",
            Locality::Rack => "rack",
            Locality::Cluster => "cluster",
        }
    }
}

/// One job of a trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobSpec {
    /// The trace's id for the job.
    pub id: String,
    /// Submission time, seconds from the start of the trace.
    pub arrival: f64,
    /// GPUs the job needs (gang-scheduled: all or none).
    pub gpus: u32,
    /// Iterations to run.
    pub iterations: f64,
    /// Seconds per iteration when all GPUs sit in one slot and nothing is
    /// congested or CPU-starved.
    pub iter_time: f64,
    /// Iteration-time multipliers when the job spans slots, machines, racks.
    pub slowdown: Slowdown,
    /// Model name (informational).
    pub model: String,
    /// Dataset name: jobs of one dataset on one machine may share a pipeline.
    pub dataset: String,
    /// CPU cores the job's data loading needs to keep its GPUs busy.
    pub cpu: f64,
}

impl JobSpec {
    /// Ideal run time: iterations at the tightest placement.
    pub fn ideal_duration(&self) -> f64 {
        self.iterations * self.iter_time
    }
}

/// Iteration-time multipliers by the widest level a job spans (each >= 1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Slowdown {
    /// Spanning slots inside one machine.
    pub cross_slot: f64,
    /// Spanning machines inside one rack.
    pub cross_machine: f64,
    /// Spanning racks.
    pub cross_rack: f64,
}

impl Default for Slowdown {
    fn default() -> Self {
        Slowdown {
            cross_slot: 1.0,
            cross_machine: 1.1,
            cross_rack: 1.3,
        }
    }
}

impl Slowdown {
    /// The multiplier at `level` (1 inside a slot).
    pub fn at(&self, level: Locality) -> f64 {
        match level {
            Locality::Slot => 1.0,
            Locality::Machine => self.cross_slot,
            Locality::Rack => self.cross_machine,
            Locality::Cluster => self.cross_rack,
        }
    }

    /// The throughput fractions across slots, machines and racks: the
    /// reciprocals of the three multipliers, as the published model keeps
    /// them.
    pub(crate) fn fractions(&self) -> [f64; 3] {
        [
            1.0 / self.cross_slot,
            1.0 / self.cross_machine,
            1.0 / self.cross_rack,
        ]
    }
}
