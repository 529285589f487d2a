//! What a producer says about its stream, so that a consumer can check it
//! reads what it expects before it trains on it.
//!
//! A [`StreamSpec`] travels in every [`crate::wire::Welcome`] and every
//! [`crate::StatusReport`]: the structure, dtypes and per-sample shapes of
//! the first batch ([`BatchShape`], once the producer has planned one), and
//! free-form user metadata as a JSON text (the transform, the image size).
//! The nominal batch size and the samples per epoch travel beside it in the
//! welcome. Both parts are bounded: metadata to [`MAX_METADATA`] bytes (the
//! producer refuses more), the shape to `MAX_DESCRIBED_LEAVES` leaves (a
//! batch with more is not described rather than refused), so a welcome stays
//! far below the frame limit.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{Layout, LeafKind, Node};

/// Longest metadata text, in bytes.
pub const MAX_METADATA: usize = 64 << 10;
/// Most leaves of a batch described in a [`BatchShape`].
pub const MAX_DESCRIBED_LEAVES: usize = 256;

/// A producer's description of what it sends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// The first batch's structure and arrays; `None` before the producer
    /// planned its first batch (a consumer that connects to a producer
    /// started with a fixed slot size before it published), or when the
    /// batch has more than `MAX_DESCRIBED_LEAVES` leaves.
    pub first_batch: Option<BatchShape>,
    /// A JSON text given by the user (empty: none); checked to be at most
    /// [`MAX_METADATA`] bytes, not parsed here.
    pub metadata: String,
}

/// The structure of a batch and each leaf's dtype and per-sample shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchShape {
    /// The structure; leaves index into `leaves`.
    pub tree: Node,
    /// Each leaf, in the order the tree indexes them.
    pub leaves: Vec<LeafShape>,
}

/// One leaf of a [`BatchShape`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeafShape {
    /// Array or per-sample list.
    pub kind: LeafKind,
    /// The element type.
    pub dtype: DType,
    /// The shape of one sample (the array's shape without its first,
    /// batch dimension; empty for lists).
    pub sample_shape: Vec<u64>,
}

impl BatchShape {
    /// Describes the batch laid out as `layout`; `None` if it has more than
    /// `MAX_DESCRIBED_LEAVES` leaves.
    pub fn of(layout: &Layout) -> Option<BatchShape> {
        if layout.leaves.len() > MAX_DESCRIBED_LEAVES {
            return None;
        }
        let leaves = layout
            .leaves
            .iter()
            .map(|l| LeafShape {
                kind: l.kind,
                dtype: l.dtype,
                sample_shape: match l.kind {
                    LeafKind::Array => l.shape.iter().skip(1).copied().collect(),
                    _ => Vec::new(),
                },
            })
            .collect();
        Some(BatchShape {
            tree: layout.tree.clone(),
            leaves,
        })
    }
}

impl BatchShape {
    /// A one-line text of the structure: `(uint8[3, 64, 64], int64[])`,
    /// `{'image': float32[3, 8, 8], 'path': [str]}`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        self.write_node(&self.tree, &mut out);
        out
    }

    fn write_node(&self, node: &Node, out: &mut String) {
        match node {
            Node::Leaf(i) => match self.leaves.get(*i as usize) {
                Some(l) => out.push_str(&l.describe()),
                None => out.push('?'),
            },
            Node::Tuple(items) | Node::List(items) => {
                let (open, close) = match node {
                    Node::Tuple(_) => ('(', ')'),
                    _ => ('[', ']'),
                };
                out.push(open);
                for (i, c) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.write_node(c, out);
                }
                out.push(close);
            }
            Node::Dict(items) => {
                out.push('{');
                for (i, (k, c)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&format!("{k:?}: "));
                    self.write_node(c, out);
                }
                out.push('}');
            }
        }
    }
}

impl LeafShape {
    /// `uint8[3, 64, 64]` for an array (per sample), `[int]`, `[float]` or
    /// `[str]` for a per-sample list.
    pub fn describe(&self) -> String {
        match self.kind {
            LeafKind::Array => {
                let dims: Vec<String> = self.sample_shape.iter().map(u64::to_string).collect();
                format!("{}[{}]", dtype_name(self.dtype), dims.join(", "))
            }
            LeafKind::IntList => "[int]".into(),
            LeafKind::FloatList => "[float]".into(),
            LeafKind::StrList => "[str]".into(),
        }
    }
}

/// The dtype as NumPy and PyTorch spell it (`uint8`, `float32`).
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::U8 => "uint8",
        DType::I8 => "int8",
        DType::U16 => "uint16",
        DType::I16 => "int16",
        DType::U32 => "uint32",
        DType::I32 => "int32",
        DType::U64 => "uint64",
        DType::I64 => "int64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// Checks user metadata before a producer announces it.
pub fn check_metadata(text: &str) -> Result<()> {
    if text.len() > MAX_METADATA {
        return Err(Error::InvalidArgument(format!(
            "metadata takes {} bytes once encoded; at most {MAX_METADATA} are allowed (describe \
             the stream, do not ship data in it)",
            text.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LeafSpec;

    #[test]
    fn the_shape_of_a_batch_drops_the_batch_dimension() {
        let tree = Node::Tuple(vec![Node::Leaf(0), Node::Leaf(1)]);
        let specs = [
            LeafSpec::array(DType::U8, vec![8, 3, 64, 64]),
            LeafSpec::array(DType::I64, vec![8]),
        ];
        let layout = Layout::plan(tree.clone(), &specs).unwrap();
        let shape = BatchShape::of(&layout).unwrap();
        assert_eq!(shape.tree, tree);
        assert_eq!(shape.leaves[0].sample_shape, vec![3, 64, 64]);
        assert_eq!(shape.leaves[0].dtype, DType::U8);
        assert!(shape.leaves[1].sample_shape.is_empty());
        let text = shape.describe();
        assert_eq!(text, "(uint8[3, 64, 64], int64[])");
    }

    #[test]
    fn too_many_leaves_are_not_described() {
        let n = MAX_DESCRIBED_LEAVES + 1;
        let tree = Node::List((0..n as u32).map(Node::Leaf).collect());
        let specs: Vec<_> = (0..n)
            .map(|_| LeafSpec::array(DType::U8, vec![1]))
            .collect();
        let layout = Layout::plan(tree, &specs).unwrap();
        assert!(BatchShape::of(&layout).is_none());
    }

    #[test]
    fn oversized_metadata_is_refused_with_the_limit() {
        let big = "x".repeat(MAX_METADATA + 1);
        let err = check_metadata(&big).unwrap_err().to_string();
        assert!(err.contains(&MAX_METADATA.to_string()), "{err}");
        assert!(check_metadata("{\"img_size\": 64}").is_ok());
    }
}
