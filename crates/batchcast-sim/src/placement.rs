//! Where a job's GPUs go: the tightest locality level with room, best fit
//! inside it, optionally next to jobs of the same dataset.

use crate::cluster::Cluster;
use crate::job::Locality;

/// Finds `gpus` free GPUs spanning no wider than `max_level`, trying the
/// tightest level first. `shares(m)` says whether machine `m` already runs
/// a job of the same dataset (preferred when `prefer_dataset` is set).
/// Returns the GPUs and the level they span, or `None` when nothing fits.
pub fn place(
    c: &Cluster,
    gpus: u32,
    max_level: Locality,
    prefer_dataset: bool,
    shares: &dyn Fn(usize) -> bool,
) -> Option<(Vec<u32>, Locality)> {
    let spec = &c.spec;
    if gpus == 0 || c.free_total() < gpus as u64 {
        return None;
    }
    let pref = |m: usize| prefer_dataset && shares(m);
    // One machine (and, where possible, one slot of it).
    if gpus <= spec.gpus_per_machine && max_level >= Locality::Slot {
        let mut best: Option<(bool, bool, u32, usize)> = None; // (!slot, !pref, free, m)
        for (m, &free) in c.free_machines().iter().enumerate() {
            if free < gpus {
                continue;
            }
            let in_slot = gpus <= spec.slot_size() && slot_with_room(c, m, gpus).is_some();
            if !in_slot && max_level < Locality::Machine {
                continue;
            }
            let key = (!in_slot, !pref(m), free, m);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        if let Some((not_slot, _, _, m)) = best {
            let picked: Vec<u32> = if !not_slot {
                let s = slot_with_room(c, m, gpus)?;
                let per = spec.slot_size();
                let base = m as u32 * spec.gpus_per_machine + s * per;
                (base..base + per)
                    .filter(|&g| c.owner(g).is_none())
                    .take(gpus as usize)
                    .collect()
            } else {
                c.free_gpus_of(m).take(gpus as usize).collect()
            };
            let level = spec.span(&picked);
            return Some((picked, level));
        }
    }
    if max_level < Locality::Rack {
        return None;
    }
    // One rack, fewest machines: best-fit rack, machines with most room first.
    let mpr = spec.machines_per_rack as usize;
    let best_rack = c
        .free_racks()
        .iter()
        .enumerate()
        .filter(|(_, &f)| f >= gpus)
        .min_by_key(|(r, &f)| (f, *r))
        .map(|(r, _)| r);
    if let Some(r) = best_rack {
        let picked = take_from(c, (r * mpr..(r + 1) * mpr).collect(), gpus, &pref);
        let level = spec.span(&picked);
        return Some((picked, level));
    }
    if max_level < Locality::Cluster {
        return None;
    }
    let mut racks: Vec<usize> = (0..spec.racks as usize).collect();
    racks.sort_by_key(|&r| (std::cmp::Reverse(c.free_racks()[r]), r));
    let mut machines = Vec::new();
    let mut room = 0u64;
    for r in racks {
        if room >= gpus as u64 {
            break;
        }
        room += c.free_racks()[r] as u64;
        machines.extend(r * mpr..(r + 1) * mpr);
    }
    let picked = take_from(c, machines, gpus, &pref);
    let level = spec.span(&picked);
    Some((picked, level))
}

/// The first slot of machine `m` with at least `gpus` free GPUs, best fit.
fn slot_with_room(c: &Cluster, m: usize, gpus: u32) -> Option<u32> {
    let spec = &c.spec;
    let per = spec.slot_size();
    let slots = spec.gpus_per_machine / per;
    (0..slots)
        .map(|s| {
            let base = m as u32 * spec.gpus_per_machine + s * per;
            let free = (base..base + per).filter(|&g| c.owner(g).is_none()).count() as u32;
            (free, s)
        })
        .filter(|&(free, _)| free >= gpus)
        .min()
        .map(|(_, s)| s)
}

/// Takes `gpus` GPUs from `machines`: same-dataset machines first, then
/// those with the most room (fewest machines spanned).
fn take_from(
    c: &Cluster,
    mut machines: Vec<usize>,
    gpus: u32,
    pref: &dyn Fn(usize) -> bool,
) -> Vec<u32> {
    let free = c.free_machines();
    machines.retain(|&m| free[m] > 0);
    machines.sort_by_key(|&m| (!pref(m), std::cmp::Reverse(free[m]), m));
    let mut out = Vec::with_capacity(gpus as usize);
    for m in machines {
        for g in c.free_gpus_of(m) {
            if out.len() == gpus as usize {
                return out;
            }
            out.push(g);
        }
    }
    out
}
