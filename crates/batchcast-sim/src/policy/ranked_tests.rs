//! `ranked_round` starts the same jobs in the same order as ranking the
//! whole queue at every pass (`preemptive_round`).

use super::{by_name, preemptive_round, Policy};
use crate::job::Locality;
use crate::sched::Sched;
use crate::{simulate, synthetic, ClusterSpec, SimConfig, SynthConfig};

/// `name`'s key, ranked over the whole queue at every pass.
struct Full(&'static str);

fn key(name: &str, s: &Sched<'_>, i: u32) -> (f64, f64) {
    let j = s.job(i);
    let th = [3_600.0, 36_000.0];
    match name {
        "srsf" => (s.remaining_now(i) * j.spec.gpus as f64, j.spec.arrival),
        "las" => (
            (j.spec.ideal_duration() - s.remaining_now(i)) * j.spec.gpus as f64,
            j.spec.arrival,
        ),
        _ => (
            super::tiresias::queue(&th, s.attained_now(i)),
            j.spec.arrival,
        ),
    }
}

impl Policy for Full {
    fn name(&self) -> &str {
        self.0
    }
    fn preemptive(&self) -> bool {
        true
    }
    fn schedule(&mut self, s: &mut Sched<'_>) {
        let name = self.0;
        preemptive_round(
            s,
            |s, i| key(name, s, i),
            |s, i| {
                s.try_start(i, Locality::Cluster);
            },
        );
    }
}

#[test]
fn ranked_rounds_give_the_schedule_of_full_ranking() {
    // An overloaded small cluster: long queues, many preemptions.
    let spec = ClusterSpec::new(2, 2, 8, 64.0);
    let sc = SynthConfig {
        jobs: 600,
        seed: 3,
        mean_interarrival: 20.0,
        duration_sigma: 1.5,
        ..SynthConfig::default()
    };
    let trace = synthetic(&sc, 32).expect("trace");
    let cfg = SimConfig {
        lease: 120.0,
        ..SimConfig::default()
    };
    for name in ["srsf", "las", "tiresias"] {
        let mut fast = by_name(name).expect("policy");
        let a = simulate(&spec, &cfg, &trace, fast.as_mut(), &mut |_, _| {}).expect("runs");
        let b = simulate(&spec, &cfg, &trace, &mut Full(name), &mut |_, _| {}).expect("runs");
        let pre: u32 = a.jobs.iter().map(|j| j.preemptions).sum();
        assert!(pre > 10, "{name}: only {pre} preemptions");
        for (x, y) in a.jobs.iter().zip(&b.jobs) {
            assert_eq!(x.first_start, y.first_start, "{name}");
            assert_eq!(x.finish, y.finish, "{name}");
            assert_eq!(x.preemptions, y.preemptions, "{name}");
        }
    }
}
