//! Simulator speed: a synthetic trace (default 100,000 jobs) on a 2,048-GPU
//! cluster (32 racks x 8 machines x 8 GPUs), every policy, wall time each.
//!
//! `cargo run --release -p batchcast-sim --example sim_bench [jobs] [runs]
//! [policy,...]` prints, per policy (default: all), the median of `runs`
//! (default 3) wall times, the CPU time of that run (Linux; it differs from
//! the wall time on a loaded machine), events per second and the resulting
//! makespan and mean JCT.

use std::time::Instant;

use batchcast_sim::{
    by_name, simulate, synthetic, ClusterSpec, DataSharing, SimConfig, Summary, SynthConfig,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let runs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    let only: Option<Vec<String>> = args
        .next()
        .map(|s| s.split(',').map(str::to_string).collect());
    let spec = ClusterSpec::new(32, 8, 8, 64.0);
    // ~90% offered load: mean demand ~3.4 GPUs x mean duration ~3,000 s
    // (log-normal, median 30 min, sigma 1) every 5.5 s on 2,048 GPUs.
    let sc = SynthConfig {
        jobs,
        seed: 7,
        mean_interarrival: 5.5,
        duration_sigma: 1.0,
        ..SynthConfig::default()
    };
    let trace = match synthetic(&sc, 256) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let cfg = SimConfig {
        data_sharing: DataSharing::SharePlace,
        ..SimConfig::default()
    };
    println!(
        "{} jobs on {} GPUs, {} run(s) per policy (median shown)",
        jobs,
        spec.total_gpus(),
        runs
    );
    println!(
        "{:<9} {:>9} {:>8} {:>10} {:>12} {:>13} {:>12}",
        "policy", "wall (s)", "cpu (s)", "events", "events/s", "makespan (h)", "mean JCT (h)"
    );
    for name in batchcast_sim::policy::NAMES {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..runs {
            let mut p = by_name(name).expect("known policy");
            let (t0, c0) = (Instant::now(), cpu_seconds());
            let o = simulate(&spec, &cfg, &trace, p.as_mut(), &mut |_, _| {}).expect("simulates");
            times.push((t0.elapsed().as_secs_f64(), cpu_seconds() - c0));
            last = Some(o);
        }
        times.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (med, cpu) = times[times.len() / 2];
        let o = last.expect("at least one run");
        let s = Summary::of(&o);
        println!(
            "{:<9} {:>9.2} {:>8.2} {:>10} {:>12.0} {:>13.1} {:>12.2}",
            name,
            med,
            cpu,
            o.events,
            o.events as f64 / med,
            s.makespan / 3600.0,
            s.mean_jct / 3600.0
        );
    }
}

/// CPU seconds this process has run (0 where /proc/self/schedstat is
/// missing).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}
