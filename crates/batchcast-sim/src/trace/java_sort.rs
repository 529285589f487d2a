//! `Collections.sort` as Java 11+ runs it (`java.util.TimSort`: runs,
//! binary insertion, merges with galloping), step for step, so that a
//! comparator that is not a total order gives the order it gives there.
//! The published simulator sorts a job group with such a comparator (see
//! `groups`). With a consistent comparator the result is that of any stable
//! sort. Never panics, whatever `cmp` answers.

use std::cmp::Ordering;

const MIN_MERGE: usize = 32;
const MIN_GALLOP: usize = 7;

/// Sorts `a` with `cmp` as Java would; false where Java would throw
/// "Comparison method violates its general contract" (the order is then
/// that of a stable sort under `cmp`'s first answers, not Java's).
pub(crate) fn java_sort(a: &mut [usize], cmp: &dyn Fn(usize, usize) -> Ordering) -> bool {
    let n = a.len();
    if n < 2 {
        return true;
    }
    if n < MIN_MERGE {
        let run = count_run(a, 0, n, cmp);
        binary_sort(a, 0, n, run, cmp);
        return true;
    }
    let mut ts = TimSort {
        a,
        cmp,
        min_gallop: MIN_GALLOP,
        runs: Vec::new(),
        ok: true,
    };
    let min_run = min_run_length(n);
    let (mut lo, mut left) = (0, n);
    while left != 0 {
        let mut run = count_run(ts.a, lo, n, cmp);
        if run < min_run {
            let force = left.min(min_run);
            binary_sort(ts.a, lo, lo + force, lo + run, cmp);
            run = force;
        }
        ts.runs.push((lo, run));
        ts.merge_collapse();
        lo += run;
        left -= run;
    }
    while ts.runs.len() > 1 {
        let mut k = ts.runs.len() - 2;
        if k > 0 && ts.runs[k - 1].1 < ts.runs[k + 1].1 {
            k -= 1;
        }
        ts.merge_at(k);
    }
    ts.ok
}

fn min_run_length(mut n: usize) -> usize {
    let mut r = 0;
    while n >= MIN_MERGE {
        r |= n & 1;
        n >>= 1;
    }
    n + r
}

/// Length of the run at `lo`; a strictly descending one is reversed.
fn count_run(
    a: &mut [usize],
    lo: usize,
    hi: usize,
    cmp: &dyn Fn(usize, usize) -> Ordering,
) -> usize {
    let mut r = lo + 1;
    if r == hi {
        return 1;
    }
    if cmp(a[r], a[lo]).is_lt() {
        r += 1;
        while r < hi && cmp(a[r], a[r - 1]).is_lt() {
            r += 1;
        }
        a[lo..r].reverse();
    } else {
        r += 1;
        while r < hi && cmp(a[r], a[r - 1]).is_ge() {
            r += 1;
        }
    }
    r - lo
}

fn binary_sort(
    a: &mut [usize],
    lo: usize,
    hi: usize,
    start: usize,
    cmp: &dyn Fn(usize, usize) -> Ordering,
) {
    let start = if start == lo { start + 1 } else { start };
    for s in start..hi {
        let pivot = a[s];
        let (mut left, mut right) = (lo, s);
        while left < right {
            let mid = (left + right) / 2;
            if cmp(pivot, a[mid]).is_lt() {
                right = mid;
            } else {
                left = mid + 1;
            }
        }
        a[left..=s].rotate_right(1);
    }
}

/// Where `key` goes in `run` (leftmost place among equals), from `hint`.
fn gallop_left(
    key: usize,
    run: &[usize],
    hint: usize,
    cmp: &dyn Fn(usize, usize) -> Ordering,
) -> usize {
    let len = run.len();
    let (mut last, mut ofs) = (0usize, 1usize);
    if cmp(key, run[hint]).is_gt() {
        let max = len - hint;
        while ofs < max && cmp(key, run[hint + ofs]).is_gt() {
            last = ofs;
            ofs = ofs * 2 + 1;
        }
        ofs = ofs.min(max);
        last += hint;
        ofs += hint;
    } else {
        let max = hint + 1;
        while ofs < max && cmp(key, run[hint - ofs]).is_le() {
            last = ofs;
            ofs = ofs * 2 + 1;
        }
        ofs = ofs.min(max);
        let t = last;
        // Java keeps lastOfs = hint - ofs, which may be -1; shift by one.
        last = hint + 1 - ofs;
        ofs = hint - t;
        return search(key, run, last, ofs, |k, m| cmp(k, m).is_gt());
    }
    search(key, run, last + 1, ofs, |k, m| cmp(k, m).is_gt())
}

/// Where `key` goes in `run` (rightmost place among equals), from `hint`.
fn gallop_right(
    key: usize,
    run: &[usize],
    hint: usize,
    cmp: &dyn Fn(usize, usize) -> Ordering,
) -> usize {
    let len = run.len();
    let (mut last, mut ofs) = (0usize, 1usize);
    if cmp(key, run[hint]).is_lt() {
        let max = hint + 1;
        while ofs < max && cmp(key, run[hint - ofs]).is_lt() {
            last = ofs;
            ofs = ofs * 2 + 1;
        }
        ofs = ofs.min(max);
        let t = last;
        last = hint + 1 - ofs;
        ofs = hint - t;
        return search(key, run, last, ofs, |k, m| !cmp(k, m).is_lt());
    }
    let max = len - hint;
    while ofs < max && cmp(key, run[hint + ofs]).is_ge() {
        last = ofs;
        ofs = ofs * 2 + 1;
    }
    ofs = ofs.min(max);
    last += hint;
    ofs += hint;
    search(key, run, last + 1, ofs, |k, m| !cmp(k, m).is_lt())
}

/// Binary search in `run[lo..hi)`: the first place where `right_of` fails.
fn search(
    key: usize,
    run: &[usize],
    mut lo: usize,
    mut hi: usize,
    right_of: impl Fn(usize, usize) -> bool,
) -> usize {
    while lo < hi {
        let m = lo + (hi - lo) / 2;
        if right_of(key, run[m]) {
            lo = m + 1;
        } else {
            hi = m;
        }
    }
    hi
}

struct TimSort<'a> {
    a: &'a mut [usize],
    cmp: &'a dyn Fn(usize, usize) -> Ordering,
    min_gallop: usize,
    runs: Vec<(usize, usize)>,
    ok: bool,
}

impl TimSort<'_> {
    fn merge_collapse(&mut self) {
        while self.runs.len() > 1 {
            let r = &self.runs;
            let mut n = r.len() - 2;
            if (n > 0 && r[n - 1].1 <= r[n].1 + r[n + 1].1)
                || (n > 1 && r[n - 2].1 <= r[n].1 + r[n - 1].1)
            {
                if r[n - 1].1 < r[n + 1].1 {
                    n -= 1;
                }
            } else if r[n].1 > r[n + 1].1 {
                break;
            }
            self.merge_at(n);
        }
    }

    fn merge_at(&mut self, i: usize) {
        let (mut base1, mut len1) = self.runs[i];
        let (base2, mut len2) = self.runs[i + 1];
        self.runs[i].1 = len1 + len2;
        self.runs.remove(i + 1);
        let cmp = self.cmp;
        let k = gallop_right(self.a[base2], &self.a[base1..base1 + len1], 0, cmp);
        base1 += k;
        len1 -= k;
        if len1 == 0 {
            return;
        }
        len2 = gallop_left(
            self.a[base1 + len1 - 1],
            &self.a[base2..base2 + len2],
            len2 - 1,
            cmp,
        );
        if len2 == 0 {
            return;
        }
        if len1 <= len2 {
            self.merge_lo(base1, len1, base2, len2);
        } else {
            self.merge_hi(base1, len1, base2, len2);
        }
    }

    fn merge_lo(&mut self, base1: usize, mut len1: usize, base2: usize, mut len2: usize) {
        let cmp = self.cmp;
        let tmp: Vec<usize> = self.a[base1..base1 + len1].to_vec();
        let (mut c1, mut c2, mut dest) = (0usize, base2, base1);
        self.a[dest] = self.a[c2];
        dest += 1;
        c2 += 1;
        len2 -= 1;
        if len2 == 0 {
            self.a[dest..dest + len1].copy_from_slice(&tmp[c1..c1 + len1]);
            return;
        }
        if len1 == 1 {
            self.a.copy_within(c2..c2 + len2, dest);
            self.a[dest + len2] = tmp[c1];
            return;
        }
        let mut min_gallop = self.min_gallop as isize;
        'outer: loop {
            let (mut n1, mut n2) = (0usize, 0usize);
            loop {
                if cmp(self.a[c2], tmp[c1]).is_lt() {
                    self.a[dest] = self.a[c2];
                    dest += 1;
                    c2 += 1;
                    n2 += 1;
                    n1 = 0;
                    len2 -= 1;
                    if len2 == 0 {
                        break 'outer;
                    }
                } else {
                    self.a[dest] = tmp[c1];
                    dest += 1;
                    c1 += 1;
                    n1 += 1;
                    n2 = 0;
                    len1 -= 1;
                    if len1 == 1 {
                        break 'outer;
                    }
                }
                if (n1 | n2) as isize >= min_gallop {
                    break;
                }
            }
            loop {
                n1 = gallop_right(self.a[c2], &tmp[c1..c1 + len1], 0, cmp);
                if n1 != 0 {
                    self.a[dest..dest + n1].copy_from_slice(&tmp[c1..c1 + n1]);
                    dest += n1;
                    c1 += n1;
                    len1 -= n1;
                    if len1 <= 1 {
                        break 'outer;
                    }
                }
                self.a[dest] = self.a[c2];
                dest += 1;
                c2 += 1;
                len2 -= 1;
                if len2 == 0 {
                    break 'outer;
                }
                n2 = gallop_left(tmp[c1], &self.a[c2..c2 + len2], 0, cmp);
                if n2 != 0 {
                    self.a.copy_within(c2..c2 + n2, dest);
                    dest += n2;
                    c2 += n2;
                    len2 -= n2;
                    if len2 == 0 {
                        break 'outer;
                    }
                }
                self.a[dest] = tmp[c1];
                dest += 1;
                c1 += 1;
                len1 -= 1;
                if len1 == 1 {
                    break 'outer;
                }
                min_gallop -= 1;
                if !(n1 >= MIN_GALLOP || n2 >= MIN_GALLOP) {
                    break;
                }
            }
            min_gallop = min_gallop.max(0) + 2;
        }
        self.min_gallop = min_gallop.max(1) as usize;
        if len1 == 1 {
            self.a.copy_within(c2..c2 + len2, dest);
            self.a[dest + len2] = tmp[c1];
        } else if len1 == 0 {
            self.ok = false;
        } else {
            self.a[dest..dest + len1].copy_from_slice(&tmp[c1..c1 + len1]);
        }
    }

    fn merge_hi(&mut self, base1: usize, mut len1: usize, base2: usize, mut len2: usize) {
        let cmp = self.cmp;
        let tmp: Vec<usize> = self.a[base2..base2 + len2].to_vec();
        // Cursors point one past the element (Java's index + 1), so that
        // they never go below zero.
        let (mut c1, mut c2, mut dest) = (base1 + len1, len2, base2 + len2);
        dest -= 1;
        c1 -= 1;
        self.a[dest] = self.a[c1];
        len1 -= 1;
        if len1 == 0 {
            self.a[dest - len2..dest].copy_from_slice(&tmp[..len2]);
            return;
        }
        if len2 == 1 {
            dest -= len1;
            c1 -= len1;
            self.a.copy_within(c1..c1 + len1, dest);
            self.a[dest - 1] = tmp[c2 - 1];
            return;
        }
        let mut min_gallop = self.min_gallop as isize;
        'outer: loop {
            let (mut n1, mut n2) = (0usize, 0usize);
            loop {
                if cmp(tmp[c2 - 1], self.a[c1 - 1]).is_lt() {
                    dest -= 1;
                    c1 -= 1;
                    self.a[dest] = self.a[c1];
                    n1 += 1;
                    n2 = 0;
                    len1 -= 1;
                    if len1 == 0 {
                        break 'outer;
                    }
                } else {
                    dest -= 1;
                    c2 -= 1;
                    self.a[dest] = tmp[c2];
                    n2 += 1;
                    n1 = 0;
                    len2 -= 1;
                    if len2 == 1 {
                        break 'outer;
                    }
                }
                if (n1 | n2) as isize >= min_gallop {
                    break;
                }
            }
            loop {
                let run1 = base1..base1 + len1;
                n1 = len1 - gallop_right(tmp[c2 - 1], &self.a[run1], len1 - 1, cmp);
                if n1 != 0 {
                    dest -= n1;
                    c1 -= n1;
                    len1 -= n1;
                    self.a.copy_within(c1..c1 + n1, dest);
                    if len1 == 0 {
                        break 'outer;
                    }
                }
                dest -= 1;
                c2 -= 1;
                self.a[dest] = tmp[c2];
                len2 -= 1;
                if len2 == 1 {
                    break 'outer;
                }
                n2 = len2 - gallop_left(self.a[c1 - 1], &tmp[..len2], len2 - 1, cmp);
                if n2 != 0 {
                    dest -= n2;
                    c2 -= n2;
                    len2 -= n2;
                    self.a[dest..dest + n2].copy_from_slice(&tmp[c2..c2 + n2]);
                    if len2 <= 1 {
                        break 'outer;
                    }
                }
                dest -= 1;
                c1 -= 1;
                self.a[dest] = self.a[c1];
                len1 -= 1;
                if len1 == 0 {
                    break 'outer;
                }
                min_gallop -= 1;
                if !(n1 >= MIN_GALLOP || n2 >= MIN_GALLOP) {
                    break;
                }
            }
            min_gallop = min_gallop.max(0) + 2;
        }
        self.min_gallop = min_gallop.max(1) as usize;
        if len2 == 1 {
            dest -= len1;
            c1 -= len1;
            self.a.copy_within(c1..c1 + len1, dest);
            self.a[dest - 1] = tmp[c2 - 1];
        } else if len2 == 0 {
            self.ok = false;
        } else {
            self.a[dest - len2..dest].copy_from_slice(&tmp[..len2]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift).
    fn numbers(seed: u64, n: usize, range: u64) -> Vec<u64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % range
            })
            .collect()
    }

    #[test]
    fn a_consistent_order_sorts_stably_at_every_length() {
        for n in [0, 1, 2, 5, 31, 32, 33, 64, 65, 100, 257, 1000] {
            for (seed, range) in [(1, 4), (7, 1000), (11, 1 << 40)] {
                let keys = numbers(seed + n as u64, n, range);
                let cmp = |a: usize, b: usize| keys[a].cmp(&keys[b]);
                let mut got: Vec<usize> = (0..n).collect();
                assert!(java_sort(&mut got, &cmp));
                let mut want: Vec<usize> = (0..n).collect();
                want.sort_by(|&a, &b| cmp(a, b));
                assert_eq!(got, want, "n {n} seed {seed}");
            }
        }
    }

    #[test]
    fn an_inconsistent_order_never_panics() {
        for n in [2, 31, 33, 90, 200] {
            let keys = numbers(n as u64, n, 1 << 33);
            let cmp =
                |a: usize, b: usize| ((keys[a] as i64).wrapping_sub(keys[b] as i64) as i32).cmp(&0);
            let mut v: Vec<usize> = (0..n).collect();
            java_sort(&mut v, &cmp);
            let mut seen = v.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "a permutation");
        }
    }
}
