//! Where each GPU of the published model sits, in its cluster order (rack,
//! machine, slot, GPU), and the level a set of GPUs spans.

use crate::cluster::ClusterSpec;
use crate::job::Locality;

/// (rack, machine in its rack, slot in its machine) of every GPU.
pub(crate) struct Layout {
    at: Vec<[u32; 3]>,
}

impl Layout {
    /// The shape a cluster file writes (`should_use_config` "true").
    pub fn of(spec: &ClusterSpec) -> Layout {
        let slot = spec.slot_size().max(1);
        let mut at = Vec::with_capacity(spec.total_gpus() as usize);
        for r in 0..spec.racks {
            for m in 0..spec.machines_per_rack {
                for g in 0..spec.gpus_per_machine {
                    at.push([r, m, g / slot]);
                }
            }
        }
        Layout { at }
    }

    /// The cluster the published code (2953d56) builds when a cluster file's
    /// `should_use_config` is not "true", whatever shape it writes: per
    /// rack, 6 machines of 2 slots x 2 GPUs, 3 machines of 2 GPUs in one
    /// slot and 2 machines of 1 GPU (32 GPUs).
    pub fn published_default(racks: u32) -> Layout {
        let mut at = Vec::with_capacity(racks as usize * 32);
        for r in 0..racks {
            for m in 0..6 {
                for slot in 0..2 {
                    at.extend([[r, m, slot]; 2]);
                }
            }
            for m in 6..9 {
                at.extend([[r, m, 0]; 2]);
            }
            at.extend([[r, 9, 0], [r, 10, 0]]);
        }
        Layout { at }
    }

    /// GPUs in the cluster.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// (rack, machine in its rack, slot in its machine) of GPU `g`.
    pub fn at(&self, g: usize) -> [u32; 3] {
        self.at[g]
    }

    /// Racks in the cluster.
    pub fn racks(&self) -> u32 {
        self.at.last().map_or(0, |a| a[0] + 1)
    }

    /// The widest level `set` spans, checked as the published code does:
    /// racks, then machines, then slots.
    pub fn level(&self, set: &[usize]) -> Locality {
        let Some(&first) = set.first() else {
            return Locality::Slot;
        };
        let f = self.at[first];
        let differs = |k: usize| set.iter().any(|&g| self.at[g][k] != f[k]);
        if differs(0) {
            Locality::Cluster
        } else if differs(1) {
            Locality::Rack
        } else if differs(2) {
            Locality::Machine
        } else {
            Locality::Slot
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_default_has_32_gpus_a_rack_in_its_order() {
        let l = Layout::published_default(2);
        assert_eq!(l.len(), 64);
        // GPUs 0-3: machine 0 (slots 0, 0, 1, 1); 24-25: machine 6, one slot.
        assert_eq!(l.level(&[0, 1]), Locality::Slot);
        assert_eq!(l.level(&[0, 2]), Locality::Machine);
        assert_eq!(l.level(&[24, 25]), Locality::Slot);
        assert_eq!(l.level(&[3, 4]), Locality::Rack);
        assert_eq!(l.level(&[31, 32]), Locality::Cluster);
        let own = Layout::of(&ClusterSpec {
            gpus_per_slot: 2,
            ..ClusterSpec::new(1, 2, 4, 8.0)
        });
        assert_eq!(own.len(), 8);
        assert_eq!(own.level(&[0, 1]), Locality::Slot);
        assert_eq!(own.level(&[1, 2]), Locality::Machine);
        assert_eq!(own.level(&[3, 4]), Locality::Rack);
    }
}
