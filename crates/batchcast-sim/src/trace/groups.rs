//! The published simulator's job groups (hyper-parameter searches): the
//! jobs of one `job_group_id` that arrive with its first job have their
//! iterations cut in halving steps, as `JobGroupEvaluationEvent.java`
//! (cluster-sim at 2953d56) does when that first arrival is handled.
//!
//! The group's `n` jobs are sorted by iterations (then id); with `max` the
//! largest count and `step = max / floor(log2 n)` (whole numbers), the
//! first half is cut to at most `step`, half of the rest to `2 step`, and so
//! on, until one job is left; it keeps its iterations. Jobs of the group
//! that arrive later are not cut.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::java_sort::java_sort;

/// One record of a published job list, as the halving sees it.
pub(crate) struct Member {
    /// `job_group_id`, when the record has one.
    pub group: Option<String>,
    /// The record's `job_id` (sorted as a number when it is one).
    pub id: String,
    /// Arrival, seconds.
    pub arrival: f64,
    /// `total_iterations` (records with zero iterations count too).
    pub iterations: f64,
}

fn by_id(a: &str, b: &str) -> Ordering {
    match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

/// The published comparator: `(int) (iterations_a - iterations_b)`, then
/// the ids. The cast keeps the low 32 bits, so a difference of 2^31
/// iterations or more (the sense_* traces have them) can flip the sign.
fn java_order(a: &Member, b: &Member) -> Ordering {
    let d = (a.iterations as i64).wrapping_sub(b.iterations as i64) as i32;
    d.cmp(&0).then_with(|| by_id(&a.id, &b.id))
}

/// The iterations each member runs after its group's halving, in input
/// order, and how many members were cut.
pub(crate) fn halved(members: &[Member]) -> (Vec<f64>, usize) {
    let mut out: Vec<f64> = members.iter().map(|m| m.iterations).collect();
    let mut first: HashMap<&str, f64> = HashMap::new();
    for m in members {
        if let Some(g) = &m.group {
            let e = first.entry(g.as_str()).or_insert(m.arrival);
            *e = e.min(m.arrival);
        }
    }
    let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, m) in members.iter().enumerate() {
        if let Some(g) = &m.group {
            if first.get(g.as_str()) == Some(&m.arrival) {
                groups.entry(g.as_str()).or_default().push(i);
            }
        }
    }
    let mut cut = 0;
    for mut idx in groups.into_values() {
        let n = idx.len();
        if n < 2 {
            continue;
        }
        java_sort(&mut idx, &|a, b| java_order(&members[a], &members[b]));
        let max = members[idx[n - 1]].iterations.floor();
        let steps = ((n as f64).log10() / 2f64.log10()) as u64;
        let step = (max as u64 / steps.max(1)) as f64;
        let (mut index, mut count) = (0, 1.0);
        while index < n - 1 {
            let take = (n - index) / 2;
            for &i in &idx[index..index + take] {
                let cap = step * count;
                if cap < out[i] {
                    out[i] = cap;
                    cut += 1;
                }
            }
            index += take;
            count += 1.0;
        }
    }
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(group: &str, id: &str, arrival: f64, iterations: f64) -> Member {
        Member {
            group: (!group.is_empty()).then(|| group.to_string()),
            id: id.into(),
            arrival,
            iterations,
        }
    }

    #[test]
    fn four_jobs_are_cut_to_one_and_two_steps() {
        // n = 4: steps = 2, step = 1000 / 2 = 500; jobs 1, 2 to <= 500, job 3
        // to <= 1000, job 4 keeps its 1000.
        let g = [
            m("7", "1", 0.0, 1000.0),
            m("7", "2", 0.0, 800.0),
            m("7", "3", 0.0, 900.0),
            m("7", "4", 0.0, 1000.0),
        ];
        let (it, cut) = halved(&g);
        // Sorted: 2 (800), 3 (900), 1 (1000), 4 (1000).
        assert_eq!(it, vec![1000.0, 500.0, 500.0, 1000.0]);
        assert_eq!(cut, 2);
    }

    #[test]
    fn a_difference_past_2_pow_31_iterations_sorts_as_java_does() {
        // (int) (2_300_000_000 - 100) is negative: Java's insertion sort
        // leaves the big job first, so it is the one cut (to 100 / 1) and
        // the 100-iteration job, now last, keeps its count.
        let g = [m("3", "1", 0.0, 2_300_000_000.0), m("3", "2", 0.0, 100.0)];
        let (it, cut) = halved(&g);
        assert_eq!((it, cut), (vec![100.0, 100.0], 1));
    }

    #[test]
    fn later_arrivals_and_ungrouped_jobs_are_not_cut() {
        let g = [
            m("1", "1", 5.0, 100.0),
            m("1", "2", 5.0, 400.0),
            m("1", "3", 9.0, 50.0),
            m("", "4", 5.0, 10.0),
        ];
        // Group 1 at t = 5 has jobs 1 and 2: steps 1, step 400; job 1 is
        // already under it.
        let (it, cut) = halved(&g);
        assert_eq!(it, vec![100.0, 400.0, 50.0, 10.0]);
        assert_eq!(cut, 0);
    }
}
