//! What the core's integration tests share.

use batchcast::{DType, Error, LeafSpec, Node, Producer};

/// Publishes batch `seq` (one row holding `seq`); false when the producer
/// blocked (the hook is called only while it waits).
pub fn publish(producer: &mut Producer, seq: u64, stop_when_blocked: bool) -> bool {
    let tree = Node::Tuple(vec![Node::Leaf(0)]);
    let leaves = [LeafSpec::array(DType::I64, vec![1])];
    let mut blocked = || stop_when_blocked;
    match producer.loan(tree, &leaves, &mut blocked) {
        Ok(mut slot) => {
            slot.leaf_mut(0)
                .copy_from_slice(&(seq as i64).to_le_bytes());
            slot.publish().unwrap();
            true
        }
        Err(Error::Interrupted) => false,
        Err(e) => panic!("batch {seq}: {e}"),
    }
}
