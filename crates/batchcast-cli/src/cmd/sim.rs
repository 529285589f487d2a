//! `batchcast sim`: run scheduling policies over a trace on a simulated
//! GPU cluster and compare them (the simulator is batchcast-sim).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use crate::out::{out, outln};
use anyhow::{bail, Context, Result};
use batchcast_sim::trace::{read_cluster, read_file, ClusterFile, Format};
use batchcast_sim::{
    apply_standin, by_name, comparison_table, jct_cdf_svg, jobs_csv, queue_svg, simulate,
    simulate_bidding, synthetic, utilisation_svg, Bidder, BiddingRun, ClusterSpec, DallySetup,
    DataSharing, JobSpec, Outcome, SimConfig, StandinReport, Summary, SynthConfig,
};
use clap::Args;

#[derive(Args)]
pub struct SimArgs {
    /// Trace file; without it a seeded synthetic trace is generated.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Trace format: dally (alias cluster-sim: the published delay-scheduling
    /// simulator's JSON, slowdowns as throughput fractions <= 1,
    /// time_per_iteration on one GPU), batchcast (the same fields,
    /// slowdowns as multipliers >= 1, time_per_iteration of the whole job),
    /// helios (cluster_log.csv) or philly (cluster_job_log).
    #[arg(long, default_value = "dally")]
    format: String,
    /// Policies to compare, comma-separated: fifo, sjf, srsf (least service
    /// remaining), las (least service received: what the published
    /// simulator calls SRSF), tiresias, gandiva, dally. Default:
    /// dally,tiresias,gandiva,srsf,fifo; under --model bidding
    /// sjf,las,tiresias,gandiva.
    #[arg(long)]
    policy: Option<String>,
    /// Cluster file: the published simulator's ({"racks_in_cluster":..,
    /// "machines_per_rack":..,"slots_per_machine":..,"gpus_per_slot":..,
    /// "lease_time":..}) or batchcast's ({"racks":..,"machines_per_rack":..,
    /// "gpus_per_machine":..,"gpus_per_slot":..,"cpu_cores":..}). A published
    /// one sets the lease from lease_time and, unless given below, no
    /// restart cost and no congestion, as the published simulator has.
    #[arg(long)]
    cluster: Option<PathBuf>,
    #[arg(long, default_value_t = 8)]
    racks: u32,
    #[arg(long, default_value_t = 8)]
    machines_per_rack: u32,
    #[arg(long, default_value_t = 8)]
    gpus_per_machine: u32,
    /// GPUs per slot inside a machine (0: the machine is one slot).
    #[arg(long, default_value_t = 0)]
    gpus_per_slot: u32,
    /// CPU cores per machine for data loading; default 64. Not under
    /// --model bidding, which has no CPU model.
    #[arg(long)]
    cpu_cores: Option<f64>,
    /// Lease length, seconds (preemptive policies decide at its multiples);
    /// default 360, or a published cluster file's lease_time.
    #[arg(long)]
    lease: Option<f64>,
    /// Seconds a preempted job loses to checkpoint and restart; default 30,
    /// or 0 with a published cluster file. Under --model bidding: seconds
    /// per released GPU before it is offered again, as the published
    /// simulator's checkpointing overhead.
    #[arg(long)]
    restart_cost: Option<f64>,
    /// Under --model bidding, Dally's delay timers as the published
    /// simulator's command line gives them: RACK,NETWORK[,HISTORY], leases
    /// a job waits before it takes GPUs across machines, then anywhere
    /// (both -1: tuned per job from the last HISTORY leases); default 1,2,0.
    /// They apply when the cluster file says `"consolidate": "true"`.
    #[arg(long, allow_hyphen_values = true)]
    dally_delays: Option<String>,
    /// Congestion per extra job on a rack's cross-machine links; default
    /// 0.02, or 0 with a published cluster file. Not under --model bidding.
    #[arg(long)]
    rack_congestion: Option<f64>,
    /// Congestion per extra job on the cross-rack links; default 0.01, or 0
    /// with a published cluster file. Not under --model bidding.
    #[arg(long)]
    core_congestion: Option<f64>,
    /// Data loading: off (a pipeline per job), share (one per dataset and
    /// machine), place (share, and place same-dataset jobs together);
    /// default off. Not under --model bidding.
    #[arg(long)]
    data_sharing: Option<String>,
    /// Synthetic trace: jobs.
    #[arg(long, default_value_t = 5000)]
    jobs: usize,
    /// Synthetic trace: seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Synthetic trace: mean seconds between arrivals.
    #[arg(long, default_value_t = 30.0)]
    interarrival: f64,
    /// Synthetic trace: median ideal job duration, seconds.
    #[arg(long, default_value_t = 1800.0)]
    median_duration: f64,
    /// Synthetic trace: log-normal sigma of durations (tail weight).
    #[arg(long, default_value_t = 1.0)]
    duration_sigma: f64,
    /// Synthetic trace: share of communication-heavy jobs.
    #[arg(long, default_value_t = 0.3)]
    heavy_share: f64,
    /// Synthetic trace: CPU cores of loading per GPU.
    #[arg(long, default_value_t = 4.0)]
    cpu_per_gpu: f64,
    /// Synthetic trace: distinct datasets (Zipf popularity).
    #[arg(long, default_value_t = 20)]
    datasets: usize,
    /// Directory for per-job CSVs, summary.json and SVG charts.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summaries as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Scheduling model: gang (batchcast's: a job runs on all its GPUs or
    /// none, progress is continuous) or bidding (the published simulator's
    /// at 2953d56, to compare like with like: every free GPU is auctioned
    /// on its own, so a job runs on 1 to its GPUs; chunks of
    /// iteration_granularity iterations; leases; policies sjf, las,
    /// tiresias, gandiva; slow: one event per chunk).
    #[arg(long, default_value = "gang")]
    model: String,
    /// Per-placement slowdowns: trace (the trace's own) or standin (the
    /// stand-in network model: per model and level, an all-reduce over the
    /// published simulator's link bandwidths; jobs of a model it does not
    /// know keep the trace's). See docs/sim.md.
    #[arg(long, default_value = "trace")]
    network: String,
}

/// CPU cores per machine without `--cpu-cores`.
const CPU_CORES: f64 = 64.0;

/// The cluster from `--cluster` or the shape flags.
fn cluster(a: &SimArgs) -> Result<ClusterFile> {
    let file = match &a.cluster {
        Some(p) => read_cluster(p, a.cpu_cores.unwrap_or(CPU_CORES))?,
        None => {
            let spec = ClusterSpec {
                gpus_per_slot: a.gpus_per_slot,
                ..ClusterSpec::new(
                    a.racks,
                    a.machines_per_rack,
                    a.gpus_per_machine,
                    a.cpu_cores.unwrap_or(CPU_CORES),
                )
            };
            spec.validate()?;
            ClusterFile::from(spec)
        }
    };
    Ok(file)
}

/// The options: flags first, then a published cluster file's values and
/// its model's defaults (no restart cost, no congestion), then batchcast's.
fn config(a: &SimArgs, c: &ClusterFile, data_sharing: DataSharing) -> SimConfig {
    let d = SimConfig::default();
    let published = |v: f64, own: f64| if c.published { v } else { own };
    SimConfig {
        lease: a.lease.or(c.lease).unwrap_or(d.lease),
        restart_cost: a.restart_cost.unwrap_or(published(0.0, d.restart_cost)),
        rack_congestion: a
            .rack_congestion
            .unwrap_or(published(0.0, d.rack_congestion)),
        core_congestion: a
            .core_congestion
            .unwrap_or(published(0.0, d.core_congestion)),
        data_sharing,
    }
}

/// Dally's settings from --dally-delays and the cluster file's
/// `consolidate`.
fn dally_setup(delays: Option<&str>, consolidate: bool) -> Result<DallySetup> {
    let mut setup = DallySetup {
        consolidate,
        ..DallySetup::default()
    };
    let Some(d) = delays else {
        return Ok(setup);
    };
    let bad = || {
        anyhow::anyhow!(
            "--dally-delays {d:?}: give RACK,NETWORK[,HISTORY], leases as numbers (both -1: \
             tuned) and HISTORY a whole number of leases, e.g. 1,2 or -1,-1,100"
        )
    };
    let parts: Vec<&str> = d.split(',').map(str::trim).collect();
    if !(2..=3).contains(&parts.len()) {
        return Err(bad());
    }
    setup.rack_wait = parts[0].parse().map_err(|_| bad())?;
    setup.network_wait = parts[1].parse().map_err(|_| bad())?;
    if let Some(h) = parts.get(2) {
        setup.history = h.parse().map_err(|_| bad())?;
    }
    if !(setup.rack_wait.is_finite() && setup.network_wait.is_finite()) {
        return Err(bad());
    }
    Ok(setup)
}

/// Refuses the flags the bidding model has no use for, naming the first one
/// given.
fn refuse_gang_only_flags(a: &SimArgs) -> Result<()> {
    let given = [
        ("--data-sharing", a.data_sharing.is_some()),
        ("--rack-congestion", a.rack_congestion.is_some()),
        ("--core-congestion", a.core_congestion.is_some()),
        ("--cpu-cores", a.cpu_cores.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
        bail!(
            "{flag} does not apply to --model bidding: the bidding model has no CPU or \
             congestion model; use --model gang for it"
        );
    }
    Ok(())
}

pub fn run(a: SimArgs) -> Result<()> {
    let bidding = match a.model.as_str() {
        "gang" => false,
        "bidding" => true,
        o => bail!("unknown --model {o:?}; pick gang or bidding"),
    };
    if bidding {
        refuse_gang_only_flags(&a)?;
    }
    let cfile = cluster(&a)?;
    let spec = cfile.spec;
    let data_sharing_name = a.data_sharing.as_deref().unwrap_or("off");
    let data_sharing = match data_sharing_name {
        "off" => DataSharing::Off,
        "share" => DataSharing::Share,
        "place" => DataSharing::SharePlace,
        o => bail!("unknown --data-sharing {o:?}; pick off, share or place"),
    };
    let standin = match a.network.as_str() {
        "trace" => false,
        "standin" => true,
        o => bail!("unknown --network {o:?}; pick trace or standin"),
    };
    let cfg = config(&a, &cfile, data_sharing);
    published_notes(&a, &cfile, &cfg, bidding);
    let (mut jobs, origin) = load_jobs(&a, &cfile, &spec, bidding)?;
    if standin {
        standin_notes(&apply_standin(&mut jobs));
    }
    let names = policies(&a, bidding)?;
    let outcomes = if bidding {
        simulate_bids(&a, &cfile, &cfg, &jobs, origin, &names)?
    } else {
        simulate_gang(&spec, &cfg, &jobs, &names)?
    };
    let summaries: Vec<Summary> = outcomes.iter().map(Summary::of).collect();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&summaries)?)?;
    } else {
        outln!(
            "{}",
            heading(&cfile, bidding, jobs.len(), &outcomes, data_sharing_name)
        )?;
        out!("{}", comparison_table(&summaries))?;
    }
    if let Some(dir) = &a.out {
        write_out(dir, &outcomes, &summaries)?;
    }
    Ok(())
}

/// The policies `--policy` names (by default, the model's usual ones);
/// with the bidding model's Dally, a note on the published restart cost.
fn policies(a: &SimArgs, bidding: bool) -> Result<Vec<&str>> {
    let policy = a.policy.as_deref().unwrap_or(if bidding {
        "sjf,las,tiresias,gandiva"
    } else {
        "dally,tiresias,gandiva,srsf,fifo"
    });
    let names: Vec<&str> = policy
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        bail!("--policy names no policy; give e.g. dally,tiresias,gandiva,srsf,fifo");
    }
    if bidding && a.restart_cost.is_none() && names.iter().any(|n| n.eq_ignore_ascii_case("dally"))
    {
        eprintln!(
            "note: the published Dally (cluster-sim at 4cd660e) offers a released GPU again 1 s \
             per GPU later; give --restart-cost 1 to match it"
        );
    }
    Ok(names)
}

/// Runs each bidding-model policy of `names` over the trace whose clock
/// starts at `origin`.
fn simulate_bids(
    a: &SimArgs,
    cfile: &ClusterFile,
    cfg: &SimConfig,
    jobs: &[JobSpec],
    origin: f64,
    names: &[&str],
) -> Result<Vec<Outcome>> {
    let run = BiddingRun {
        origin,
        granularity: cfile.iteration_granularity.unwrap_or(1),
        published_default_cluster: cfile.published && !cfile.shape_used,
        dally: dally_setup(
            a.dally_delays.as_deref(),
            cfile.consolidate.unwrap_or(false),
        )?,
    };
    let mut outcomes = Vec::new();
    for n in names {
        let bidder = Bidder::by_name(n)?;
        outcomes.push(simulate_bidding(&cfile.spec, cfg, jobs, &run, bidder)?);
    }
    Ok(outcomes)
}

/// The line above the comparison table: the jobs and the cluster they ran
/// on (and with the gang model, the data sharing).
fn heading(
    cfile: &ClusterFile,
    bidding: bool,
    jobs: usize,
    outcomes: &[Outcome],
    data_sharing: &str,
) -> String {
    let spec = &cfile.spec;
    if bidding && cfile.published && !cfile.shape_used {
        format!(
            "{} jobs on {} GPUs (the published simulator's fixed cluster: {} racks of 32 GPUs)",
            jobs,
            outcomes.first().map_or(0, |o| o.total_gpus),
            spec.racks,
        )
    } else if bidding {
        format!(
            "{} jobs on {} GPUs ({} racks x {} machines x {} GPUs)",
            jobs,
            spec.total_gpus(),
            spec.racks,
            spec.machines_per_rack,
            spec.gpus_per_machine,
        )
    } else {
        format!(
            "{} jobs on {} GPUs ({} racks x {} machines x {} GPUs, {} cores each), data sharing {}",
            jobs,
            spec.total_gpus(),
            spec.racks,
            spec.machines_per_rack,
            spec.gpus_per_machine,
            spec.cpu_cores,
            data_sharing
        )
    }
}

/// What a published cluster file sets, and what of it is not simulated, on
/// stderr.
fn published_notes(a: &SimArgs, cfile: &ClusterFile, cfg: &SimConfig, bidding: bool) {
    if !cfile.published {
        return;
    }
    eprintln!(
        "published cluster file: lease {} s, restart cost {} s, congestion {} / {}{}{}",
        cfg.lease,
        cfg.restart_cost,
        cfg.rack_congestion,
        cfg.core_congestion,
        cfile
            .policy
            .as_deref()
            .map(|p| format!("; its cluster_policy {p} is not used (pick with --policy)"))
            .unwrap_or_default(),
        match (cfile.shape_used, a.model.as_str()) {
            (true, _) => "",
            (false, "bidding") => {
                "; should_use_config is not \"true\": as the published simulator does, \
                 the shape is ignored for its fixed cluster of 32 GPUs a rack (6 machines \
                 of 2 slots x 2 GPUs, 3 of 2 GPUs, 2 of 1 GPU)"
            }
            (false, _) => {
                "; should_use_config is not \"true\": the published simulator would ignore \
                 the shape and build its fixed cluster of 32 GPUs a rack; batchcast \
                 simulates the shape as written (--model bidding builds that cluster)"
            }
        },
    );
    if !bidding {
        eprintln!(
            "not simulated from the published model: per-GPU bidding (jobs run \
             gang-scheduled on all their GPUs, never on fewer), a chunk of iterations \
             holding its GPUs past the lease; --model bidding simulates them"
        );
    }
}

/// What `--network standin` replaced, on stderr.
fn standin_notes(r: &StandinReport) {
    let kept: usize = r.unknown.values().sum();
    let names: Vec<String> = r
        .unknown
        .iter()
        .map(|(m, n)| {
            let m = if m.is_empty() { "no model" } else { m.as_str() };
            format!("{m} ({n})")
        })
        .collect();
    eprintln!(
        "stand-in network model: slowdowns of {} jobs replaced{}",
        r.replaced,
        if kept > 0 {
            format!(
                "; {kept} keep the trace's, their model unknown to it: {}",
                names.join(", ")
            )
        } else {
            String::new()
        }
    );
}

/// The jobs to simulate, from `--trace` or synthetic, and the trace's clock
/// origin.
fn load_jobs(
    a: &SimArgs,
    cfile: &ClusterFile,
    spec: &ClusterSpec,
    bidding: bool,
) -> Result<(Vec<JobSpec>, f64)> {
    Ok(match &a.trace {
        Some(p) => {
            let mut t = read_file(p, Format::by_name(&a.format)?)?;
            if t.skipped > 0 {
                eprintln!(
                    "{}: skipped {} records without GPUs, run time or iterations",
                    p.display(),
                    t.skipped
                );
            }
            if t.halved > 0 {
                eprintln!(
                    "{}: {} jobs cut by the published simulator's job_group_id halving",
                    p.display(),
                    t.halved
                );
            }
            // The bidding model runs the chunks itself.
            let grew = if bidding {
                0
            } else {
                cfile.whole_chunks(&mut t.jobs)
            };
            if grew > 0 {
                if let Some(g) = cfile.iteration_granularity {
                    eprintln!(
                        "{grew} jobs rounded up to whole chunks of iteration_granularity {g}, \
                     as the published simulator runs them"
                    );
                }
            }
            (t.jobs, t.origin)
        }
        None => {
            let sc = SynthConfig {
                jobs: a.jobs,
                seed: a.seed,
                mean_interarrival: a.interarrival,
                heavy_share: a.heavy_share,
                median_duration: a.median_duration,
                duration_sigma: a.duration_sigma,
                cpu_per_gpu: a.cpu_per_gpu,
                datasets: a.datasets,
                ..SynthConfig::default()
            };
            (
                synthetic(&sc, spec.total_gpus().min(u32::MAX as u64) as u32)?,
                0.0,
            )
        }
    })
}

/// Runs each gang-model policy of `names`, with a progress bar on a terminal.
fn simulate_gang(
    spec: &ClusterSpec,
    cfg: &SimConfig,
    jobs: &[JobSpec],
    names: &[&str],
) -> Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    let mut policies = Vec::new();
    for n in names {
        policies.push(by_name(n)?);
    }
    let show = std::io::stderr().is_terminal();
    for p in &mut policies {
        let bar = show.then(|| {
            let b = crate::progress::bar(
                jobs.len() as u64,
                "{prefix:>9} [{bar:30}] {pos}/{len} jobs done, eta {eta}",
            );
            b.set_prefix(p.name().to_string());
            b
        });
        let o = simulate(spec, cfg, jobs, p.as_mut(), &mut |done, _| {
            if let Some(b) = &bar {
                b.set_position(done as u64);
            }
        })?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        outcomes.push(o);
    }
    Ok(outcomes)
}

/// Writes the per-job CSVs, the summaries and the charts into `dir`.
fn write_out(dir: &Path, outcomes: &[Outcome], summaries: &[Summary]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).with_context(|| format!("cannot write {}", p.display()))
    };
    for o in outcomes {
        write(&format!("{}.jobs.csv", o.policy), &jobs_csv(o))?;
    }
    write("summary.json", &serde_json::to_string_pretty(summaries)?)?;
    write("jct_cdf.svg", &jct_cdf_svg(outcomes)?)?;
    write("utilisation.svg", &utilisation_svg(outcomes)?)?;
    write("queue.svg", &queue_svg(outcomes)?)?;
    eprintln!(
        "wrote per-job CSVs, summary.json and three SVG charts to {}",
        dir.display()
    );
    Ok(())
}
