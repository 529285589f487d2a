//! Cutting the producer's batches into the consumer's batch size.
//!
//! Producer batches of any sizes go in, in order; out come [`Cut`]s that say
//! what to do with their rows. A consumer batch of exactly `batch_size` rows
//! that lies inside one producer batch is a [`Cut::View`] (zero-copy). One
//! that spans several producer batches comes as [`Cut::Piece`]s, to be
//! copied into the batch's own memory as they arrive, then [`Cut::Done`]. At
//! the end of an epoch the remaining rows come out as one smaller batch
//! unless `drop_last`. Every row goes out exactly once, in order. Pure logic,
//! no I/O.
//!
//! Pieces are handed out as soon as their producer batch arrives, so the
//! re-batcher holds at most one producer batch for an incomplete consumer
//! batch, whatever the batch size: the first rows of the next batch, while
//! they all lie in one producer batch (they may yet be the epoch's tail,
//! which is then a view). A consumer batch larger than the producer's whole
//! window therefore never waits for slots it holds itself.

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

impl<P> Span<P> {
    /// Rows in the span.
    pub fn rows(&self) -> u64 {
        self.end - self.start
    }
}

/// What to do with rows of the producer's batches, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut<P> {
    /// A whole consumer batch inside one producer batch: view it.
    View(Span<P>),
    /// The next rows of the consumer batch being assembled (the first piece
    /// begins it; it will have at most `batch_size` rows): copy them now.
    Piece(Span<P>),
    /// The batch being assembled is complete (the epoch's tail may be
    /// shorter than `batch_size`).
    Done,
    /// Throw away the batch being assembled (the epoch's tail, `drop_last`).
    Discard,
}

/// Re-slices a stream of producer batches.
#[derive(Debug)]
pub struct Rebatcher<P> {
    batch_size: u64,
    drop_last: bool,
    /// The first rows of the next batch while they lie in one producer batch.
    held: Option<Span<P>>,
    /// Rows of the next batch already handed out as pieces (never together
    /// with `held`).
    copied: u64,
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
            held: None,
            copied: 0,
        }
    }

    /// The consumer batch size.
    pub fn batch_size(&self) -> u64 {
        self.batch_size
    }

    /// Feeds a producer batch of `rows` rows; returns what to do with them.
    pub fn push(&mut self, piece: P, rows: u64) -> Vec<Cut<P>> {
        self.push_from(piece, 0, rows)
    }

    /// Feeds rows `first..rows` of a producer batch of `rows` rows (the
    /// rows before `first` are not this consumer's: it had them already);
    /// returns what to do with them.
    pub fn push_from(&mut self, piece: P, first: u64, rows: u64) -> Vec<Cut<P>> {
        let mut out = Vec::new();
        if first >= rows {
            return out;
        }
        let span = |start, end| Span {
            piece: piece.clone(),
            start,
            end,
        };
        // The batch in progress spans this producer batch too: copy.
        if let Some(held) = self.held.take() {
            self.copied = held.rows();
            out.push(Cut::Piece(held));
        }
        let mut start = first;
        if self.copied > 0 {
            let take = (rows - first).min(self.batch_size - self.copied);
            start = first + take;
            self.copied += take;
            out.push(Cut::Piece(span(first, start)));
            if self.copied == self.batch_size {
                self.copied = 0;
                out.push(Cut::Done);
            }
        }
        while rows - start >= self.batch_size {
            out.push(Cut::View(span(start, start + self.batch_size)));
            start += self.batch_size;
        }
        if start < rows {
            self.held = Some(span(start, rows));
        }
        out
    }

    /// Ends the epoch: what to do with its last, smaller batch, if any.
    pub fn finish(&mut self) -> Option<Cut<P>> {
        let held = self.held.take();
        let copied = std::mem::take(&mut self.copied);
        match (held, self.drop_last) {
            (Some(held), false) => Some(Cut::View(held)),
            (None, false) if copied > 0 => Some(Cut::Done),
            (None, true) if copied > 0 => Some(Cut::Discard),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;
    use proptest::prelude::*;

    /// Producer batch `index`, counting how many copies of all pieces live.
    #[derive(Debug)]
    struct Counted {
        index: usize,
        live: Rc<Cell<usize>>,
    }

    impl Counted {
        fn new(index: usize, live: &Rc<Cell<usize>>) -> Self {
            live.set(live.get() + 1);
            Counted {
                index,
                live: Rc::clone(live),
            }
        }
    }

    impl Clone for Counted {
        fn clone(&self) -> Self {
            Counted::new(self.index, &self.live)
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.live.set(self.live.get() - 1);
        }
    }

    /// What came out of one epoch.
    struct Run {
        /// The sample ids of every consumer batch.
        batches: Vec<Vec<u64>>,
        /// Whether each was a view.
        views: Vec<bool>,
        /// The most producer batches the re-batcher held at once.
        max_held: usize,
    }

    /// Runs one epoch of producer batches through a re-batcher. Pieces are
    /// "copied" (their ids taken) and dropped at once, as the consumer does.
    fn run(producer_batches: &[u64], bs: u64, drop_last: bool) -> Run {
        let live = Rc::new(Cell::new(0));
        let mut r = Rebatcher::new(bs, drop_last);
        let mut first_id = Vec::new();
        let mut next = 0;
        for &rows in producer_batches {
            first_id.push(next);
            next += rows;
        }
        let ids = |s: &Span<Counted>| -> Vec<u64> {
            let first = first_id[s.piece.index];
            (s.start..s.end).map(|row| first + row).collect()
        };
        let mut got = Run {
            batches: Vec::new(),
            views: Vec::new(),
            max_held: 0,
        };
        let mut assembling: Option<Vec<u64>> = None;
        let mut apply = |cut: Cut<Counted>, got: &mut Run| match cut {
            Cut::View(s) => {
                assert!(assembling.is_none(), "a view inside an assembly");
                got.batches.push(ids(&s));
                got.views.push(true);
            }
            Cut::Piece(s) => assembling.get_or_insert_with(Vec::new).extend(ids(&s)),
            Cut::Done => {
                got.batches
                    .push(assembling.take().expect("done with nothing"));
                got.views.push(false);
            }
            Cut::Discard => assert!(assembling.take().is_some()),
        };
        for (i, &rows) in producer_batches.iter().enumerate() {
            let cuts = r.push(Counted::new(i, &live), rows);
            for cut in cuts {
                apply(cut, &mut got);
            }
            got.max_held = got.max_held.max(live.get());
        }
        if let Some(cut) = r.finish() {
            apply(cut, &mut got);
        }
        assert!(assembling.is_none(), "an assembly was never finished");
        assert_eq!(live.get(), 0, "the re-batcher kept a producer batch");
        got
    }

    fn loader(samples: u64, loader_bs: u64) -> Vec<u64> {
        let mut v = vec![loader_bs; (samples / loader_bs) as usize];
        if !samples.is_multiple_of(loader_bs) {
            v.push(samples % loader_bs);
        }
        v
    }

    #[test]
    fn tensorsocket_fault_non_divisor_batch_size_keeps_every_sample() {
        // TensorSocket 0.0.5 skips samples when the consumer batch size is
        // neither a multiple nor a divisor of the loader's.
        let got = run(&loader(1000, 64), 48, false).batches;
        assert_eq!(got.len(), 21);
        let flat: Vec<u64> = got.concat();
        assert_eq!(flat, (0..1000).collect::<Vec<_>>());
        assert_eq!(got.last().unwrap().len(), 1000 - 20 * 48);
    }

    #[test]
    fn larger_than_the_producer_batch_spans_several() {
        let got = run(&loader(1000, 64), 100, false).batches;
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|b| b.len() == 100));
    }

    #[test]
    fn fault3_batch_larger_than_the_window_holds_one_producer_batch() {
        // Producer batch 64, window 8: 512 rows fit in the window, and a
        // batch of 1000 rows must not hold 16 producer batches.
        let got = run(&loader(5000, 64), 1000, false);
        assert_eq!(got.batches.len(), 5);
        assert_eq!(got.batches.concat(), (0..5000).collect::<Vec<_>>());
        assert!(got.max_held <= 1, "held {} producer batches", got.max_held);
    }

    #[test]
    fn a_batch_inside_one_producer_batch_is_a_view_the_tail_too() {
        // 1000 = 15 x 64 + 40: batches of 32 never span two; the tail of 8
        // rows lies in the last producer batch.
        let got = run(&loader(1000, 64), 32, false);
        assert_eq!(got.batches.len(), 32);
        assert!(got.views.iter().all(|&v| v));
        assert_eq!(got.batches[31].len(), 8);
        // Batches of 48: 48..96 and 96..144 span two producer batches.
        let got = run(&loader(1000, 64), 48, false);
        assert_eq!(&got.views[..4], &[true, false, false, true]);
    }

    #[test]
    fn drop_last_drops_only_the_tail() {
        let got = run(&loader(1000, 64), 48, true).batches;
        assert_eq!(got.len(), 20);
        assert_eq!(got.concat(), (0..960).collect::<Vec<_>>());
        // A tail being assembled is discarded too.
        let got = run(&[64, 64, 64], 100, true).batches;
        assert_eq!(got.concat(), (0..100).collect::<Vec<_>>());
    }

    proptest! {
        #[test]
        fn every_sample_exactly_once_in_order_with_exact_len(
            samples in 1u64..3000,
            loader_bs in 1u64..300,
            bs in 1u64..2000,
            drop_last: bool,
        ) {
            let run = run(&loader(samples, loader_bs), bs, drop_last);
            let got = run.batches;
            prop_assert_eq!(got.len() as u64, batches_in(samples, bs, drop_last));
            let flat: Vec<u64> = got.concat();
            let kept = if drop_last { samples / bs * bs } else { samples };
            prop_assert_eq!(flat, (0..kept).collect::<Vec<_>>());
            for (i, b) in got.iter().enumerate() {
                if i + 1 < got.len() || drop_last {
                    prop_assert_eq!(b.len() as u64, bs);
                }
            }
            prop_assert!(run.max_held <= 1, "held {} producer batches", run.max_held);
        }

        #[test]
        fn irregular_producer_batches_are_recut_exactly(
            sizes in proptest::collection::vec(0u64..200, 1..40),
            bs in 1u64..2000,
        ) {
            let total: u64 = sizes.iter().sum();
            let run = run(&sizes, bs, false);
            prop_assert_eq!(run.batches.len() as u64, batches_in(total, bs, false));
            prop_assert_eq!(run.batches.concat(), (0..total).collect::<Vec<_>>());
            // Exactly the batches that lie in one producer batch are views.
            let mut first = 0;
            let ends: Vec<u64> = sizes.iter().map(|s| { first += s; first }).collect();
            let mut at = 0;
            for (b, &view) in run.batches.iter().zip(&run.views) {
                let inside = ends.iter().all(|&e| e <= at || e >= at + b.len() as u64);
                prop_assert_eq!(view, inside);
                at += b.len() as u64;
            }
            prop_assert!(run.max_held <= 1, "held {} producer batches", run.max_held);
        }
    }
}
