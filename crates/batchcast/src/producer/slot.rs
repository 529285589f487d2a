//! A loaned slot: the producer's batch being written, published once.

use super::Producer;
use crate::error::{Error, Result};
use crate::layout::{Layout, LeafSpec};
use crate::wire;

/// A loaned slot: write the batch's arrays, then [`SlotMut::publish`].
/// Dropped unpublished, it gives the slot back.
pub struct SlotMut<'p> {
    producer: &'p mut Producer,
    index: usize,
    layout: Layout,
    published: bool,
}

impl Drop for SlotMut<'_> {
    fn drop(&mut self) {
        if !self.published {
            self.producer.shared.lock().give_back(self.index);
        }
    }
}

impl<'p> SlotMut<'p> {
    /// Slot `index` of `producer`, loaned for a batch laid out as `layout`.
    pub(super) fn new(producer: &'p mut Producer, index: usize, layout: Layout) -> Self {
        SlotMut {
            producer,
            index,
            layout,
            published: false,
        }
    }
}

impl SlotMut<'_> {
    /// Where each array goes.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The bytes of leaf `i`, to fill.
    pub fn leaf_mut(&mut self, i: usize) -> &mut [u8] {
        let leaf = &self.layout.leaves[i];
        let (start, len) = (leaf.offset as usize, leaf.nbytes as usize);
        &mut loaned_bytes(self.producer, self.index)[start..start + len]
    }

    /// Every leaf's bytes at once, to fill in parallel.
    pub fn leaves_mut(&mut self) -> Vec<&mut [u8]> {
        let mut rest = loaned_bytes(self.producer, self.index);
        let mut consumed = 0usize;
        let mut out = Vec::with_capacity(self.layout.leaves.len());
        for leaf in &self.layout.leaves {
            let start = leaf.offset as usize - consumed;
            let (_, tail) = rest.split_at_mut(start);
            let (mine, tail) = tail.split_at_mut(leaf.nbytes as usize);
            out.push(mine);
            rest = tail;
            consumed = leaf.offset as usize + leaf.nbytes as usize;
        }
        out
    }

    /// Keeps only the first `rows` rows (a source skipped bad samples):
    /// re-plans the layout for `rows` and moves each array's first rows to
    /// its new place. Fails if `rows` is 0 or more than the batch has.
    pub fn truncate_rows(&mut self, rows: u64) -> Result<()> {
        let old = self.layout.rows();
        if rows == old {
            return Ok(());
        }
        if rows == 0 || rows > old {
            return Err(Error::InvalidBatch(format!(
                "cannot keep {rows} rows of a batch of {old}"
            )));
        }
        let specs: Vec<LeafSpec> = self
            .layout
            .leaves
            .iter()
            .map(|l| {
                if l.kind == crate::layout::LeafKind::StrList {
                    return Err(Error::InvalidBatch(
                        "a batch with strings cannot be truncated".into(),
                    ));
                }
                let mut shape = l.shape.clone();
                shape[0] = rows;
                Ok(LeafSpec {
                    kind: l.kind,
                    dtype: l.dtype,
                    shape,
                    text_bytes: 0,
                })
            })
            .collect::<Result<_>>()?;
        let new = Layout::plan(self.layout.tree.clone(), &specs)?;
        let slot = loaned_bytes(self.producer, self.index);
        // New offsets are never past old ones (every leaf shrank), so moving
        // leaves front to back never overwrites one not yet moved.
        for (o, n) in self.layout.leaves.iter().zip(&new.leaves) {
            let len = n.nbytes as usize;
            slot.copy_within(
                o.offset as usize..o.offset as usize + len,
                n.offset as usize,
            );
        }
        self.layout = new;
        Ok(())
    }

    /// Publishes the batch to every consumer following the epoch; returns
    /// its sequence number.
    pub fn publish(mut self) -> Result<u64> {
        let seq = self.producer.publish(self.index, &self.layout)?;
        self.published = true;
        Ok(seq)
    }
}

/// The bytes of slot `index`, which `producer` has loaned out: a loaned
/// slot implies an arena.
fn loaned_bytes(producer: &mut Producer, index: usize) -> &mut [u8] {
    producer
        .arena
        .as_mut()
        .expect("a loaned slot implies an arena")
        .slot_mut(index)
}

/// The layout as it is stored in the slot after the arrays.
pub(super) fn encode_layout(layout: &Layout) -> Result<Vec<u8>> {
    let bytes = postcard::to_stdvec(layout)
        .map_err(|e| Error::Protocol(format!("cannot encode a batch layout: {e}")))?;
    if bytes.len() > wire::MAX_FRAME {
        return Err(Error::InvalidBatch(format!(
            "the batch's description takes {} bytes (at most {} allowed): too many arrays or \
             strings in one batch",
            bytes.len(),
            wire::MAX_FRAME
        )));
    }
    Ok(bytes)
}
