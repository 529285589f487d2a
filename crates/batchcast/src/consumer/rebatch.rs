//! Cutting the producer's batches into the consumer's batch size.
//!
//! Producer batches of any sizes go in, in order; consumer batches of exactly
//! `batch_size` rows come out, each a list of row ranges of the producer
//! batches (one range: a zero-copy slice; several: a copy). At the end of an
//! epoch the remaining rows come out as one smaller batch unless `drop_last`.
//! Every row goes out exactly once, in order. Pure logic, no I/O.

use std::collections::VecDeque;

/// A run of rows `start..end` of producer batch `piece`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span<P> {
    /// The producer batch.
    pub piece: P,
    /// First row.
    pub start: u64,
    /// One past the last row.
    pub end: u64,
}

/// Re-slices a stream of producer batches.
#[derive(Debug)]
pub struct Rebatcher<P> {
    batch_size: u64,
    drop_last: bool,
    pending: VecDeque<Span<P>>,
    pending_rows: u64,
}

/// Consumer batches in an epoch of `samples` rows.
pub fn batches_in(samples: u64, batch_size: u64, drop_last: bool) -> u64 {
    if drop_last {
        samples / batch_size
    } else {
        samples.div_ceil(batch_size)
    }
}

impl<P: Clone> Rebatcher<P> {
    /// A re-batcher for batches of `batch_size` (at least 1) rows.
    pub fn new(batch_size: u64, drop_last: bool) -> Self {
        Rebatcher {
            batch_size: batch_size.max(1),
            drop_last,
            pending: VecDeque::new(),
            pending_rows: 0,
        }
    }

    /// The consumer batch size.
    pub fn batch_size(&self) -> u64 {
        self.batch_size
    }

    /// Feeds a producer batch of `rows` rows; returns the consumer batches
    /// it completes.
    pub fn push(&mut self, piece: P, rows: u64) -> Vec<Vec<Span<P>>> {
        if rows > 0 {
            self.pending.push_back(Span {
                piece,
                start: 0,
                end: rows,
            });
            self.pending_rows += rows;
        }
        let mut out = Vec::new();
        while self.pending_rows >= self.batch_size {
            out.push(self.take(self.batch_size));
        }
        out
    }

    /// Ends the epoch: returns the last, smaller batch (unless `drop_last`)
    /// and forgets anything pending.
    pub fn finish(&mut self) -> Option<Vec<Span<P>>> {
        if self.pending_rows == 0 {
            return None;
        }
        let tail = self.take(self.pending_rows);
        (!self.drop_last).then_some(tail)
    }

    /// Forgets everything pending (the stream broke off).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.pending_rows = 0;
    }

    fn take(&mut self, mut want: u64) -> Vec<Span<P>> {
        let mut spans = Vec::new();
        while want > 0 {
            let Some(front) = self.pending.front_mut() else {
                break;
            };
            let avail = front.end - front.start;
            let n = avail.min(want);
            spans.push(Span {
                piece: front.piece.clone(),
                start: front.start,
                end: front.start + n,
            });
            front.start += n;
            want -= n;
            self.pending_rows -= n;
            if front.start == front.end {
                self.pending.pop_front();
            }
        }
        spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs one epoch of producer batches through a re-batcher and returns
    /// the sample ids of every consumer batch.
    fn run(producer_batches: &[u64], bs: u64, drop_last: bool) -> Vec<Vec<u64>> {
        let mut r = Rebatcher::new(bs, drop_last);
        let mut first_id = Vec::new();
        let mut next = 0;
        for &rows in producer_batches {
            first_id.push(next);
            next += rows;
        }
        let ids = |spans: Vec<Span<usize>>| -> Vec<u64> {
            spans
                .into_iter()
                .flat_map(|s| (s.start..s.end).map(move |row| (s.piece, row)))
                .map(|(p, row)| first_id[p] + row)
                .collect()
        };
        let mut out = Vec::new();
        for (i, &rows) in producer_batches.iter().enumerate() {
            for b in r.push(i, rows) {
                out.push(ids(b));
            }
        }
        if let Some(b) = r.finish() {
            out.push(ids(b));
        }
        out
    }

    fn loader(samples: u64, loader_bs: u64) -> Vec<u64> {
        let mut v = vec![loader_bs; (samples / loader_bs) as usize];
        if samples % loader_bs != 0 {
            v.push(samples % loader_bs);
        }
        v
    }

    #[test]
    fn tensorsocket_fault_non_divisor_batch_size_keeps_every_sample() {
        // TensorSocket 0.0.5 skips samples when the consumer batch size is
        // neither a multiple nor a divisor of the loader's.
        let got = run(&loader(1000, 64), 48, false);
        assert_eq!(got.len(), 21);
        let flat: Vec<u64> = got.concat();
        assert_eq!(flat, (0..1000).collect::<Vec<_>>());
        assert_eq!(got.last().unwrap().len(), 1000 - 20 * 48);
    }

    #[test]
    fn larger_than_the_producer_batch_spans_several() {
        let got = run(&loader(1000, 64), 100, false);
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|b| b.len() == 100));
    }

    #[test]
    fn drop_last_drops_only_the_tail() {
        let got = run(&loader(1000, 64), 48, true);
        assert_eq!(got.len(), 20);
        assert_eq!(got.concat(), (0..960).collect::<Vec<_>>());
    }

    proptest! {
        #[test]
        fn every_sample_exactly_once_in_order_with_exact_len(
            samples in 1u64..3000,
            loader_bs in 1u64..300,
            bs in 1u64..400,
            drop_last: bool,
        ) {
            let got = run(&loader(samples, loader_bs), bs, drop_last);
            prop_assert_eq!(got.len() as u64, batches_in(samples, bs, drop_last));
            let flat: Vec<u64> = got.concat();
            let kept = if drop_last { samples / bs * bs } else { samples };
            prop_assert_eq!(flat, (0..kept).collect::<Vec<_>>());
            for (i, b) in got.iter().enumerate() {
                if i + 1 < got.len() || drop_last {
                    prop_assert_eq!(b.len() as u64, bs);
                }
            }
        }

        #[test]
        fn irregular_producer_batches_are_recut_exactly(
            sizes in proptest::collection::vec(1u64..200, 1..40),
            bs in 1u64..250,
        ) {
            let total: u64 = sizes.iter().sum();
            let got = run(&sizes, bs, false);
            prop_assert_eq!(got.len() as u64, batches_in(total, bs, false));
            prop_assert_eq!(got.concat(), (0..total).collect::<Vec<_>>());
        }
    }
}
