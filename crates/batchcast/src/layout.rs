//! How a batch is described and where its bytes lie in a slot.
//!
//! A batch is a tree ([`Node`]) of tuples, lists and dicts whose leaves are
//! arrays sharing the leading (row) dimension. The producer describes the
//! leaves without positions ([`LeafSpec`]); [`Layout::plan`] places them in a
//! slot after a [`SLOT_HEADER`]-byte header, each 64-byte aligned. The layout
//! travels with every batch message and is validated by the consumer before
//! any byte of the slot is read through it: it comes from another process.
//!
//! Arrays are C-contiguous, so rows `a..b` of a leaf are one contiguous byte
//! range. String leaves store `rows + 1` little-endian `u64` offsets followed
//! by the UTF-8 text.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Bytes at the start of every slot, before the first leaf.
pub const SLOT_HEADER: usize = 64;
/// Alignment of every leaf in a slot.
pub const ALIGN: usize = 64;
/// Most leaves in one batch.
pub const MAX_LEAVES: usize = 4096;
/// Deepest nesting of tuples, lists and dicts.
pub const MAX_DEPTH: usize = 64;
/// Most dimensions of one array.
pub const MAX_NDIM: usize = 32;
/// Longest dict key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The structure of a batch; leaves index into [`Layout::leaves`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Node {
    /// An array.
    Leaf(u32),
    /// A tuple.
    Tuple(Vec<Node>),
    /// A list (of per-field values, not of samples).
    List(Vec<Node>),
    /// A dict with string keys, in insertion order.
    Dict(Vec<(String, Node)>),
}

/// What a leaf is to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeafKind {
    /// An n-d array (a tensor).
    Array,
    /// One integer per row, handed back as a list (stored as `i64`).
    IntList,
    /// One float per row, handed back as a list (stored as `f64`).
    FloatList,
    /// One string per row (file names, captions).
    StrList,
}

/// A leaf as the producer describes it, before placement.
#[derive(Debug, Clone, PartialEq)]
pub struct LeafSpec {
    /// What the leaf is.
    pub kind: LeafKind,
    /// Element type (`U8` for strings).
    pub dtype: DType,
    /// Full shape; `shape[0]` is the number of rows.
    pub shape: Vec<u64>,
    /// For [`LeafKind::StrList`], the total UTF-8 bytes; else 0.
    pub text_bytes: u64,
}

impl LeafSpec {
    /// An array leaf.
    pub fn array(dtype: DType, shape: Vec<u64>) -> Self {
        LeafSpec {
            kind: LeafKind::Array,
            dtype,
            shape,
            text_bytes: 0,
        }
    }

    /// Bytes the leaf occupies.
    pub fn nbytes(&self) -> Result<u64> {
        if self.kind == LeafKind::StrList {
            let rows = self.shape.first().copied().unwrap_or(0);
            return rows
                .checked_add(1)
                .and_then(|n| n.checked_mul(8))
                .and_then(|n| n.checked_add(self.text_bytes))
                .ok_or_else(|| Error::InvalidBatch("string leaf too large".into()));
        }
        self.shape
            .iter()
            .try_fold(self.dtype.size() as u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| Error::InvalidBatch(format!("shape {:?} overflows", self.shape)))
    }
}

/// A placed leaf: where its bytes lie in the slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafDesc {
    /// What the leaf is.
    pub kind: LeafKind,
    /// Element type.
    pub dtype: DType,
    /// Full shape; `shape[0]` is the number of rows.
    pub shape: Vec<u64>,
    /// Byte offset from the start of the slot.
    pub offset: u64,
    /// Bytes of the leaf.
    pub nbytes: u64,
}

impl LeafDesc {
    /// Number of rows.
    pub fn rows(&self) -> u64 {
        self.shape[0]
    }

    /// Bytes per row of an array leaf (not meaningful for strings).
    pub fn row_bytes(&self) -> u64 {
        self.shape[1..]
            .iter()
            .product::<u64>()
            .saturating_mul(self.dtype.size() as u64)
    }
}

/// A batch's tree and the placement of its leaves in a slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// The structure.
    pub tree: Node,
    /// The leaves, in tree order.
    pub leaves: Vec<LeafDesc>,
}

fn align_up(x: u64) -> Option<u64> {
    let a = ALIGN as u64;
    x.checked_add(a - 1).map(|v| v / a * a)
}

impl Layout {
    /// Places `specs` one after the other after the slot header.
    pub fn plan(tree: Node, specs: &[LeafSpec]) -> Result<Layout> {
        let mut offset = SLOT_HEADER as u64;
        let mut leaves = Vec::with_capacity(specs.len());
        for spec in specs {
            let nbytes = spec.nbytes()?;
            leaves.push(LeafDesc {
                kind: spec.kind,
                dtype: spec.dtype,
                shape: spec.shape.clone(),
                offset,
                nbytes,
            });
            offset = offset
                .checked_add(nbytes)
                .and_then(align_up)
                .ok_or_else(|| Error::InvalidBatch("batch too large".into()))?;
        }
        let layout = Layout { tree, leaves };
        layout.check_structure()?;
        Ok(layout)
    }

    /// Bytes of the slot used, header included.
    pub fn slot_bytes(&self) -> u64 {
        self.leaves
            .iter()
            .map(|l| l.offset + l.nbytes)
            .max()
            .unwrap_or(SLOT_HEADER as u64)
    }

    /// Rows of the batch (every leaf has the same).
    pub fn rows(&self) -> u64 {
        self.leaves.first().map(|l| l.rows()).unwrap_or(0)
    }

    /// Checks everything a consumer relies on before reading a slot of
    /// `slot_size` bytes through this layout.
    pub fn validate(&self, slot_size: usize) -> Result<()> {
        self.check_structure()?;
        let mut end_prev = SLOT_HEADER as u64;
        for (i, leaf) in self.leaves.iter().enumerate() {
            let bad = |what: String| Err(Error::Protocol(format!("leaf {i}: {what}")));
            if leaf.offset % ALIGN as u64 != 0 || leaf.offset < end_prev {
                return bad(format!("misplaced at offset {}", leaf.offset));
            }
            let end = match leaf.offset.checked_add(leaf.nbytes) {
                Some(e) if e <= slot_size as u64 => e,
                _ => return bad(format!("ends beyond the slot of {slot_size} bytes")),
            };
            let spec = LeafSpec {
                kind: leaf.kind,
                dtype: leaf.dtype,
                shape: leaf.shape.clone(),
                text_bytes: 0,
            };
            let min = spec.nbytes()?;
            let size_ok = match leaf.kind {
                LeafKind::StrList => leaf.nbytes >= min,
                _ => leaf.nbytes == min,
            };
            if !size_ok {
                return bad(format!(
                    "{} bytes do not match shape {:?} of {}",
                    leaf.nbytes, leaf.shape, leaf.dtype
                ));
            }
            let dtype_ok = match leaf.kind {
                LeafKind::Array => true,
                LeafKind::IntList => leaf.dtype == DType::I64 && leaf.shape.len() == 1,
                LeafKind::FloatList => leaf.dtype == DType::F64 && leaf.shape.len() == 1,
                LeafKind::StrList => leaf.dtype == DType::U8 && leaf.shape.len() == 1,
            };
            if !dtype_ok {
                return bad(format!("{:?} cannot be {:?}", leaf.kind, leaf.shape));
            }
            end_prev = end;
        }
        Ok(())
    }

    /// Tree and shape rules shared by the producer and the consumer.
    fn check_structure(&self) -> Result<()> {
        let invalid = |s: String| Err(Error::InvalidBatch(s));
        if self.leaves.is_empty() {
            return invalid("a batch needs at least one array".into());
        }
        if self.leaves.len() > MAX_LEAVES {
            return invalid(format!("more than {MAX_LEAVES} arrays"));
        }
        let rows = self.leaves[0].shape.first().copied().unwrap_or(0);
        if rows == 0 {
            return invalid("a batch needs at least one row (shape[0] >= 1)".into());
        }
        for (i, leaf) in self.leaves.iter().enumerate() {
            if leaf.shape.is_empty() || leaf.shape.len() > MAX_NDIM {
                return invalid(format!(
                    "array {i} has {} dimensions; every array needs a leading batch \
                     dimension and at most {MAX_NDIM} dimensions",
                    leaf.shape.len()
                ));
            }
            if leaf.shape[0] != rows {
                return invalid(format!(
                    "array {i} has {} rows but the first array has {rows}; every array of \
                     a batch must share the leading batch dimension",
                    leaf.shape[0]
                ));
            }
        }
        let mut seen = vec![false; self.leaves.len()];
        check_node(&self.tree, 0, &mut seen)?;
        if seen.iter().any(|s| !s) {
            return invalid("the tree does not reference every array".into());
        }
        Ok(())
    }
}

fn check_node(node: &Node, depth: usize, seen: &mut [bool]) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::InvalidBatch(format!(
            "nested deeper than {MAX_DEPTH} levels"
        )));
    }
    match node {
        Node::Leaf(i) => match seen.get_mut(*i as usize) {
            Some(s) if !*s => {
                *s = true;
                Ok(())
            }
            _ => Err(Error::InvalidBatch(format!(
                "the tree references array {i} twice or out of range"
            ))),
        },
        Node::Tuple(items) | Node::List(items) => {
            for item in items {
                check_node(item, depth + 1, seen)?;
            }
            Ok(())
        }
        Node::Dict(items) => {
            for (key, item) in items {
                if key.len() > MAX_KEY_LEN {
                    return Err(Error::InvalidBatch("a dict key is too long".into()));
                }
                check_node(item, depth + 1, seen)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images_labels(rows: u64) -> Layout {
        Layout::plan(
            Node::Tuple(vec![Node::Leaf(0), Node::Leaf(1)]),
            &[
                LeafSpec::array(DType::U8, vec![rows, 3, 5, 7]),
                LeafSpec::array(DType::I64, vec![rows]),
            ],
        )
        .unwrap()
    }

    #[test]
    fn leaves_are_aligned_after_the_header() {
        let l = images_labels(10);
        assert_eq!(l.leaves[0].offset, SLOT_HEADER as u64);
        assert_eq!(l.leaves[0].nbytes, 10 * 105);
        assert_eq!(l.leaves[1].offset % ALIGN as u64, 0);
        assert!(l.leaves[1].offset >= l.leaves[0].offset + 1050);
        assert_eq!(l.slot_bytes(), l.leaves[1].offset + 80);
        assert_eq!(l.rows(), 10);
        assert_eq!(l.leaves[0].row_bytes(), 105);
        l.validate(l.slot_bytes() as usize).unwrap();
    }

    #[test]
    fn ragged_rows_are_refused_naming_the_array() {
        let err = Layout::plan(
            Node::Tuple(vec![Node::Leaf(0), Node::Leaf(1)]),
            &[
                LeafSpec::array(DType::F32, vec![4, 2]),
                LeafSpec::array(DType::I64, vec![5]),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("array 1 has 5 rows"), "{err}");
    }

    #[test]
    fn scalars_and_empty_batches_are_refused() {
        assert!(Layout::plan(Node::Leaf(0), &[LeafSpec::array(DType::F32, vec![])]).is_err());
        assert!(Layout::plan(Node::Leaf(0), &[LeafSpec::array(DType::F32, vec![0, 3])]).is_err());
        assert!(Layout::plan(Node::Tuple(vec![]), &[]).is_err());
    }

    #[test]
    fn validate_rejects_what_a_hostile_peer_could_send() {
        let good = images_labels(4);
        let size = good.slot_bytes() as usize;
        let mut l = good.clone();
        l.leaves[1].offset = size as u64; // past the end
        assert!(l.validate(size).is_err());
        let mut l = good.clone();
        l.leaves[0].nbytes += 1; // size does not match the shape
        assert!(l.validate(size).is_err());
        let mut l = good.clone();
        l.leaves[1].offset = 8; // inside the header, misaligned
        assert!(l.validate(size).is_err());
        let mut l = good.clone();
        l.tree = Node::Tuple(vec![Node::Leaf(0), Node::Leaf(0)]);
        assert!(l.validate(size).is_err());
        let mut l = good.clone();
        l.tree = Node::Leaf(7);
        assert!(l.validate(size).is_err());
        let mut l = good;
        l.leaves[0].shape = vec![u64::MAX, u64::MAX];
        assert!(l.validate(size).is_err());
        // Deep nesting.
        let mut tree = Node::Leaf(0);
        for _ in 0..100 {
            tree = Node::List(vec![tree]);
        }
        let l = Layout {
            tree,
            leaves: images_labels(1).leaves[..1].to_vec(),
        };
        assert!(l.validate(1 << 20).is_err());
    }

    #[test]
    fn strings_take_offsets_and_text() {
        let spec = LeafSpec {
            kind: LeafKind::StrList,
            dtype: DType::U8,
            shape: vec![3],
            text_bytes: 10,
        };
        assert_eq!(spec.nbytes().unwrap(), 32 + 10);
        let l = Layout::plan(Node::Leaf(0), &[spec]).unwrap();
        l.validate(1024).unwrap();
    }
}
