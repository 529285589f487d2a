//! The process-tree listener: what one job (its script and every process
//! it starts, DataLoader workers included) uses.
//!
//! The tree is every process in the job's process group (the runner makes
//! the job a group leader) and every descendant of the job. CPU time is the
//! sum of each member's own time as last seen, kept for members that have
//! ended, so the total never goes back; a process that lives and dies
//! between two samples is missed (the runner's final figure, from
//! `wait4`, is exact).

use std::collections::HashMap;
use std::time::Instant;

use super::procfs::{self, Stat};
use crate::keys;

/// Samples one job's tree.
pub(crate) struct ProcessTree {
    root: i32,
    /// (pid, start) -> CPU ticks last seen, of the members alive at the
    /// last sample (a job that starts a process per step must not grow it).
    seen: HashMap<(i32, u64), u64>,
    /// CPU ticks of members that have ended, as last seen.
    cpu_dead: u64,
    last: Option<(Instant, u64, u64, u64)>, // when, total cpu ticks, read bytes, write bytes
    /// Bytes read and written by members that have ended.
    io_dead: (u64, u64),
    io_seen: HashMap<(i32, u64), (u64, u64)>,
    ticks_per_s: f64,
    page: u64,
    /// Pids of the tree at the last sample (for the batchcast listener).
    pub(crate) members: std::collections::HashSet<i32>,
}

impl ProcessTree {
    pub(crate) fn new(root: i32) -> ProcessTree {
        ProcessTree {
            root,
            seen: HashMap::new(),
            cpu_dead: 0,
            last: None,
            io_dead: (0, 0),
            io_seen: HashMap::new(),
            ticks_per_s: rustix::param::clock_ticks_per_second().max(1) as f64,
            page: rustix::param::page_size() as u64,
            members: Default::default(),
        }
    }

    /// The members of the tree now, with their stat.
    fn members(&self, all: &[(i32, Stat)]) -> Vec<(i32, Stat)> {
        let parent: HashMap<i32, i32> = all.iter().map(|(p, s)| (*p, s.ppid)).collect();
        let in_tree = |mut pid: i32| {
            // Walk up at most a bounded number of parents (a loop cannot
            // happen in /proc, but a bound costs nothing).
            for _ in 0..256 {
                if pid == self.root {
                    return true;
                }
                match parent.get(&pid) {
                    Some(&pp) if pp > 0 => pid = pp,
                    _ => return false,
                }
            }
            false
        };
        all.iter()
            .filter(|(p, s)| s.pgrp == self.root || in_tree(*p))
            .copied()
            .collect()
    }

    /// One sample; `all` is every process's stat, read once per round.
    pub(crate) fn sample(&mut self, all: &[(i32, Stat)], out: &mut Vec<(String, f64)>) {
        let members = self.members(all);
        self.members = members.iter().map(|(p, _)| *p).collect();
        let (mut rss, mut pss, mut threads) = (0u64, 0u64, 0u64);
        let mut alive_io: HashMap<(i32, u64), (u64, u64)> = HashMap::new();
        let mut alive_cpu: HashMap<(i32, u64), u64> = HashMap::with_capacity(members.len());
        for (pid, s) in &members {
            alive_cpu.insert((*pid, s.start), s.cpu_ticks);
            rss += s.rss_pages * self.page;
            threads += s.threads;
            if let Some(t) = procfs::read(format!("/proc/{pid}/smaps_rollup")) {
                pss += procfs::field_kb(&t, "Pss").unwrap_or(0);
            }
            if let Some(t) = procfs::read(format!("/proc/{pid}/io")) {
                let r = procfs::field(&t, "read_bytes").unwrap_or(0);
                let w = procfs::field(&t, "write_bytes").unwrap_or(0);
                alive_io.insert((*pid, s.start), (r, w));
            }
        }
        for (k, v) in self.io_seen.drain() {
            if !alive_io.contains_key(&k) {
                self.io_dead.0 += v.0;
                self.io_dead.1 += v.1;
            }
        }
        let (mut read, mut written) = self.io_dead;
        for v in alive_io.values() {
            read += v.0;
            written += v.1;
        }
        self.io_seen = alive_io;
        for (k, v) in self.seen.drain() {
            if !alive_cpu.contains_key(&k) {
                self.cpu_dead += v;
            }
        }
        self.seen = alive_cpu;
        let ticks: u64 = self.cpu_dead + self.seen.values().sum::<u64>();
        let now = Instant::now();
        out.push((
            keys::PROC_CPU_SECONDS.into(),
            ticks as f64 / self.ticks_per_s,
        ));
        out.push((keys::PROC_RSS_BYTES.into(), rss as f64));
        out.push((keys::PROC_PSS_BYTES.into(), pss as f64));
        out.push((keys::PROC_THREADS.into(), threads as f64));
        out.push((keys::PROC_PROCESSES.into(), members.len() as f64));
        if let Some((then, t0, r0, w0)) = self.last {
            let dt = now.duration_since(then).as_secs_f64();
            if dt > 0.0 {
                let cpu = ticks.saturating_sub(t0) as f64 / self.ticks_per_s;
                out.push((keys::PROC_CPU_PERCENT.into(), 100.0 * cpu / dt));
                out.push((
                    keys::PROC_READ_BYTES_PER_S.into(),
                    read.saturating_sub(r0) as f64 / dt,
                ));
                out.push((
                    keys::PROC_WRITE_BYTES_PER_S.into(),
                    written.saturating_sub(w0) as f64 / dt,
                ));
            }
        }
        self.last = Some((now, ticks, read, written));
    }
}

/// Every process's stat, read once for all the jobs of a round.
pub(crate) fn snapshot() -> Vec<(i32, Stat)> {
    procfs::pids()
        .into_iter()
        .filter_map(|p| Some((p, procfs::stat(p)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, root: i32, start: u64, cpu_ticks: u64) -> (i32, Stat) {
        let s = Stat {
            ppid: if pid == root { 1 } else { root },
            pgrp: root,
            cpu_ticks,
            threads: 1,
            start,
            rss_pages: 1,
        };
        (pid, s)
    }

    /// A job that starts a short process at every step: what the tree
    /// remembers stays the size of what is alive, and the CPU total still
    /// counts every process that ended.
    #[test]
    fn a_job_starting_a_process_per_step_does_not_grow_the_tree() {
        let root = 100;
        let mut tree = ProcessTree::new(root);
        let mut out = Vec::new();
        for step in 0..10_000u64 {
            let all = [
                stat(root, root, 1, step),
                stat(1000 + (step % 30_000) as i32, root, 10 + step, 2),
            ];
            out.clear();
            tree.sample(&all, &mut out);
        }
        assert!(tree.seen.len() <= 2, "{} remembered", tree.seen.len());
        assert!(tree.io_seen.len() <= 2);
        let cpu = out
            .iter()
            .find(|(k, _)| k == keys::PROC_CPU_SECONDS)
            .map(|(_, v)| *v)
            .unwrap_or(0.0);
        let ticks = 9_999 + 2 * 10_000;
        assert!(
            (cpu - ticks as f64 / tree.ticks_per_s).abs() < 1e-9,
            "{cpu} s"
        );
    }
}
