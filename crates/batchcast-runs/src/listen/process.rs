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
    /// (pid, start) -> CPU ticks last seen.
    seen: HashMap<(i32, u64), u64>,
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
        for (pid, s) in &members {
            self.seen.insert((*pid, s.start), s.cpu_ticks);
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
        let ticks: u64 = self.seen.values().sum();
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
