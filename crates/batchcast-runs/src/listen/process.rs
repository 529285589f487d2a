//! The process-tree listener: one job's tree, sampled by
//! [`batchcast_proc::ProcessTree`], as metric points under [`keys`].

use batchcast_proc::{procfs::Stat, ProcessTree};

use crate::keys;

/// One sample of `tree` as metric points; `all` is every process's stat,
/// read once per round.
pub(crate) fn sample(tree: &mut ProcessTree, all: &[(i32, Stat)], out: &mut Vec<(String, f64)>) {
    let s = tree.sample(all);
    out.push((keys::PROC_CPU_SECONDS.into(), s.cpu_seconds));
    out.push((keys::PROC_RSS_BYTES.into(), s.rss_bytes as f64));
    out.push((keys::PROC_PSS_BYTES.into(), s.pss_bytes as f64));
    out.push((keys::PROC_THREADS.into(), s.threads as f64));
    out.push((keys::PROC_PROCESSES.into(), s.processes as f64));
    if let Some(r) = s.rates {
        out.push((keys::PROC_CPU_PERCENT.into(), r.cpu_percent));
        out.push((keys::PROC_READ_BYTES_PER_S.into(), r.read_bytes_per_s));
        out.push((keys::PROC_WRITE_BYTES_PER_S.into(), r.write_bytes_per_s));
    }
}
