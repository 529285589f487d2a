//! [`Sampler`]: the order of samples in an epoch, cut into batches.
//!
//! With shuffling, epoch `e`'s order is a Fisher-Yates permutation drawn from
//! a stream derived from `(seed, e)`: the same for every run and every
//! process given the same seed, different from one epoch to the next. Every
//! sample appears exactly once per epoch; with `drop_last` the final partial
//! batch is left out, otherwise it is the last, shorter batch.

use crate::rng::{Rng, STREAM_SHUFFLE};
use crate::PipelineError;

/// Produces each epoch's sample order and its batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampler {
    len: usize,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
    seed: u64,
}

impl Sampler {
    /// A sampler over `len` samples in batches of `batch_size`, shuffled with
    /// seed 0, keeping the last partial batch.
    ///
    /// # Errors
    /// `batch_size == 0`.
    pub fn new(len: usize, batch_size: usize) -> Result<Sampler, PipelineError> {
        if batch_size == 0 {
            return Err(PipelineError::InvalidConfig(
                "batch size must be at least 1".into(),
            ));
        }
        Ok(Sampler {
            len,
            batch_size,
            shuffle: true,
            drop_last: false,
            seed: 0,
        })
    }

    /// Shuffle each epoch (default) or keep dataset order.
    pub fn with_shuffle(mut self, shuffle: bool) -> Sampler {
        self.shuffle = shuffle;
        self
    }

    /// Leave out the last batch when it is partial (default `false`).
    pub fn with_drop_last(mut self, drop_last: bool) -> Sampler {
        self.drop_last = drop_last;
        self
    }

    /// The seed from which every epoch's permutation is derived.
    pub fn with_seed(mut self, seed: u64) -> Sampler {
        self.seed = seed;
        self
    }

    /// Samples per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Batches per epoch.
    pub fn num_batches(&self) -> usize {
        if self.drop_last {
            self.len / self.batch_size
        } else {
            self.len.div_ceil(self.batch_size)
        }
    }

    /// Samples delivered per epoch (`len`, less the dropped tail).
    pub fn num_samples(&self) -> usize {
        if self.drop_last {
            self.num_batches() * self.batch_size
        } else {
            self.len
        }
    }

    /// The full sample order of `epoch` (before dropping any tail).
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffle {
            let mut rng = Rng::derive(&[STREAM_SHUFFLE, self.seed, epoch]);
            for i in (1..order.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        order
    }

    /// The batches of `epoch`, in order; exactly [`num_batches`](Self::num_batches) of them.
    pub fn batches(&self, epoch: u64) -> Batches {
        let mut order = self.order(epoch);
        order.truncate(self.num_samples());
        Batches {
            order,
            batch_size: self.batch_size,
            pos: 0,
        }
    }
}

/// Iterator over an epoch's batches of sample indices.
#[derive(Debug, Clone)]
pub struct Batches {
    order: Vec<usize>,
    batch_size: usize,
    pos: usize,
}

impl Iterator for Batches {
    type Item = Vec<usize>;

    fn next(&mut self) -> Option<Vec<usize>> {
        if self.pos >= self.order.len() {
            return None;
        }
        let end = (self.pos + self.batch_size).min(self.order.len());
        let batch = self.order[self.pos..end].to_vec();
        self.pos = end;
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.order.len() - self.pos).div_ceil(self.batch_size);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Batches {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_once_per_epoch_and_exact_counts() {
        for (len, bs, drop_last) in [(10, 3, false), (10, 3, true), (9, 3, true), (0, 4, false)] {
            let s = Sampler::new(len, bs).unwrap().with_drop_last(drop_last);
            let batches: Vec<Vec<usize>> = s.batches(1).collect();
            assert_eq!(batches.len(), s.num_batches());
            assert_eq!(s.batches(1).len(), s.num_batches());
            let mut all: Vec<usize> = batches.concat();
            assert_eq!(all.len(), s.num_samples());
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), s.num_samples());
            assert!(batches.iter().all(|b| b.len() <= bs && !b.is_empty()));
        }
        assert_eq!(Sampler::new(10, 3).unwrap().num_batches(), 4);
        assert_eq!(
            Sampler::new(10, 3)
                .unwrap()
                .with_drop_last(true)
                .num_batches(),
            3
        );
    }

    #[test]
    fn permutation_is_reproducible_and_changes_per_epoch() {
        let s = Sampler::new(100, 8).unwrap().with_seed(42);
        assert_eq!(s.order(3), s.clone().order(3));
        assert_ne!(s.order(3), s.order(4));
        assert_ne!(s.order(3), s.clone().with_seed(43).order(3));
        let mut sorted = s.order(3);
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn sequential_without_shuffle() {
        let s = Sampler::new(5, 2).unwrap().with_shuffle(false);
        let b: Vec<Vec<usize>> = s.batches(7).collect();
        assert_eq!(b, vec![vec![0, 1], vec![2, 3], vec![4]]);
        assert!(Sampler::new(5, 0).is_err());
    }
}
