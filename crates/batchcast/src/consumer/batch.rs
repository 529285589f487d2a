//! Consumer batches: views into leased slots, or assembled copies.
//!
//! A [`SlotLease`] stands for one producer batch this consumer was published;
//! when the last thing holding it is dropped (a [`Batch`], a [`Leaf`], a
//! Python tensor's DLPack deleter) it releases the batch in the consumer's
//! ledger, and wakes the producer only if the board says it waits. A consumer
//! batch that lies within one producer batch views the slot directly; one that
//! spans several is copied into memory of its own, and the leases it copied
//! from are released as soon as it is built.

use std::any::Any;
use std::sync::Arc;

use crate::arena::ArenaView;
use crate::consumer::link::Link;
use crate::consumer::rebatch::Span;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{Layout, LeafDesc, LeafKind, Node};

/// A lease on one producer batch.
pub struct SlotLease {
    pub(crate) seq: u64,
    pub(crate) slot: usize,
    pub(crate) layout: Layout,
    pub(crate) arena: Arc<ArenaView>,
    pub(crate) link: Arc<Link>,
}

impl SlotLease {
    /// The bytes of rows `start..end` of array leaf `i`.
    fn rows(&self, i: usize, start: u64, end: u64) -> &[u8] {
        let leaf = &self.layout.leaves[i];
        let rb = leaf.row_bytes() as usize;
        let off = leaf.offset as usize + start as usize * rb;
        let len = (end - start) as usize * rb;
        // In range: the layout was validated against the slot size.
        &self.slot_bytes()[off..off + len]
    }

    fn slot_bytes(&self) -> &[u8] {
        // The slot index was checked when the lease was made.
        self.arena.slot(self.slot).unwrap_or(&[])
    }

    /// The strings of rows `start..end` of string leaf `i`.
    fn strings(&self, i: usize, start: u64, end: u64) -> Result<Vec<String>> {
        let leaf = &self.layout.leaves[i];
        let base = leaf.offset as usize;
        let bytes = &self.slot_bytes()[base..base + leaf.nbytes as usize];
        let rows = leaf.rows() as usize;
        let table = 8 * (rows + 1);
        let text = &bytes[table..];
        let off = |k: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[8 * k..8 * k + 8]);
            u64::from_le_bytes(b) as usize
        };
        (start as usize..end as usize)
            .map(|k| {
                let (a, b) = (off(k), off(k + 1));
                if a > b || b > text.len() {
                    return Err(Error::Protocol(format!("string {k} out of bounds")));
                }
                String::from_utf8(text[a..b].to_vec())
                    .map_err(|_| Error::Protocol(format!("string {k} is not UTF-8")))
            })
            .collect()
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        self.link.release(self.slot, self.seq);
    }
}

/// Memory of an assembled leaf, 8-byte aligned for every dtype.
struct OwnedBytes {
    words: Vec<u64>,
    len: usize,
}

impl OwnedBytes {
    fn zeroed(len: usize) -> Self {
        OwnedBytes {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes, u8 has no
        // alignment needs, and the slice borrows `self`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

enum LeafData {
    Shared {
        lease: Arc<SlotLease>,
        offset: usize,
        len: usize,
    },
    Owned(Arc<OwnedBytes>),
    Strings(Vec<String>),
}

/// One array (or list) of a consumer batch.
pub struct Leaf {
    kind: LeafKind,
    dtype: DType,
    shape: Vec<u64>,
    data: LeafData,
}

/// Something that keeps a leaf's memory alive (hand it to a DLPack deleter).
pub type Keepalive = Arc<dyn Any + Send + Sync>;

impl Leaf {
    /// What the leaf is.
    pub fn kind(&self) -> LeafKind {
        self.kind
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape; `shape()[0]` is the batch's rows.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The raw, C-contiguous bytes (empty for string leaves).
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            LeafData::Shared { lease, offset, len } => &lease.slot_bytes()[*offset..*offset + *len],
            LeafData::Owned(o) => o.bytes(),
            LeafData::Strings(_) => &[],
        }
    }

    /// The strings of a string leaf.
    pub fn strings(&self) -> Option<&[String]> {
        match &self.data {
            LeafData::Strings(s) => Some(s),
            _ => None,
        }
    }

    /// True when the bytes are a view of shared memory (no copy was made).
    pub fn is_zero_copy(&self) -> bool {
        matches!(self.data, LeafData::Shared { .. })
    }

    /// A handle that keeps [`Leaf::bytes`] valid (and the slot leased) for
    /// as long as it lives, even after the leaf is dropped.
    pub fn keepalive(&self) -> Option<Keepalive> {
        match &self.data {
            LeafData::Shared { lease, .. } => Some(Arc::clone(lease) as Keepalive),
            LeafData::Owned(o) => Some(Arc::clone(o) as Keepalive),
            LeafData::Strings(_) => None,
        }
    }
}

/// One consumer batch.
pub struct Batch {
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Its index within the epoch (from 0).
    pub index: u64,
    tree: Node,
    leaves: Vec<Leaf>,
}

impl Batch {
    /// The structure (leaves index into [`Batch::leaves`]).
    pub fn tree(&self) -> &Node {
        &self.tree
    }

    /// The arrays.
    pub fn leaves(&self) -> &[Leaf] {
        &self.leaves
    }

    /// Takes the arrays out.
    pub fn into_parts(self) -> (Node, Vec<Leaf>) {
        (self.tree, self.leaves)
    }

    /// Rows in the batch.
    pub fn rows(&self) -> u64 {
        self.leaves.first().map(|l| l.shape[0]).unwrap_or(0)
    }

    /// Builds a consumer batch from spans of producer batches.
    pub(crate) fn assemble(
        spans: Vec<Span<Arc<SlotLease>>>,
        epoch: u64,
        index: u64,
    ) -> Result<Batch> {
        let first = &spans
            .first()
            .ok_or_else(|| Error::Protocol("empty consumer batch".into()))?
            .piece
            .layout;
        for s in &spans[1..] {
            let other = &s.piece.layout;
            let same = other.tree == first.tree
                && other.leaves.len() == first.leaves.len()
                && other
                    .leaves
                    .iter()
                    .zip(&first.leaves)
                    .all(|(a, b)| same_kind(a, b));
            if !same {
                return Err(Error::InvalidBatch(
                    "the producer's batches differ in structure, dtype or per-sample shape, so \
                     they cannot be re-cut into another batch size; use batch_size=None (the \
                     producer's batch size)"
                        .into(),
                ));
            }
        }
        let rows: u64 = spans.iter().map(|s| s.end - s.start).sum();
        let mut leaves = Vec::with_capacity(first.leaves.len());
        for (i, desc) in first.leaves.iter().enumerate() {
            let mut shape = desc.shape.clone();
            shape[0] = rows;
            let data = if desc.kind == LeafKind::StrList {
                let mut all = Vec::with_capacity(rows as usize);
                for s in &spans {
                    all.extend(s.piece.strings(i, s.start, s.end)?);
                }
                LeafData::Strings(all)
            } else if let [only] = spans.as_slice() {
                let rb = desc.row_bytes() as usize;
                LeafData::Shared {
                    lease: Arc::clone(&only.piece),
                    offset: desc.offset as usize + only.start as usize * rb,
                    len: (only.end - only.start) as usize * rb,
                }
            } else {
                let total = rows as usize * desc.row_bytes() as usize;
                let mut owned = OwnedBytes::zeroed(total);
                let mut at = 0;
                let out = owned.bytes_mut();
                for s in &spans {
                    let src = s.piece.rows(i, s.start, s.end);
                    out[at..at + src.len()].copy_from_slice(src);
                    at += src.len();
                }
                LeafData::Owned(Arc::new(owned))
            };
            leaves.push(Leaf {
                kind: desc.kind,
                dtype: desc.dtype,
                shape,
                data,
            });
        }
        Ok(Batch {
            epoch,
            index,
            tree: first.tree.clone(),
            leaves,
        })
    }
}

fn same_kind(a: &LeafDesc, b: &LeafDesc) -> bool {
    a.kind == b.kind && a.dtype == b.dtype && a.shape[1..] == b.shape[1..]
}
