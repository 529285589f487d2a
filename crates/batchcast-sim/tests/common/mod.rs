//! Helpers for hand-made traces.
#![allow(dead_code)]

pub mod published;

use batchcast_sim::{
    by_name, simulate, ClusterSpec, JobSpec, Outcome, Policy, SimConfig, Slowdown,
};

/// A job of `gpus` GPUs arriving at `t` that runs `secs` ideal seconds
/// (1 s per iteration), crossing machines costs 1.5x, racks 2x.
pub fn job(id: &str, t: f64, gpus: u32, secs: f64) -> JobSpec {
    JobSpec {
        id: id.into(),
        arrival: t,
        gpus,
        iterations: secs,
        iter_time: 1.0,
        slowdown: Slowdown {
            cross_slot: 1.0,
            cross_machine: 1.5,
            cross_rack: 2.0,
        },
        model: "m".into(),
        dataset: "d".into(),
        cpu: 0.0,
    }
}

/// Simulates `jobs` on `spec` under policy `p`.
pub fn run(spec: ClusterSpec, cfg: &SimConfig, jobs: &[JobSpec], p: &mut dyn Policy) -> Outcome {
    match simulate(&spec, cfg, jobs, p, &mut |_, _| {}) {
        Ok(o) => o,
        Err(e) => panic!("simulation failed: {e}"),
    }
}

/// Simulates `jobs` on `spec` under the policy called `policy`.
pub fn run_policy(policy: &str, spec: ClusterSpec, cfg: &SimConfig, jobs: &[JobSpec]) -> Outcome {
    let mut p = by_name(policy).unwrap_or_else(|e| panic!("policy {policy}: {e}"));
    run(spec, cfg, jobs, p.as_mut())
}

/// JCT of job `id`.
pub fn jct(o: &Outcome, id: &str) -> f64 {
    let j = o
        .jobs
        .iter()
        .find(|j| j.spec.id == id)
        .expect("job in outcome");
    j.finish.expect("finished") - j.spec.arrival
}

/// Fails, showing `needle` and the whole of `text`, unless `text` holds
/// `needle`.
#[track_caller]
pub fn assert_says(text: &str, needle: &str) {
    assert!(text.contains(needle), "{needle:?} is not in:\n{text}");
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.abs().max(1.0)
}

#[macro_export]
macro_rules! assert_jcts {
    ($o:expr, $( $id:expr => $v:expr ),+ $(,)?) => {
        $( let got = common::jct(&$o, $id);
           assert!(common::close(got, $v), "{} under {}: JCT {} expected {}", $id, $o.policy, got, $v); )+
    };
}
