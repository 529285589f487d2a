//! Hand-worked tiny traces, one schedule per policy (the expected times are
//! worked out in the comments).

mod common;

use batchcast_sim::policy::{Dally, DallyConfig, Fifo, Gandiva, Sjf, Srsf, Tiresias, Tuner};
use batchcast_sim::{ClusterSpec, Locality, SimConfig};
use common::{job, run};

fn one_machine() -> ClusterSpec {
    ClusterSpec::new(1, 1, 4, 64.0)
}

fn no_leases() -> SimConfig {
    SimConfig {
        lease: 1e9,
        ..SimConfig::default()
    }
}

// A: 0-100 (4 GPUs). FIFO then runs B 100-150, C 150-160; SJF runs the
// shorter C first: C 100-110, B 110-160.
#[test]
fn fifo_and_sjf_order_a_full_machine() {
    let jobs = [
        job("A", 0.0, 4, 100.0),
        job("B", 10.0, 4, 50.0),
        job("C", 20.0, 4, 10.0),
    ];
    let o = run(one_machine(), &no_leases(), &jobs, &mut Fifo);
    assert_jcts!(o, "A" => 100.0, "B" => 140.0, "C" => 140.0);
    let o = run(one_machine(), &no_leases(), &jobs, &mut Sjf::default());
    assert_jcts!(o, "A" => 100.0, "B" => 150.0, "C" => 90.0);
}

// FIFO blocks behind a job that does not fit; Gandiva backfills.
// A (3 GPUs) 0-100; B (4) waits until 100; C (1, 10 s) arrives at 5: FIFO
// holds it behind B (runs 150-160 → JCT 155); Gandiva starts it at 5 (JCT 10).
#[test]
fn fifo_blocks_and_gandiva_backfills() {
    let jobs = [
        job("A", 0.0, 3, 100.0),
        job("B", 1.0, 4, 50.0),
        job("C", 5.0, 1, 10.0),
    ];
    let o = run(one_machine(), &no_leases(), &jobs, &mut Fifo);
    assert_jcts!(o, "A" => 100.0, "B" => 149.0, "C" => 155.0);
    let o = run(one_machine(), &no_leases(), &jobs, &mut Gandiva::default());
    assert_jcts!(o, "A" => 100.0, "B" => 149.0, "C" => 10.0);
}

// Preemption at a lease boundary (lease 100 s, restart 20 s). A (4 GPUs,
// 300 s) starts at 0; B (4 GPUs, 50 s) arrives at 10 and waits. At t=100 B
// ranks first (SRSF: 200 < 800 GPU-s left; Tiresias with a 300 GPU-s
// threshold: A attained 400 → queue 1, B queue 0): A is preempted, B runs
// 100-150, A restarts at 150, stalls until 170 and runs its last 200 s:
// finish 370.
#[test]
fn srsf_and_tiresias_preempt_at_the_lease_boundary() {
    let cfg = SimConfig {
        lease: 100.0,
        restart_cost: 20.0,
        ..SimConfig::default()
    };
    let jobs = [job("A", 0.0, 4, 300.0), job("B", 10.0, 4, 50.0)];
    let o = run(one_machine(), &cfg, &jobs, &mut Srsf);
    assert_jcts!(o, "A" => 370.0, "B" => 140.0);
    assert_eq!(o.jobs[0].preemptions, 1);
    assert!(common::close(o.jobs[0].stalled, 20.0));
    let mut t = Tiresias {
        thresholds: vec![300.0],
    };
    let o = run(one_machine(), &cfg, &jobs, &mut t);
    assert_jcts!(o, "A" => 370.0, "B" => 140.0);
    // With the default thresholds both stay in queue 0: FIFO, no preemption.
    let o = run(one_machine(), &cfg, &jobs, &mut Tiresias::default());
    assert_jcts!(o, "A" => 300.0, "B" => 340.0);
    assert_eq!(o.jobs[0].preemptions, 0);
}

fn fixed_dally(rack: f64, net: f64) -> Dally {
    Dally::new(DallyConfig {
        rack_timer: rack,
        network_timer: net,
        auto_tune: false,
        ..DallyConfig::default()
    })
}

// One rack of two 4-GPU machines. X1 and X2 (3 GPUs each) fill 3 of each
// machine; Z (2 GPUs, 100 s) arrives at 10 and fits only across machines.
// Gandiva places it at once (1.5x: 150 s → JCT 150). Dally waits for its
// rack timer (50 s) and places it at 60 → finish 210, JCT 200. With a
// 1000 s rack timer Dally waits for X1 to finish (t=100) and runs Z inside
// one machine: 100-200 → JCT 190.
#[test]
fn dally_waits_for_its_rack_timer_to_expire() {
    let spec = ClusterSpec::new(1, 2, 4, 64.0);
    let jobs = [
        job("X1", 0.0, 3, 100.0),
        job("X2", 0.0, 3, 1000.0),
        job("Z", 10.0, 2, 100.0),
    ];
    let o = run(spec, &no_leases(), &jobs, &mut Gandiva::default());
    assert_jcts!(o, "Z" => 150.0);
    let o = run(spec, &no_leases(), &jobs, &mut fixed_dally(50.0, 100.0));
    assert_jcts!(o, "Z" => 200.0);
    assert_eq!(o.jobs[2].widest, Locality::Rack);
    let o = run(spec, &no_leases(), &jobs, &mut fixed_dally(1000.0, 2000.0));
    assert_jcts!(o, "Z" => 190.0);
    assert_eq!(o.jobs[2].widest, Locality::Slot);
}

// Two racks of two 2-GPU machines (4 GPUs a rack), timers far away. J3 (3
// GPUs) is too big for a machine: it takes a rack at once (1.5x → 150 s).
// W (6 GPUs) at 200 is too big for a rack: anywhere at once (2x → 200 s).
#[test]
fn dally_skips_levels_a_job_is_too_big_for() {
    let spec = ClusterSpec::new(2, 2, 2, 64.0);
    let jobs = [job("J3", 0.0, 3, 100.0), job("W", 200.0, 6, 100.0)];
    let o = run(spec, &no_leases(), &jobs, &mut fixed_dally(1000.0, 5000.0));
    assert_jcts!(o, "J3" => 150.0, "W" => 200.0);
    assert_eq!(o.jobs[0].widest, Locality::Rack);
    assert_eq!(o.jobs[1].widest, Locality::Cluster);
}

// Waits 10, 20, 30 s at machine level: mean 20, sigma sqrt(200/3) → timer
// 20 + 2*8.1650 = 36.330. A window of 2 keeps 20, 30: 25 + 2*5 = 35.
// All-zero waits clamp to the lower bound; no rack-level history leaves the
// network timer at its default.
#[test]
fn auto_tuner_timer_after_a_given_history() {
    let mut t = Tuner::new(50, (30.0, 3600.0));
    for w in [10.0, 20.0, 30.0] {
        t.record(4, w, Locality::Machine);
    }
    let got = t.rack_timer(4).unwrap_or(f64::NAN);
    assert!(
        (got - (20.0 + 2.0 * (200.0f64 / 3.0).sqrt())).abs() < 1e-9,
        "{got}"
    );
    assert_eq!(t.network_timer(4), None);
    assert_eq!(t.rack_timer(8), None);
    let mut t2 = Tuner::new(2, (30.0, 3600.0));
    for w in [10.0, 20.0, 30.0] {
        t2.record(4, w, Locality::Slot);
    }
    assert_eq!(t2.rack_timer(4), Some(35.0));
    let mut t3 = Tuner::new(5, (30.0, 3600.0));
    t3.record(2, 0.0, Locality::Machine);
    t3.record(2, 4000.0, Locality::Rack);
    assert_eq!(t3.rack_timer(2), Some(30.0));
    assert_eq!(t3.network_timer(2), Some(3600.0));

    let mut d = Dally::new(DallyConfig::default());
    for w in [10.0, 20.0, 30.0] {
        d.tuner_mut().record(4, w, Locality::Machine);
    }
    let (rack, net) = d.timers(4);
    assert!(
        (rack - 36.3299).abs() < 1e-3 && net == 600.0,
        "{rack} {net}"
    );
    assert_eq!(d.allowed(Locality::Slot, 4, 36.0).0, Locality::Machine);
    assert_eq!(
        d.allowed(Locality::Slot, 4, 37.0),
        (Locality::Rack, Some(600.0))
    );
    assert_eq!(d.allowed(Locality::Slot, 4, 600.0).0, Locality::Cluster);
}

// Lease boundaries alone preempt nothing when every job fits: S and T each
// take one 2-GPU machine and run undisturbed.
#[test]
fn dally_does_not_preempt_when_everything_fits() {
    let spec = ClusterSpec::new(2, 1, 2, 64.0);
    let cfg = SimConfig {
        lease: 50.0,
        ..SimConfig::default()
    };
    let jobs = [job("S", 0.0, 2, 100.0), job("T", 10.0, 2, 100.0)];
    let o = run(spec, &cfg, &jobs, &mut Dally::new(DallyConfig::default()));
    assert_jcts!(o, "S" => 100.0, "T" => 100.0);
    assert_eq!(o.jobs.iter().map(|j| j.preemptions).sum::<u32>(), 0);
}

// The tuned timer in a run. H (2 GPUs, 10 s) starts at once at t=0: a wait
// of 0 at machine level, so the tuned rack timer for 2-GPU jobs becomes
// the lower bound, 30 s (the untuned default is 1000 s). X1 and X2 (3 GPUs,
// 1000 s) then fill 3 of each machine; Z (2 GPUs, 100 s) arrives at 30 and
// fits only across machines. Tuned: rack allowed at 60 → 1.5x → finish 210,
// JCT 180. Untuned: Z waits for X1 (t=1020) and runs in one machine until
// 1120, JCT 1090.
#[test]
fn dally_auto_tuned_timer_after_a_given_history() {
    let spec = ClusterSpec::new(1, 2, 4, 64.0);
    let jobs = [
        job("H", 0.0, 2, 10.0),
        job("X1", 20.0, 3, 1000.0),
        job("X2", 20.0, 3, 1000.0),
        job("Z", 30.0, 2, 100.0),
    ];
    let cfg = |auto_tune| DallyConfig {
        rack_timer: 1000.0,
        network_timer: 5000.0,
        auto_tune,
        window: 10,
        bounds: (30.0, 3600.0),
        ..DallyConfig::default()
    };
    let o = run(spec, &no_leases(), &jobs, &mut Dally::new(cfg(true)));
    assert_jcts!(o, "H" => 10.0, "Z" => 180.0);
    assert_eq!(o.jobs[3].widest, Locality::Rack);
    let o = run(spec, &no_leases(), &jobs, &mut Dally::new(cfg(false)));
    assert_jcts!(o, "Z" => 1090.0);
}

#[test]
fn a_cluster_whose_gpu_count_overflows_is_refused_not_allocated() {
    // racks x machines x GPUs wraps a u64 to 1 if multiplied naively.
    let spec = ClusterSpec::new(11_806_113, 409_891, 7_623_851, 1.0);
    assert_eq!(spec.total_gpus(), u64::MAX);
    let err = spec.validate().unwrap_err().to_string();
    common::assert_says(&err, "exceed the limit");
}
