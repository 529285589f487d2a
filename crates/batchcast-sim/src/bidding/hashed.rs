//! The order in which the published Dally (cluster-sim at 4cd660e) visits
//! the slots and machines it counts free GPUs in: commons-collections4's
//! `MultiKeyMap`, whose `keySet` walks an `AbstractHashedMap` (16 buckets,
//! doubled when it holds 3/4 of them; new entries at the head of their
//! bucket) from the last bucket to the first. Dally takes the first slot
//! (then machine) in that order with enough free GPUs, so the order decides
//! the placement.

/// The bucket of a key whose component hash codes (`Integer.hashCode`: the
/// value) xor to `h`, before masking: `MultiKeyMap.hash`.
fn spread(h: i32) -> i32 {
    let mut h = h;
    h = h.wrapping_add(!(h << 9));
    h ^= ((h as u32) >> 14) as i32;
    h = h.wrapping_add(h << 4);
    h ^= ((h as u32) >> 10) as i32;
    h
}

/// The iteration order of keys put in the order of `keys` (each the xor of
/// its components), as indices into `keys`.
pub(crate) fn iteration_order(keys: &[i32]) -> Vec<usize> {
    let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); 16];
    let mut threshold = 12;
    for (n, &k) in keys.iter().enumerate() {
        let cap = buckets.len();
        // Each bucket holds its chain head last (push = insert at the head).
        buckets[spread(k) as usize & (cap - 1)].push(n);
        if n + 1 >= threshold {
            let wider = cap * 2;
            let mut next: Vec<Vec<usize>> = vec![Vec::new(); wider];
            for chain in buckets.iter().rev() {
                for &e in chain.iter().rev() {
                    next[spread(keys[e]) as usize & (wider - 1)].push(e);
                }
            }
            buckets = next;
            threshold = wider * 3 / 4;
        }
    }
    buckets
        .iter()
        .rev()
        .flat_map(|chain| chain.iter().rev().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order of keys (rack, machine, slot), put in this order.
    fn order_of(keys: &[[i32; 3]]) -> Vec<[i32; 3]> {
        let hashes: Vec<i32> = keys.iter().map(|k| k[0] ^ k[1] ^ k[2]).collect();
        iteration_order(&hashes)
            .into_iter()
            .map(|i| keys[i])
            .collect()
    }

    /// Every (rack, machine, slot) of a shape, in cluster order.
    fn shape(racks: i32, machines: i32, slots: i32) -> Vec<[i32; 3]> {
        (0..racks)
            .flat_map(|r| (0..machines).flat_map(move |m| (0..slots).map(move |s| [r, m, s])))
            .collect()
    }

    #[test]
    fn the_order_is_the_one_java_prints() {
        // Printed by Java 17 with commons-collections4 4.2: a MultiKeyMap
        // filled with these keys in this order, then its keySet walked.
        assert_eq!(order_of(&shape(2, 2, 2)), JAVA_ORDER_2X2X2.to_vec());
        assert_eq!(order_of(&shape(2, 4, 4)), JAVA_ORDER_2X4X4.to_vec());
        // Machines (rack, machine) of 2 x 4: keys with slot 0.
        let java = [
            [1, 3],
            [0, 2],
            [1, 0],
            [0, 1],
            [1, 2],
            [0, 3],
            [1, 1],
            [0, 0],
        ];
        let machines: Vec<[i32; 2]> = order_of(&shape(2, 4, 1))
            .into_iter()
            .map(|k| [k[0], k[1]])
            .collect();
        assert_eq!(machines, java.to_vec());
    }

    const JAVA_ORDER_2X2X2: [[i32; 3]; 8] = [
        [1, 1, 1],
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
        [1, 1, 0],
        [1, 0, 1],
        [0, 1, 1],
        [0, 0, 0],
    ];
    const JAVA_ORDER_2X4X4: [[i32; 3]; 32] = [
        [1, 3, 3],
        [1, 2, 2],
        [0, 2, 3],
        [0, 1, 0],
        [0, 0, 1],
        [0, 3, 2],
        [1, 0, 0],
        [1, 1, 1],
        [1, 3, 1],
        [1, 2, 0],
        [0, 2, 1],
        [0, 1, 2],
        [0, 0, 3],
        [0, 3, 0],
        [1, 0, 2],
        [1, 1, 3],
        [1, 3, 0],
        [1, 2, 1],
        [0, 2, 0],
        [0, 1, 3],
        [0, 0, 2],
        [0, 3, 1],
        [1, 0, 3],
        [1, 1, 2],
        [1, 3, 2],
        [1, 2, 3],
        [0, 2, 2],
        [0, 1, 1],
        [0, 0, 0],
        [0, 3, 3],
        [1, 0, 1],
        [1, 1, 0],
    ];
}
