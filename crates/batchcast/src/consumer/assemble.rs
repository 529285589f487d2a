//! Turning one epoch's producer batches into consumer batches.
//!
//! [`Assembler`] feeds each producer batch (a [`SlotLease`]) to the
//! [`Rebatcher`] and carries out its [`Cut`]s: a consumer batch inside one
//! producer batch is a view of the slot ([`Batch::view`]); one that spans
//! several is an [`Assembly`], copied together piece by piece *as the
//! producer batches arrive*. Its memory is allocated once, at the batch's
//! expected size, when its first piece is copied, and each piece's lease is
//! dropped as soon as its rows are copied (the slot is released unless a view
//! of it lives on). So an incomplete consumer batch holds at most one lease,
//! whatever its size: a batch larger than the producer's whole window is
//! assembled like any other.
//!
//! A batch that cannot be built (its pieces differ in structure, dtype or
//! per-sample shape, or a string is not UTF-8) comes out as an error in its
//! place; the rest of its pieces are skipped, and the batches after it follow
//! with their own indices.

use std::sync::Arc;

use crate::consumer::batch::{Batch, Leaf, LeafData, SlotLease};
use crate::consumer::rebatch::{Cut, Rebatcher, Span};
use crate::error::{Error, Result};
use crate::layout::{Layout, LeafDesc, LeafKind};

/// The most bytes per leaf allocated before a batch's rows arrive; a larger
/// batch grows as its pieces are copied. (A batch size far beyond the epoch,
/// with no epoch size announced, must not reserve memory it never uses.)
const MAX_UPFRONT_BYTES: u64 = 1 << 30;

/// Cuts one epoch's producer batches into consumer batches.
pub(super) struct Assembler {
    epoch: u64,
    /// Rows this consumer gets in the epoch, when the producer said.
    samples: Option<u64>,
    /// The next consumer batch's index.
    index: u64,
    rebatcher: Rebatcher<Arc<SlotLease>>,
    /// The batch being copied together, or why it cannot be.
    assembly: Option<Result<Assembly>>,
}

impl Assembler {
    /// Batches of `batch_size` rows of epoch `epoch` of `samples` rows.
    pub fn new(epoch: u64, samples: Option<u64>, batch_size: u64, drop_last: bool) -> Self {
        Assembler {
            epoch,
            samples,
            index: 0,
            rebatcher: Rebatcher::new(batch_size, drop_last),
            assembly: None,
        }
    }

    /// Takes the next producer batch, its rows from `first` on (the ones
    /// before, the consumer already had); returns the consumer batches it
    /// completes (an error in place of a batch that could not be built).
    pub fn push(&mut self, lease: Arc<SlotLease>, first: u64) -> Vec<Result<Batch>> {
        let rows = lease.layout.rows();
        let mut out = Vec::new();
        for cut in self.rebatcher.push_from(lease, first, rows) {
            self.apply(cut, &mut out);
        }
        out
    }

    /// Ends the epoch: its last, smaller batch, if any.
    pub fn finish(&mut self) -> Option<Result<Batch>> {
        let mut out = Vec::new();
        if let Some(cut) = self.rebatcher.finish() {
            self.apply(cut, &mut out);
        }
        out.pop()
    }

    fn apply(&mut self, cut: Cut<Arc<SlotLease>>, out: &mut Vec<Result<Batch>>) {
        match cut {
            Cut::View(span) => {
                out.push(Batch::view(span, self.epoch, self.index));
                self.index += 1;
            }
            Cut::Piece(span) => {
                self.assembly = Some(match self.assembly.take() {
                    None => Assembly::begin(span, self.expected_rows()),
                    Some(Ok(mut a)) => a.append(span).map(|()| a),
                    // The batch failed already: skip the rest of its rows.
                    Some(Err(e)) => Err(e),
                });
            }
            Cut::Done => {
                if let Some(a) = self.assembly.take() {
                    out.push(a.map(|a| a.finish(self.epoch, self.index)));
                    self.index += 1;
                }
            }
            Cut::Discard => self.assembly = None,
        }
    }

    /// Rows of the batch about to be assembled: `batch_size`, or fewer when
    /// it is the epoch's announced tail.
    fn expected_rows(&self) -> u64 {
        let bs = self.rebatcher.batch_size();
        let left = self
            .samples
            .map(|n| n.saturating_sub(self.index.saturating_mul(bs)))
            .filter(|&n| n > 0);
        left.map_or(bs, |n| n.min(bs))
    }
}

/// A consumer batch being copied together from pieces of producer batches.
struct Assembly {
    /// The first piece's layout: every piece must match it.
    layout: Layout,
    rows: u64,
    leaves: Vec<Copied>,
}

/// The rows of one leaf copied so far.
enum Copied {
    Bytes(OwnedBytes),
    Strings(Vec<String>),
}

impl Assembly {
    /// Starts a batch of about `expected_rows` rows with its first piece.
    fn begin(first: Span<Arc<SlotLease>>, expected_rows: u64) -> Result<Assembly> {
        let layout = first.piece.layout.clone();
        let leaves = layout
            .leaves
            .iter()
            .map(|desc| match desc.kind {
                LeafKind::StrList => Copied::Strings(Vec::new()),
                _ => {
                    let bytes = expected_rows.saturating_mul(desc.row_bytes());
                    Copied::Bytes(OwnedBytes::with_capacity(
                        bytes.min(MAX_UPFRONT_BYTES) as usize
                    ))
                }
            })
            .collect();
        let mut a = Assembly {
            layout,
            rows: 0,
            leaves,
        };
        a.append(first)?;
        Ok(a)
    }

    /// Copies the rows of `span` in; the span (and its lease) is dropped.
    fn append(&mut self, span: Span<Arc<SlotLease>>) -> Result<()> {
        let piece = &span.piece.layout;
        let same = piece.tree == self.layout.tree
            && piece.leaves.len() == self.layout.leaves.len()
            && piece
                .leaves
                .iter()
                .zip(&self.layout.leaves)
                .all(|(a, b)| same_kind(a, b));
        if !same {
            return Err(Error::InvalidBatch(
                "the producer's batches differ in structure, dtype or per-sample shape, so \
                 they cannot be re-cut into another batch size; use batch_size=None (the \
                 producer's batch size)"
                    .into(),
            ));
        }
        for (i, leaf) in self.leaves.iter_mut().enumerate() {
            match leaf {
                Copied::Bytes(b) => b.append(span.piece.rows(i, span.start, span.end)),
                Copied::Strings(s) => s.extend(span.piece.strings(i, span.start, span.end)?),
            }
        }
        self.rows += span.rows();
        Ok(())
    }

    fn finish(self, epoch: u64, index: u64) -> Batch {
        let leaves = self
            .leaves
            .into_iter()
            .zip(&self.layout.leaves)
            .map(|(copied, desc)| {
                let data = match copied {
                    Copied::Bytes(b) => LeafData::Owned(Arc::new(b)),
                    Copied::Strings(s) => LeafData::Strings(s),
                };
                Leaf::new(desc, self.rows, data)
            })
            .collect();
        Batch::owned(epoch, index, self.layout.tree, leaves)
    }
}

fn same_kind(a: &LeafDesc, b: &LeafDesc) -> bool {
    a.kind == b.kind && a.dtype == b.dtype && a.shape[1..] == b.shape[1..]
}

/// Memory of an assembled leaf, 8-byte aligned for every dtype.
pub(super) struct OwnedBytes {
    /// Zeroed words; the first `len` bytes are the leaf's.
    words: Vec<u64>,
    len: usize,
}

impl OwnedBytes {
    /// Empty, with room for `capacity` bytes (zeroed by the allocator, so
    /// pages not yet written cost nothing).
    fn with_capacity(capacity: usize) -> Self {
        OwnedBytes {
            words: vec![0u64; capacity.div_ceil(8)],
            len: 0,
        }
    }

    /// Copies `src` in after the bytes already there.
    fn append(&mut self, src: &[u8]) {
        let end = self.len + src.len();
        if end > self.words.len() * 8 {
            self.words.resize(end.div_ceil(8), 0);
        }
        // SAFETY: `words` holds at least `end` initialised bytes, u8 has no
        // alignment needs, and `&mut self` makes the borrow unique.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), end) };
        bytes[self.len..].copy_from_slice(src);
        self.len = end;
    }

    /// The leaf's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes, u8 has no
        // alignment needs, and the slice borrows `self`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}
