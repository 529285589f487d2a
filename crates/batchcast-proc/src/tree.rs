//! The process-tree sampler: what one process and everything it started
//! (DataLoader workers included) uses, from `/proc`.
//!
//! The tree is every process in the root's process group and every
//! descendant of the root. CPU time is the sum of each member's own time as
//! last seen, kept for members that have ended, so the total never goes
//! back; a process that lives and dies between two samples is missed (the
//! supervisor's final figure, from `wait4`, is exact).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::procfs::{self, Stat};

/// Every process's stat, read once for all the trees of a round.
pub fn snapshot() -> Vec<(i32, Stat)> {
    procfs::pids()
        .into_iter()
        .filter_map(|p| Some((p, procfs::stat(p)?)))
        .collect()
}

/// Every descendant of `root` in `all` (children, grandchildren, ...), not
/// `root` itself.
pub fn descendants(all: &[(i32, Stat)], root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, s) in all {
        children.entry(s.ppid).or_default().push(*pid);
    }
    let (mut out, mut todo) = (Vec::new(), vec![root]);
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).map_or(&[][..], |v| v) {
            // A bound costs nothing: a loop cannot happen in /proc.
            if out.len() < all.len() {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

/// Clock ticks per second, as `/proc` counts CPU time.
pub fn ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second().max(1) as f64
}

/// One sample of a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TreeSample {
    /// CPU seconds of the tree so far (members that ended included).
    pub cpu_seconds: f64,
    /// Resident bytes of the members alive now.
    pub rss_bytes: u64,
    /// Proportional set size of the members alive now (shared pages split).
    pub pss_bytes: u64,
    /// Threads of the members alive now.
    pub threads: u64,
    /// Members alive now.
    pub processes: usize,
    /// Rates since the previous sample (none at the first).
    pub rates: Option<Rates>,
}

/// Rates of a tree between two samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// CPU time over wall time, in percent of one core.
    pub cpu_percent: f64,
    /// Bytes read from storage per second.
    pub read_bytes_per_s: f64,
    /// Bytes written to storage per second.
    pub write_bytes_per_s: f64,
}

/// Samples one process tree.
pub struct ProcessTree {
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
    members: HashSet<i32>,
}

impl ProcessTree {
    /// A sampler of the tree under `root` (a process group leader).
    pub fn new(root: i32) -> ProcessTree {
        ProcessTree {
            root,
            seen: HashMap::new(),
            cpu_dead: 0,
            last: None,
            io_dead: (0, 0),
            io_seen: HashMap::new(),
            ticks_per_s: ticks_per_second(),
            page: rustix::param::page_size() as u64,
            members: HashSet::new(),
        }
    }

    /// Pids of the tree at the last sample.
    pub fn members(&self) -> &HashSet<i32> {
        &self.members
    }

    /// The members of the tree now, with their stat.
    fn find(&self, all: &[(i32, Stat)]) -> Vec<(i32, Stat)> {
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

    /// One sample; `all` is every process's stat ([`snapshot`]), read once
    /// per round.
    pub fn sample(&mut self, all: &[(i32, Stat)]) -> TreeSample {
        let members = self.find(all);
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
        let rates = self.last.and_then(|(then, t0, r0, w0)| {
            let dt = now.duration_since(then).as_secs_f64();
            (dt > 0.0).then(|| Rates {
                cpu_percent: 100.0 * (ticks.saturating_sub(t0) as f64 / self.ticks_per_s) / dt,
                read_bytes_per_s: read.saturating_sub(r0) as f64 / dt,
                write_bytes_per_s: written.saturating_sub(w0) as f64 / dt,
            })
        });
        self.last = Some((now, ticks, read, written));
        TreeSample {
            cpu_seconds: ticks as f64 / self.ticks_per_s,
            rss_bytes: rss,
            pss_bytes: pss,
            threads,
            processes: members.len(),
            rates,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, root: i32, start: u64, cpu_ticks: u64) -> (i32, Stat) {
        let s = Stat {
            state: 'S',
            ppid: if pid == root { 1 } else { root },
            pgrp: root,
            cpu_ticks,
            children_cpu_ticks: 0,
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
        let mut last = TreeSample::default();
        for step in 0..10_000u64 {
            let all = [
                stat(root, root, 1, step),
                stat(1000 + (step % 30_000) as i32, root, 10 + step, 2),
            ];
            last = tree.sample(&all);
        }
        assert!(tree.seen.len() <= 2, "{} remembered", tree.seen.len());
        assert!(tree.io_seen.len() <= 2);
        let ticks = 9_999 + 2 * 10_000;
        assert!(
            (last.cpu_seconds - ticks as f64 / tree.ticks_per_s).abs() < 1e-9,
            "{} s",
            last.cpu_seconds
        );
    }

    #[test]
    fn descendants_are_children_and_their_children() {
        let mut all = vec![stat(10, 10, 1, 0), stat(11, 10, 1, 0)];
        let mut grandchild = stat(12, 10, 1, 0);
        grandchild.1.ppid = 11;
        all.push(grandchild);
        all.push((
            13,
            Stat {
                ppid: 1,
                ..all[0].1
            },
        ));
        let mut d = descendants(&all, 10);
        d.sort();
        assert_eq!(d, vec![11, 12]);
        assert!(descendants(&all, 12).is_empty());
    }
}
