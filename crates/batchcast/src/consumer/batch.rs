//! Consumer batches: views into leased slots, or assembled copies.
//!
//! A [`SlotLease`] stands for one producer batch this consumer was published;
//! when the last thing holding it is dropped (a [`Batch`], a [`Leaf`], a
//! Python tensor's DLPack deleter) it releases the batch in the consumer's
//! ledger, and wakes the producer only if the board says it waits. A consumer
//! batch that lies within one producer batch views the slot directly
//! ([`Batch::view`]); one that spans several is copied into memory of its own
//! piece by piece ([`super::assemble`]), each lease released once its piece is
//! copied.

use std::any::Any;
use std::sync::Arc;

use crate::arena::ArenaView;
use crate::consumer::assemble::OwnedBytes;
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
    pub(super) fn rows(&self, i: usize, start: u64, end: u64) -> &[u8] {
        let leaf = &self.layout.leaves[i];
        let rb = leaf.row_bytes() as usize;
        let off = leaf.offset as usize + start as usize * rb;
        let len = (end - start) as usize * rb;
        self.bytes(off, len)
    }

    /// Bytes `offset..offset + len` of the slot (only those: see
    /// [`ArenaView::bytes`]).
    fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        // In range: the slot index was checked when the lease was made and
        // the layout was validated against the slot size.
        self.arena.bytes(self.slot, offset, len).unwrap_or(&[])
    }

    /// The strings of rows `start..end` of string leaf `i`.
    pub(super) fn strings(&self, i: usize, start: u64, end: u64) -> Result<Vec<String>> {
        let leaf = &self.layout.leaves[i];
        let base = leaf.offset as usize;
        let bytes = self.bytes(base, leaf.nbytes as usize);
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

/// Where a leaf's data lives.
pub(super) enum LeafData {
    /// Rows of a leased slot.
    Shared {
        lease: Arc<SlotLease>,
        offset: usize,
        len: usize,
    },
    /// Memory of its own (assembled).
    Owned(Arc<OwnedBytes>),
    /// Copied-out strings.
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
    /// Leaf `desc` of a batch of `rows` rows, its data in `data`.
    pub(super) fn new(desc: &LeafDesc, rows: u64, data: LeafData) -> Leaf {
        let mut shape = desc.shape.clone();
        shape[0] = rows;
        Leaf {
            kind: desc.kind,
            dtype: desc.dtype,
            shape,
            data,
        }
    }

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
            LeafData::Shared { lease, offset, len } => lease.bytes(*offset, *len),
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

    /// Where the bytes lie in the producer's arena, and so in each of its
    /// device mirrors ([`Consumer::mirrors`](crate::Consumer::mirrors) of
    /// the mirror generation the leaf was read in); `None` for a leaf
    /// copied out of the arena.
    pub fn arena_offset(&self) -> Option<usize> {
        match &self.data {
            LeafData::Shared { lease, offset, .. } => {
                Some(lease.arena.slot_offset(lease.slot) + offset)
            }
            _ => None,
        }
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

    /// A consumer batch that lies inside one producer batch: its arrays are
    /// views of the slot (its strings are copied out).
    pub(super) fn view(span: Span<Arc<SlotLease>>, epoch: u64, index: u64) -> Result<Batch> {
        let lease = &span.piece;
        let mut leaves = Vec::with_capacity(lease.layout.leaves.len());
        for (i, desc) in lease.layout.leaves.iter().enumerate() {
            let data = if desc.kind == LeafKind::StrList {
                LeafData::Strings(lease.strings(i, span.start, span.end)?)
            } else {
                let rb = desc.row_bytes() as usize;
                LeafData::Shared {
                    lease: Arc::clone(lease),
                    offset: desc.offset as usize + span.start as usize * rb,
                    len: span.rows() as usize * rb,
                }
            };
            leaves.push(Leaf::new(desc, span.rows(), data));
        }
        Ok(Batch {
            epoch,
            index,
            tree: lease.layout.tree.clone(),
            leaves,
        })
    }

    /// A consumer batch of `leaves` assembled in memory of its own.
    pub(super) fn owned(epoch: u64, index: u64, tree: Node, leaves: Vec<Leaf>) -> Batch {
        Batch {
            epoch,
            index,
            tree,
            leaves,
        }
    }
}
