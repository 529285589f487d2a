//! [`Selection`]: which samples an epoch has, computed once by the
//! producer for every consumer.
//!
//! Every draw comes from a stream derived from `(seed, epoch)` (and the
//! class, for label-balanced), so every run and every process with the
//! same seed selects the same samples. The number selected is the same
//! every epoch ([`Selection::count`]), so an epoch's length is known before
//! it starts. The selected indices of an epoch come back in dataset order;
//! the [`Sampler`](crate::Sampler) then orders them.

mod npy;
mod spec;

#[cfg(feature = "generate")]
pub use npy::write_scores;
pub use spec::{SelectSpec, SELECT_FORMS};

use crate::rng::{Rng, STREAM_SELECT};
use crate::PipelineError;

/// A selection over a dataset of known labels.
#[derive(Debug, Clone)]
pub struct Selection {
    spec: SelectSpec,
    len: usize,
    count: usize,
    seed: u64,
    /// New data and freshness: the first sample that arrived since the
    /// last trigger; with freshness, how many of the epoch come from
    /// `mark..` (unseen), the rest from `..mark` (seen).
    mark: usize,
    unseen: usize,
    /// Label-balanced: each class's members and how many of them an
    /// epoch takes.
    classes: Vec<Class>,
    /// Scores: the kept samples, in dataset order.
    kept: Vec<usize>,
    /// Label-balanced: each sample's weight (its class's share of the
    /// dataset over its share of the selection).
    weights: Vec<f32>,
}

#[derive(Debug, Clone)]
struct Class {
    members: Vec<usize>,
    take: usize,
}

/// `ratio` of `len`, rounded, at least 1 when `len` is not 0.
fn share(len: usize, ratio: f64) -> usize {
    let k = (len as f64 * ratio).round() as usize;
    k.clamp(len.min(1), len)
}

/// A uniform permutation of `0..len` from `rng` (Fisher-Yates).
fn permutation(len: usize, rng: &mut Rng) -> Vec<usize> {
    let mut v: Vec<usize> = (0..len).collect();
    partial_shuffle(&mut v, len, rng);
    v
}

/// Puts a uniform sample of `k` of `v`'s elements, in random order, in
/// its first `k` places.
fn partial_shuffle(v: &mut [usize], k: usize, rng: &mut Rng) {
    let n = v.len();
    for i in 0..k.min(n) {
        let j = i + rng.below((n - i) as u64) as usize;
        v.swap(i, j);
    }
}

/// How many of each class (sizes `sizes`) a balanced pick of `k` takes:
/// the smallest classes first, each at most its fair share of what is
/// left, so the counts differ by at most one except where a class is
/// too small, and they add up to `k` (`k` at most the sum of `sizes`).
fn quotas(sizes: &[usize], k: usize) -> Vec<usize> {
    let mut by_size: Vec<usize> = (0..sizes.len()).collect();
    by_size.sort_by_key(|&c| (sizes[c], c));
    let mut take = vec![0; sizes.len()];
    let mut left = k;
    for (done, &c) in by_size.iter().enumerate() {
        let classes_left = sizes.len() - done;
        let fair = left.div_ceil(classes_left);
        take[c] = sizes[c].min(fair);
        left -= take[c];
    }
    take
}

impl Selection {
    /// The selection `spec` over a dataset whose sample `i` has label
    /// `labels[i]`; draws are seeded by `seed` and the epoch.
    ///
    /// # Errors
    /// A scores file that cannot be read, is not a 1-D float vector, or
    /// does not hold one score per sample (the message names both
    /// lengths).
    pub fn new(spec: &SelectSpec, labels: &[i64], seed: u64) -> Result<Selection, PipelineError> {
        Self::since(spec, labels, seed, 0)
    }

    /// As [`new`](Self::new), where the samples from `mark` on (indices
    /// are in order of arrival) arrived since the last trigger: what
    /// `new-data` serves and `freshness` counts as unseen.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn since(
        spec: &SelectSpec,
        labels: &[i64],
        seed: u64,
        mark: usize,
    ) -> Result<Selection, PipelineError> {
        let len = labels.len();
        let mark = mark.min(len.saturating_sub(1));
        let mut sel = Selection {
            spec: spec.clone(),
            len,
            count: 0,
            seed,
            mark,
            unseen: 0,
            classes: Vec::new(),
            kept: Vec::new(),
            weights: Vec::new(),
        };
        match spec {
            SelectSpec::Random { ratio } | SelectSpec::Rs2 { ratio, .. } => {
                sel.count = share(len, *ratio);
            }
            SelectSpec::LabelBalanced { ratio } => {
                sel.count = share(len, *ratio);
                let mut names: Vec<i64> = labels.to_vec();
                names.sort_unstable();
                names.dedup();
                let mut classes: Vec<Class> = names
                    .iter()
                    .map(|_| Class {
                        members: Vec::new(),
                        take: 0,
                    })
                    .collect();
                let mut class_of = Vec::with_capacity(len);
                for (i, l) in labels.iter().enumerate() {
                    // `names` holds every label, so the search always finds it.
                    let c = names.binary_search(l).unwrap_or_default();
                    classes[c].members.push(i);
                    class_of.push(c);
                }
                let sizes: Vec<usize> = classes.iter().map(|c| c.members.len()).collect();
                for (class, take) in classes.iter_mut().zip(quotas(&sizes, sel.count)) {
                    class.take = take;
                }
                sel.weights = class_of
                    .iter()
                    .map(|&c| {
                        let cl = &classes[c];
                        if cl.take == 0 {
                            return 0.0;
                        }
                        ((cl.members.len() as f64 * sel.count as f64)
                            / (len as f64 * cl.take as f64)) as f32
                    })
                    .collect();
                sel.classes = classes;
            }
            SelectSpec::NewData => sel.count = len - mark,
            SelectSpec::Freshness { ratio } => {
                let (unseen, seen) = (len - mark, mark);
                (sel.count, sel.unseen) = if seen == 0 || *ratio >= 1.0 {
                    (unseen, unseen)
                } else {
                    let by_unseen = unseen as f64 / ratio;
                    let by_seen = seen as f64 / (1.0 - ratio);
                    let total = by_unseen.min(by_seen).floor() as usize;
                    let take = (total as f64 * ratio).round() as usize;
                    (total, take.clamp(total.min(1), unseen))
                };
            }
            SelectSpec::Scores { file, keep } => {
                let scores = npy::read_scores(file, len)?;
                sel.keep_top(&scores, *keep);
            }
        }
        Ok(sel)
    }

    /// `scores=FILE,keep=P` with the scores given in memory (one per
    /// sample, in dataset order) instead of read from `FILE`.
    ///
    /// # Errors
    /// `spec` is not a scores spec.
    pub fn with_scores(
        spec: &SelectSpec,
        scores: &[f64],
        seed: u64,
    ) -> Result<Selection, PipelineError> {
        let SelectSpec::Scores { keep, .. } = spec else {
            return Err(PipelineError::InvalidConfig(format!(
                "scores given in memory need a scores=FILE,keep=P selection, not {spec}"
            )));
        };
        let mut sel = Selection {
            spec: spec.clone(),
            len: scores.len(),
            count: 0,
            seed,
            mark: 0,
            unseen: 0,
            classes: Vec::new(),
            kept: Vec::new(),
            weights: Vec::new(),
        };
        sel.keep_top(scores, *keep);
        Ok(sel)
    }

    /// Keeps the top `keep` percent of `scores` (ties by dataset order).
    fn keep_top(&mut self, scores: &[f64], keep: f64) {
        self.count = share(self.len, keep / 100.0);
        let mut order: Vec<usize> = (0..self.len).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        order.truncate(self.count);
        order.sort_unstable();
        self.kept = order;
    }

    /// What was asked for.
    pub fn spec(&self) -> &SelectSpec {
        &self.spec
    }

    /// Samples each epoch selects.
    pub fn count(&self) -> usize {
        self.count
    }

    /// True when the method defines per-sample weights (label-balanced:
    /// each sample's class's share of the dataset over its share of the
    /// selection, so a weighted loss estimates the full dataset's).
    pub fn has_weights(&self) -> bool {
        !self.weights.is_empty()
    }

    /// The weight of sample `index` (1 where the method defines none).
    pub fn weight(&self, index: usize) -> f32 {
        self.weights.get(index).copied().unwrap_or(1.0)
    }

    /// The samples `epoch` selects, in dataset order: [`count`](Self::count)
    /// distinct indices.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut out = match &self.spec {
            SelectSpec::Scores { .. } => return self.kept.clone(),
            SelectSpec::NewData => return (self.mark..self.len).collect(),
            SelectSpec::Freshness { .. } => {
                let mark = self.mark as u64;
                let mut unseen: Vec<usize> = (self.mark..self.len).collect();
                let mut rng = Rng::derive(&[STREAM_SELECT, self.seed, epoch, mark, 0]);
                partial_shuffle(&mut unseen, self.unseen, &mut rng);
                unseen.truncate(self.unseen);
                let seen_take = self.count - self.unseen;
                let mut seen: Vec<usize> = (0..self.mark).collect();
                let mut rng = Rng::derive(&[STREAM_SELECT, self.seed, epoch, mark, 1]);
                partial_shuffle(&mut seen, seen_take, &mut rng);
                seen.truncate(seen_take);
                unseen.extend(seen);
                unseen
            }
            SelectSpec::Random { .. } | SelectSpec::Rs2 { replace: true, .. } => {
                let mut rng = Rng::derive(&[STREAM_SELECT, self.seed, epoch]);
                let mut v: Vec<usize> = (0..self.len).collect();
                partial_shuffle(&mut v, self.count, &mut rng);
                v.truncate(self.count);
                v
            }
            SelectSpec::Rs2 { replace: false, .. } => self.rs2_without_replacement(epoch),
            SelectSpec::LabelBalanced { .. } => {
                let mut v = Vec::with_capacity(self.count);
                for (c, class) in self.classes.iter().enumerate() {
                    let mut rng = Rng::derive(&[STREAM_SELECT, self.seed, epoch, c as u64]);
                    let mut m = class.members.clone();
                    partial_shuffle(&mut m, class.take, &mut rng);
                    v.extend_from_slice(&m[..class.take]);
                }
                v
            }
        };
        out.sort_unstable();
        out
    }

    /// RS2 without replacement: the epochs of a cycle walk through one
    /// permutation of the dataset (drawn from the seed and the cycle),
    /// `count` at a time; the cycle's last epoch tops up its remainder
    /// from the start of the same permutation, so no sample repeats within
    /// an epoch and every sample is served once per cycle.
    fn rs2_without_replacement(&self, epoch: u64) -> Vec<usize> {
        if self.count == 0 {
            return Vec::new();
        }
        let per_cycle = self.len.div_ceil(self.count) as u64;
        let (cycle, pos) = (epoch / per_cycle, (epoch % per_cycle) as usize);
        let mut rng = Rng::derive(&[STREAM_SELECT, self.seed, cycle]);
        let perm = permutation(self.len, &mut rng);
        let start = pos * self.count;
        let end = (start + self.count).min(self.len);
        let mut v = perm[start..end].to_vec();
        v.extend_from_slice(&perm[..self.count - (end - start)]);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 classes of 200, 180, ..., 20 members.
    fn labels() -> Vec<i64> {
        (0..10)
            .flat_map(|c| std::iter::repeat_n(c as i64, 200 - 20 * c))
            .collect()
    }

    fn sel(spec: &str, seed: u64) -> Selection {
        Selection::new(&spec.parse().unwrap(), &labels(), seed).unwrap()
    }

    #[test]
    fn label_balanced_takes_an_equal_share_of_each_class() {
        let s = sel("label-balanced:20%", 1);
        assert_eq!(s.count(), 220);
        for epoch in 0..3 {
            let idx = s.indices(epoch);
            assert_eq!(idx.len(), 220);
            let mut per = [0usize; 10];
            for &i in &idx {
                per[labels()[i] as usize] += 1;
            }
            // 22 each (two classes 23), but the last class has only 20.
            assert_eq!(
                per,
                [22, 22, 22, 22, 22, 22, 22, 23, 23, 20],
                "epoch {epoch}"
            );
        }
        assert_ne!(s.indices(0), s.indices(1));
        assert_eq!(s.indices(2), sel("label-balanced:20%", 1).indices(2));
        // A class smaller than its share gives all it has.
        assert_eq!(quotas(&[3, 50, 50], 30), vec![3, 14, 13]);
        assert_eq!(quotas(&[3, 50, 50], 30).iter().sum::<usize>(), 30);
        // The weights undo the balancing: class 0 (200 of 1100, 22 of 220).
        let w = s.weight(0);
        assert!(
            (w - (200.0 * 220.0 / (1100.0 * 22.0)) as f32).abs() < 1e-6,
            "{w}"
        );
    }

    #[test]
    fn rs2_without_replacement_serves_every_sample_once_per_cycle() {
        let s = sel("rs2:25%", 3);
        let mut all: Vec<usize> = (0..4).flat_map(|e| s.indices(e)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..1100).collect::<Vec<_>>());
        // A ratio that does not divide: 1100 / 330 → 4 epochs a cycle, the
        // last topped up; no epoch repeats a sample.
        let s = sel("rs2:30%", 3);
        let mut seen = std::collections::HashSet::new();
        for e in 0..4 {
            let idx = s.indices(e);
            assert_eq!(idx.len(), 330);
            let distinct: std::collections::HashSet<_> = idx.iter().collect();
            assert_eq!(distinct.len(), 330);
            seen.extend(idx);
        }
        assert_eq!(seen.len(), 1100);
    }

    #[test]
    fn random_and_rs2_with_replacement_draw_afresh_each_epoch() {
        for spec in ["random:0.5", "rs2:0.5,replace"] {
            let s = sel(spec, 0);
            let a = s.indices(0);
            assert_eq!(a.len(), 550);
            assert!(a.windows(2).all(|w| w[0] < w[1]));
            assert_ne!(a, s.indices(1));
            assert_eq!(a, sel(spec, 0).indices(0));
            assert_ne!(a, sel(spec, 1).indices(0));
            assert!(!s.has_weights());
        }
    }

    #[test]
    fn new_data_and_freshness_split_at_the_last_trigger() {
        let labels: Vec<i64> = vec![0; 1500];
        let new = Selection::since(&"new-data".parse().unwrap(), &labels, 0, 1000).unwrap();
        assert_eq!(new.count(), 500);
        assert_eq!(new.indices(3), (1000..1500).collect::<Vec<_>>());
        let all = Selection::new(&"new-data".parse().unwrap(), &labels, 0).unwrap();
        assert_eq!(all.count(), 1500);
        let fresh = Selection::since(&"freshness:50".parse().unwrap(), &labels, 0, 1000).unwrap();
        assert_eq!(fresh.count(), 1000);
        for epoch in 0..3 {
            let idx = fresh.indices(epoch);
            assert_eq!(idx.len(), 1000);
            assert_eq!(idx.iter().filter(|&&i| i >= 1000).count(), 500);
            let distinct: std::collections::HashSet<_> = idx.iter().collect();
            assert_eq!(distinct.len(), 1000);
        }
        assert_ne!(fresh.indices(0), fresh.indices(1));
        // 25% unseen: the 500 unseen would need 1500 seen; 1000 allow 1333.
        let q = Selection::since(&"freshness:25".parse().unwrap(), &labels, 0, 1000).unwrap();
        assert_eq!((q.count(), q.unseen), (1333, 333));
    }

    #[test]
    fn scores_keep_the_top_share_in_dataset_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.npy");
        let scores: Vec<f32> = (0..1100).map(|i| ((i * 7919) % 1100) as f32).collect();
        npy::write_scores(&p, &scores).unwrap();
        let spec = format!("scores={},keep=50", p.display());
        let s = sel(&spec, 0);
        let mut want: Vec<usize> = (0..1100).filter(|&i| scores[i] >= 550.0).collect();
        want.sort_unstable();
        assert_eq!(s.indices(0), want);
        assert_eq!(s.indices(5), want);
        let short = Selection::new(&spec.parse().unwrap(), &labels()[..10], 0).unwrap_err();
        assert!(short.to_string().contains("1100 scores"), "{short}");
        let given: Vec<f64> = scores.iter().map(|&v| f64::from(v)).collect();
        let mem = Selection::with_scores(&spec.parse().unwrap(), &given, 0).unwrap();
        assert_eq!(mem.indices(3), want);
        assert!(Selection::with_scores(&"random:5".parse().unwrap(), &given, 0).is_err());
    }
}
