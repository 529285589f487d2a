//! The stand-in network model: per model and placement level, the
//! per-iteration all-reduce time from the published simulator's per-level
//! link figures, for traces whose slowdowns are placeholders (the published
//! simulator computes them with ASTRA-sim from 412cc49 on).
//!
//! A job of `n > 1` GPUs of model `m` (gradient bytes `S`, compute seconds
//! per iteration `C`) placed at level `L` all-reduces with a flat ring
//! bottlenecked by the slowest link it crosses:
//! `T(L) = 2 (n-1)/n * S / B(L) + 2 (n-1) * a(L)`. Its iteration-time
//! multiplier is relative to the same job inside one slot, which is what
//! the trace's `time_per_iteration` and the gang model take as the base:
//! `m(L) = (C + T(L)) / (C + T(slot))`, so `m(slot) = 1` and `m` grows with
//! the level. One-GPU jobs never communicate: 1 at every level.
//!
//! Where each figure comes from (github aakash-sharma/cluster-sim, commit
//! 4cd660e):
//! - `B`: the network file `scripts/run.sh` passes,
//!   `configuration/network/Ring_FullyConnected_Ring_2rack.json`,
//!   `link-bandwidth` [250, 25, 12] GB/s for its dimensions GPUs of a slot
//!   (T), slots of a machine (N) and machines (P). Across racks the ring
//!   still crosses the 12 GB/s machine links (the rack switch that
//!   `ConfigUtils.java` adds is 400 GB/s), so `B(cluster)` = 12 GB/s.
//! - `a`: `ConfigUtils.java`'s link latencies of the dimensions it adds,
//!   5,000 ns for the machine ring and 50,000 ns for the rack switch; 0
//!   inside a machine, as in the network file. The file's own P latency
//!   (50,000,000 ns, plus a 1,000,000 ns NIC latency) is left out: it would
//!   make every cross-machine iteration last over a second.
//! - `S`: the sum of the weight-gradient ALLREDUCE sizes (bytes) of the
//!   model's ASTRA-sim workload file in `astra-sim/workload/`.
//! - `C`: that file's forward, input-gradient and weight-gradient compute
//!   times (ns) summed, times the `computeScale` that
//!   `IntraJobScheduler.astra_sim` passes ASTRA-sim for the model.

use std::collections::BTreeMap;

use crate::job::{JobSpec, Locality, Slowdown};

/// What the stand-in needs of one model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelComm {
    /// The model name as the published traces write it.
    pub name: &'static str,
    /// Gradient bytes all-reduced per iteration.
    pub grad_bytes: f64,
    /// Compute seconds per iteration.
    pub compute: f64,
}

/// One model: gradient bytes, its workload file's compute sum (ns) and the
/// Java code's computeScale for it.
const fn from_workload(
    name: &'static str,
    grad_bytes: f64,
    compute_ns: f64,
    scale: f64,
) -> ModelComm {
    ModelComm {
        name,
        grad_bytes,
        compute: compute_ns * 1e-9 * scale,
    }
}

/// The models of the published traces, from the workload files
/// resnet50_B512, resnet18_B512, alexnet_B512, mobilenet_v3_B512,
/// vgg11_B256 and BERT-large_B256 (`_astra-sim.csv`; BERT's is
/// `_astra-sim2.csv`, its 66 layers).
pub const MODELS: [ModelComm; 6] = [
    from_workload("ResNet50", 102_011_648.0, 348_241_268.0, 0.033950),
    from_workload("ResNet18", 46_715_648.0, 147_376_542.0, 0.001223),
    from_workload("AlexNet", 244_361_984.0, 60_661_300.0, 0.0199),
    from_workload("MobileNetV3", 9_870_144.0, 9_896_082.0, 0.00639),
    from_workload("VGG", 531_405_568.0, 247_711_914.0, 0.01549),
    from_workload("BERT", 562_044_928.0, 15_266_464_430.0, 0.0001121),
];

/// Ring bandwidth, bytes per second, by level (slot, machine, rack,
/// cluster): the slowest link a ring at that level crosses.
pub const BANDWIDTH: [f64; 4] = [250e9, 25e9, 12e9, 12e9];

/// Link latency, seconds, by level.
pub const LATENCY: [f64; 4] = [0.0, 0.0, 5_000e-9, 50_000e-9];

fn level_index(level: Locality) -> usize {
    match level {
        Locality::Slot => 0,
        Locality::Machine => 1,
        Locality::Rack => 2,
        Locality::Cluster => 3,
    }
}

/// The model called `name` (case, `-` and `_` ignored; `MobileNet_v3`,
/// `VGG11` and `BERT-large` included), if the stand-in knows it.
pub fn model(name: &str) -> Option<&'static ModelComm> {
    let key: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let key = match key.as_str() {
        "vgg11" => "vgg",
        "bertlarge" => "bert",
        k => k,
    };
    MODELS.iter().find(|m| m.name.to_ascii_lowercase() == key)
}

/// Seconds one iteration of `m` on `gpus` GPUs spends all-reducing at
/// `level`.
pub fn allreduce_time(m: &ModelComm, gpus: u32, level: Locality) -> f64 {
    if gpus <= 1 {
        return 0.0;
    }
    let n = gpus as f64;
    let i = level_index(level);
    2.0 * (n - 1.0) / n * m.grad_bytes / BANDWIDTH[i] + 2.0 * (n - 1.0) * LATENCY[i]
}

/// Iteration-time multipliers (>= 1) of `m` on `gpus` GPUs by level.
pub fn slowdown(m: &ModelComm, gpus: u32) -> Slowdown {
    let base = m.compute + allreduce_time(m, gpus, Locality::Slot);
    let at = |l| (m.compute + allreduce_time(m, gpus, l)) / base;
    Slowdown {
        cross_slot: at(Locality::Machine),
        cross_machine: at(Locality::Rack),
        cross_rack: at(Locality::Cluster),
    }
}

/// What [`apply`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StandinReport {
    /// Jobs whose slowdowns now come from the stand-in.
    pub replaced: usize,
    /// Jobs left with their trace's slowdowns, by model name ("" when the
    /// trace names none).
    pub unknown: BTreeMap<String, usize>,
}

/// Replaces the slowdowns of every job whose model the stand-in knows.
pub fn apply(jobs: &mut [JobSpec]) -> StandinReport {
    let mut r = StandinReport::default();
    for j in jobs {
        match model(&j.model) {
            Some(m) => {
                j.slowdown = slowdown(m, j.gpus);
                r.replaced += 1;
            }
            None => *r.unknown.entry(j.model.clone()).or_insert(0) += 1,
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// ResNet50 on 8 GPUs, by hand: S = 102,011,648 B, C = 11.822791 ms.
    /// Ring factor 2 * 7/8 = 1.75.
    /// slot:    1.75 * S / 250e9                 = 0.714081536 ms
    /// machine: 1.75 * S / 25e9                  = 7.14081536 ms
    /// rack:    1.75 * S / 12e9 + 14 * 5 us      = 14.876699 ms + 0.07 ms
    /// cluster: 1.75 * S / 12e9 + 14 * 50 us     = 14.876699 ms + 0.7 ms
    #[test]
    fn resnet50_on_8_gpus_by_hand() {
        let m = model("ResNet50").unwrap();
        let c = 11.822_791_048_6e-3;
        assert!(close(m.compute, c));
        assert!(close(
            allreduce_time(m, 8, Locality::Slot),
            0.714_081_536e-3
        ));
        assert!(close(
            allreduce_time(m, 8, Locality::Machine),
            7.140_815_36e-3
        ));
        let rack = 1.75 * 102_011_648.0 / 12e9 + 14.0 * 5e-6;
        assert!(close(allreduce_time(m, 8, Locality::Rack), rack));
        let base = c + 0.714_081_536e-3;
        let s = slowdown(m, 8);
        assert!(close(s.cross_slot, (c + 7.140_815_36e-3) / base));
        assert!(close(s.cross_machine, (c + rack) / base));
        let cluster = 1.75 * 102_011_648.0 / 12e9 + 14.0 * 50e-6;
        assert!(close(s.cross_rack, (c + cluster) / base));
        // 1.5126, 2.1353, 2.1855: the figures docs/sim.md quotes.
        assert!((s.cross_slot - 1.5126).abs() < 1e-4, "{}", s.cross_slot);
        assert!(
            (s.cross_machine - 2.1353).abs() < 1e-4,
            "{}",
            s.cross_machine
        );
        assert!((s.cross_rack - 2.1855).abs() < 1e-4, "{}", s.cross_rack);
    }

    #[test]
    fn one_gpu_never_slows_and_wider_is_never_faster() {
        for m in &MODELS {
            assert_eq!(
                slowdown(m, 1),
                Slowdown {
                    cross_slot: 1.0,
                    cross_machine: 1.0,
                    cross_rack: 1.0
                }
            );
            for n in [2, 4, 8, 16, 64, 512] {
                let s = slowdown(m, n);
                assert!(1.0 <= s.cross_slot, "{} {n}", m.name);
                assert!(s.cross_slot <= s.cross_machine, "{} {n}", m.name);
                assert!(s.cross_machine <= s.cross_rack, "{} {n}", m.name);
            }
        }
    }

    #[test]
    fn names_are_matched_loosely_and_unknown_models_keep_their_slowdowns() {
        assert_eq!(model("MobileNet_v3").unwrap().name, "MobileNetV3");
        assert_eq!(model("vgg11").unwrap().name, "VGG");
        assert_eq!(model("BERT-large").unwrap().name, "BERT");
        assert!(model("GPT-3").is_none());
        let trace = Slowdown {
            cross_slot: 1.5,
            cross_machine: 1.6,
            cross_rack: 1.7,
        };
        let job = |model: &str| JobSpec {
            id: model.into(),
            arrival: 0.0,
            gpus: 8,
            iterations: 1.0,
            iter_time: 1.0,
            slowdown: trace,
            model: model.into(),
            dataset: "d".into(),
            cpu: 0.0,
        };
        let mut jobs = vec![job("VGG"), job("GPT-3"), job("")];
        let r = apply(&mut jobs);
        assert_eq!(r.replaced, 1);
        assert_eq!(r.unknown.get("GPT-3"), Some(&1));
        assert_eq!(r.unknown.get(""), Some(&1));
        assert_eq!(jobs[0].slowdown, slowdown(model("VGG").unwrap(), 8));
        assert_eq!(jobs[1].slowdown, trace);
    }
}
