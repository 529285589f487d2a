//! CPU time and peak memory as the kernel accounts them (`getrusage`,
//! `wait4`), and the CPU time of this process's whole tree.

use crate::procfs;
use crate::tree::{descendants, snapshot, ticks_per_second};

/// Whose resource use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// This process, all threads.
    SelfProcess,
    /// Children that have been waited for (and theirs that they waited for).
    Children,
}

/// What a process used, as the kernel accounts it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size, bytes.
    pub max_rss_bytes: u64,
}

impl Usage {
    pub(crate) fn from_rusage(r: &libc::rusage) -> Usage {
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        Usage {
            cpu_seconds: t(r.ru_utime) + t(r.ru_stime),
            // Linux counts ru_maxrss in kilobytes.
            max_rss_bytes: u64::try_from(r.ru_maxrss).unwrap_or(0) * 1024,
        }
    }
}

/// What `who` has used so far; zero if the kernel will not say.
pub fn usage(who: Who) -> Usage {
    let which = match who {
        Who::SelfProcess => libc::RUSAGE_SELF,
        Who::Children => libc::RUSAGE_CHILDREN,
    };
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid, writable rusage for the call to fill.
    if unsafe { libc::getrusage(which, &mut r) } != 0 {
        return Usage::default();
    }
    Usage::from_rusage(&r)
}

/// User + system CPU seconds of `who`.
pub fn cpu_secs(who: Who) -> f64 {
    usage(who).cpu_seconds
}

/// CPU seconds used so far by this process and all its descendants: its
/// own time, the time of children it has reaped (finished DataLoader
/// workers), and the time of descendants still alive, from `/proc`.
pub fn tree_cpu_seconds() -> f64 {
    let all = snapshot();
    let me = std::process::id() as i32;
    let alive: u64 = descendants(&all, me)
        .into_iter()
        .filter_map(|p| all.iter().find(|(q, _)| *q == p).map(|(_, s)| s.cpu_ticks))
        .sum();
    cpu_secs(Who::SelfProcess) + cpu_secs(Who::Children) + alive as f64 / ticks_per_second()
}

/// CPU seconds all cores of the machine have been busy (`/proc/stat`):
/// what other processes use is this minus a tree's own.
pub fn machine_busy_seconds() -> f64 {
    procfs::read("/proc/stat")
        .and_then(|t| Some(procfs::cpu_line(t.lines().next()?)?.1))
        .map_or(0.0, |busy| busy as f64 / ticks_per_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_and_memory() {
        let t0 = cpu_secs(Who::SelfProcess);
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        let t1 = cpu_secs(Who::SelfProcess);
        assert!(t1 > t0);
        assert!(usage(Who::SelfProcess).max_rss_bytes > 0);
        assert!(tree_cpu_seconds() >= t1);
        assert!(machine_busy_seconds() > 0.0);
    }
}
