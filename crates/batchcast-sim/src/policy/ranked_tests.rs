//! `ranked_round` gives the schedule of ranking every waiting and running
//! job at every pass (the reference below, written for clarity).

use std::collections::HashSet;

use super::{by_name, Dally, DallyConfig, Policy};
use crate::job::Locality;
use crate::sched::Sched;
use crate::state::Status;
use crate::{simulate, synthetic, ClusterSpec, SimConfig, SynthConfig};

/// Jobs ranked by `key`, ties by index.
fn ranked(
    s: &Sched<'_>,
    mut jobs: Vec<u32>,
    key: &dyn Fn(&Sched<'_>, u32) -> (f64, f64),
) -> Vec<u32> {
    let mut keyed: Vec<((f64, f64), u32)> = jobs.drain(..).map(|i| (key(s, i), i)).collect();
    keyed.sort_by(|a, b| {
        (a.0 .0.total_cmp(&b.0 .0))
            .then(a.0 .1.total_cmp(&b.0 .1))
            .then(a.1.cmp(&b.1))
    });
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// The reference round: at a lease boundary rank all pending and running
/// jobs, keep the best that fit together and preempt the running rest;
/// then visit every waiting job that fits the free GPUs, bar those just
/// preempted, best first, until the smallest waiting job cannot fit.
fn full_round(
    s: &mut Sched<'_>,
    key: &dyn Fn(&Sched<'_>, u32) -> (f64, f64),
    visit: &mut dyn FnMut(&mut Sched<'_>, u32),
) {
    let mut out = HashSet::new();
    if s.lease_boundary() {
        let mut all = s.pending();
        all.extend(s.running());
        let mut room = s.spec().total_gpus();
        for i in ranked(s, all, key) {
            let g = s.job(i).spec.gpus as u64;
            if g <= room {
                room -= g;
            } else if s.preempt(i) {
                out.insert(i);
            }
        }
    }
    let free = s.free_gpus();
    let fitting: Vec<u32> = s
        .pending()
        .into_iter()
        .filter(|i| !out.contains(i) && s.job(*i).spec.gpus as u64 <= free)
        .collect();
    for i in ranked(s, fitting, key) {
        if s.free_gpus() == 0 || s.free_gpus() < s.smallest_demand() {
            return;
        }
        if s.job(i).status == Status::Pending {
            visit(s, i);
        }
    }
}

/// `name`'s policy, ranked over the whole queue at every pass.
enum Full {
    Start(&'static str),
    Dally(Dally),
}

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
        match self {
            Full::Start(name) => name,
            Full::Dally(_) => "dally",
        }
    }
    fn preemptive(&self) -> bool {
        true
    }
    fn schedule(&mut self, s: &mut Sched<'_>) {
        match self {
            Full::Start(name) => {
                let name = *name;
                full_round(s, &|s, i| key(name, s, i), &mut |s, i| {
                    s.try_start(i, Locality::Cluster);
                });
            }
            Full::Dally(d) => {
                let k = d.key();
                full_round(s, &k, &mut |s, i| d.visit(s, i));
            }
        }
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
    for name in ["srsf", "las", "tiresias", "dally"] {
        let mut fast = by_name(name).expect("policy");
        let mut full = match name {
            "dally" => Full::Dally(Dally::new(DallyConfig::default())),
            _ => Full::Start(name),
        };
        let a = simulate(&spec, &cfg, &trace, fast.as_mut(), &mut |_, _| {}).expect("runs");
        let b = simulate(&spec, &cfg, &trace, &mut full, &mut |_, _| {}).expect("runs");
        let pre: u32 = a.jobs.iter().map(|j| j.preemptions).sum();
        assert!(pre > 10, "{name}: only {pre} preemptions");
        assert_eq!(a.events, b.events, "{name}");
        for (x, y) in a.jobs.iter().zip(&b.jobs) {
            assert_eq!(x.first_start, y.first_start, "{name}");
            assert_eq!(x.finish, y.finish, "{name}");
            assert_eq!(x.preemptions, y.preemptions, "{name}");
            assert_eq!(x.widest, y.widest, "{name}");
        }
    }
}
