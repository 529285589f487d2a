//! Helpers for hand-made traces.
#![allow(dead_code)]

pub mod published;

use batchcast_sim::{simulate, ClusterSpec, JobSpec, Outcome, Policy, SimConfig, Slowdown};

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

pub fn run(spec: ClusterSpec, cfg: &SimConfig, jobs: &[JobSpec], p: &mut dyn Policy) -> Outcome {
    match simulate(&spec, cfg, jobs, p, &mut |_, _| {}) {
        Ok(o) => o,
        Err(e) => panic!("simulation failed: {e}"),
    }
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
