//! Waiting jobs kept in one ordered queue per GPU demand. A pass visits
//! the best head among the demands no wider than the free GPUs, again and
//! again: the same jobs in the same order as ranking one queue and skipping
//! what does not fit, without reading the jobs that cannot fit (which made
//! a long queue cost quadratic time). SJF and Gandiva keep their queues
//! here; so do the preemptive ranking policies (see `Ranked`), whose lease
//! rounds read the waiting jobs only while they could take room ahead of a
//! running one. A job queued again under a new key leaves its old entry
//! stale, skipped and dropped when it comes first.

use std::collections::{btree_set, BTreeMap, BTreeSet, HashMap};
use std::iter::Peekable;

use crate::job::Locality;
use crate::sched::Sched;
use crate::state::Status;

/// An ordering key (two non-negative f64s as bits, which sort as the
/// values) and the job index.
pub(crate) type Key = (u64, u64, u32);

/// `x >= 0` as bits that sort as the values (-0 taken as +0).
pub(crate) fn bits(x: f64) -> u64 {
    (x + 0.0).to_bits()
}

/// Any `x` as bits that sort as `f64::total_cmp` sorts the values.
pub(crate) fn total_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// Waiting jobs by GPU demand, each queue ordered by `Key`.
#[derive(Default)]
pub(crate) struct ByDemand {
    queues: BTreeMap<u32, BTreeSet<Key>>,
    /// Each queued job's newest key; entries under another key are stale.
    current: HashMap<u32, Key>,
}

impl ByDemand {
    /// Queues job `key.2`, which needs `gpus` GPUs.
    pub(crate) fn insert(&mut self, gpus: u32, key: Key) {
        self.current.insert(key.2, key);
        self.queues.entry(gpus).or_default().insert(key);
    }

    /// Forgets job `i`'s entry (it stays queued as a stale entry).
    pub(crate) fn forget(&mut self, i: u32) {
        self.current.remove(&i);
    }

    /// Starts waiting jobs best key first, backfilling what fits, until the
    /// free GPUs cannot hold the smallest waiting job.
    pub(crate) fn start_best(&mut self, s: &mut Sched<'_>) {
        self.walk(s, |s, i| {
            s.try_start(i, Locality::Cluster);
        });
    }

    /// Visits the waiting jobs no wider than the free GPUs at the start,
    /// best key first, until the free GPUs cannot hold the smallest waiting
    /// job: the order of ranking all of them, at a cost of the jobs visited
    /// (times the number of demands), however long the queue. Jobs wider
    /// than the GPUs free at their turn are passed over (see [`Reach`] for
    /// those). The entries of jobs that `visit` started, and stale ones
    /// met, are dropped.
    pub(crate) fn walk(
        &mut self,
        s: &mut Sched<'_>,
        mut visit: impl FnMut(&mut Sched<'_>, u32),
    ) -> Reach {
        let mut heads = Heads::new(&self.queues);
        let mut reach = Reach {
            widest: width(s.free_gpus()),
            stopped: false,
            visited: Vec::new(),
        };
        let mut dead = Vec::new();
        loop {
            let free = s.free_gpus();
            if free == 0 || free < s.smallest_demand() {
                reach.stopped = true;
                break;
            }
            let Some((pos, g, k)) = heads.best(width(free), &self.current, s, &mut dead) else {
                break;
            };
            heads.pop(pos);
            visit(s, k.2);
            reach.visited.push((g, k));
            if s.job(k.2).status != Status::Pending {
                dead.push((g, k));
            }
        }
        self.drop_entries(dead);
        reach
    }

    /// Job `i`'s newest entry, if it is queued.
    pub(crate) fn current(&self, i: u32) -> Option<Key> {
        self.current.get(&i).copied()
    }

    /// Lease-round preemption: keeps the best-ranked jobs, waiting (these
    /// queues) and running (`running`, best first, with their GPUs), whose
    /// GPU demands fit in the cluster together, and preempts the running
    /// jobs outside that set. Waiting jobs are read only while they could
    /// still take room ahead of a running one, so a lease round costs the
    /// running jobs plus at most one waiting job per GPU. Returns the
    /// preempted jobs.
    pub(crate) fn preempt_outside(
        &mut self,
        s: &mut Sched<'_>,
        running: &[(Key, u32)],
    ) -> Vec<u32> {
        let mut heads = Heads::new(&self.queues);
        let mut room = s.spec().total_gpus();
        let (mut dead, mut out) = (Vec::new(), Vec::new());
        // The best waiting head that fits `room`; it stays the best while
        // it still fits, and none stays none, as `room` only shrinks.
        let mut head = heads.best(width(room), &self.current, s, &mut dead);
        for &(rk, g) in running {
            while let Some((pos, pg, pk)) = head {
                if pg as u64 > room {
                    head = heads.best(width(room), &self.current, s, &mut dead);
                } else if pk < rk {
                    room -= pg as u64;
                    heads.pop(pos);
                    head = heads.best(width(room), &self.current, s, &mut dead);
                } else {
                    break;
                }
            }
            if g as u64 <= room {
                room -= g as u64;
            } else if s.preempt(rk.2) {
                out.push(rk.2);
            }
        }
        self.drop_entries(dead);
        out
    }

    /// Removes entries `(gpus, key)` and, where one is its job's newest,
    /// the job's record.
    fn drop_entries(&mut self, dead: Vec<(u32, Key)>) {
        for (g, k) in dead {
            if self.current.get(&k.2) == Some(&k) {
                self.current.remove(&k.2);
            }
            if let Some(q) = self.queues.get_mut(&g) {
                q.remove(&k);
                if q.is_empty() {
                    self.queues.remove(&g);
                }
            }
        }
    }
}

/// How far a [`ByDemand::walk`] got. A walk that visited every job
/// no wider than the GPUs free at its start would have visited, beyond
/// `visited`, the queued jobs no wider than `widest` ranked before the last
/// one visited where the free GPUs ran out (`stopped`), or all of them
/// otherwise: each too wide for the GPUs free at its turn.
pub(crate) struct Reach {
    /// GPUs free when the walk began (as a demand bound).
    pub(crate) widest: u32,
    /// The walk ended because the free GPUs ran out.
    pub(crate) stopped: bool,
    /// The entries visited, in order, with their demands.
    pub(crate) visited: Vec<(u32, Key)>,
}

/// `n` GPUs as a demand bound.
fn width(n: u64) -> u32 {
    n.min(u32::MAX as u64) as u32
}

/// One cursor per demand queue (ascending demand), merged by key.
struct Heads<'q> {
    cursors: Vec<Cursor<'q>>,
}

/// A demand queue read in key order.
struct Cursor<'q> {
    gpus: u32,
    keys: Peekable<btree_set::Iter<'q, Key>>,
    /// The head is known to be a waiting job's newest entry (it stays so
    /// while the cursor lives: a pass starts or preempts only the jobs it
    /// reads, and reads a waiting job once).
    checked: bool,
}

impl<'q> Heads<'q> {
    fn new(queues: &'q BTreeMap<u32, BTreeSet<Key>>) -> Self {
        let cursors = queues
            .iter()
            .map(|(&gpus, q)| Cursor {
                gpus,
                keys: q.iter().peekable(),
                checked: false,
            })
            .collect();
        Heads { cursors }
    }

    /// The best head of a waiting job's newest entry among the demands no
    /// wider than `widest`, as (cursor, demand, key), not consumed; the
    /// other heads met on the way are passed over and listed in `dead`.
    fn best(
        &mut self,
        widest: u32,
        current: &HashMap<u32, Key>,
        s: &Sched<'_>,
        dead: &mut Vec<(u32, Key)>,
    ) -> Option<(usize, u32, Key)> {
        let mut best: Option<(usize, u32, Key)> = None;
        for (pos, c) in self.cursors.iter_mut().enumerate() {
            if c.gpus > widest {
                break;
            }
            while let Some(&&k) = c.keys.peek() {
                if c.checked
                    || current.get(&k.2) == Some(&k) && s.job(k.2).status == Status::Pending
                {
                    c.checked = true;
                    if best.is_none_or(|b| k < b.2) {
                        best = Some((pos, c.gpus, k));
                    }
                    break;
                }
                dead.push((c.gpus, k));
                c.keys.next();
            }
        }
        best
    }

    /// Consumes the head of cursor `pos`.
    fn pop(&mut self, pos: usize) {
        if let Some(c) = self.cursors.get_mut(pos) {
            c.keys.next();
            c.checked = false;
        }
    }
}
