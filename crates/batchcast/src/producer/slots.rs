//! The producer's slot table: which batch each slot holds, who holds it,
//! and which slot the next batch goes to.
//!
//! The first `window` slots are used as they always were: the free one
//! holding the oldest batch is taken (so that the most recent batches stay
//! retained for `catch-up` joins); there are few of them, and each is looked
//! at on every loan. The lag slots after them are used only when no window
//! slot is free *and* the caller says a lag slot is wanted (the consumers
//! are spread apart: one lags the others; see `State`). They are kept in
//! publication order, and beside them a stack of lag slots never used (their
//! memory not reserved yet), so a loan looks at one or two of them, not all:
//! a lagging consumer holds the oldest lag batch until it catches up, and
//! releases lag slots in the order they were filled. Only when the budget
//! looks exhausted are all lag slots looked at (a consumer may have released
//! out of order, or left).

use std::collections::{HashMap, VecDeque};

/// One slot.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// The batch it holds, if any.
    pub seq: Option<u64>,
    /// Consumers its batch was published to that may not have released it.
    pub holders: Vec<u64>,
    /// Rows of the batch it holds.
    pub rows: u64,
}

/// Every slot of the arena.
#[derive(Debug)]
pub(crate) struct Slots {
    slots: Vec<Slot>,
    window: usize,
    /// Lag slots that hold a batch, oldest first.
    lag_order: VecDeque<usize>,
    /// Lag slots never used yet; the lowest is on top.
    fresh: Vec<usize>,
    /// Lag slots reserved but empty (loaned and given back unpublished).
    spare: Vec<usize>,
    /// Where each retained batch is.
    by_seq: HashMap<u64, usize>,
}

impl Slots {
    /// A table of `window` slots and no lag slots.
    pub fn new(window: usize) -> Slots {
        Slots {
            slots: (0..window).map(|_| Slot::default()).collect(),
            window,
            lag_order: VecDeque::new(),
            fresh: Vec::new(),
            spare: Vec::new(),
            by_seq: HashMap::new(),
        }
    }

    /// Adds `lag` lag slots (once, when the arena is made).
    pub fn add_lag_slots(&mut self, lag: usize) {
        let first = self.slots.len();
        self.slots.extend((0..lag).map(|_| Slot::default()));
        self.fresh.extend((first..first + lag).rev());
    }

    /// Slots in all.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Window slots.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Lag slots in all.
    pub fn lag_slots(&self) -> usize {
        self.slots.len() - self.window
    }

    /// Lag slots holding a batch now.
    pub fn lag_in_use(&self) -> usize {
        self.lag_order.len()
    }

    /// Slot `i`.
    pub fn get(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    /// Every slot, with its index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.slots.iter().enumerate()
    }

    /// The slot holding batch `seq`, if it is still retained.
    pub fn find(&self, seq: u64) -> Option<usize> {
        self.by_seq.get(&seq).copied()
    }

    /// Drops from slot `i`'s holders those `still_holds(id, i, seq)` says
    /// are done with it; true when nobody holds it any more.
    fn refresh(&mut self, i: usize, still_holds: &dyn Fn(u64, usize, u64) -> bool) -> bool {
        let slot = &mut self.slots[i];
        if let Some(seq) = slot.seq {
            slot.holders.retain(|&id| still_holds(id, i, seq));
        }
        slot.holders.is_empty()
    }

    /// Forgets slot `i`'s batch: the caller is about to rewrite it.
    fn clear(&mut self, i: usize) -> usize {
        if let Some(seq) = self.slots[i].seq.take() {
            self.by_seq.remove(&seq);
        }
        self.slots[i].holders.clear();
        i
    }

    /// A slot no consumer needs any more, its batch forgotten. A window slot
    /// if one is free (the one holding the oldest batch), else, if
    /// `lag_wanted()` (asked only then), a lag slot:
    /// the oldest if it is free, else a fresh one if `reserve` can reserve
    /// its memory, else any free one. `None`: every slot is held (or the
    /// memory for more is refused).
    pub fn take_free(
        &mut self,
        still_holds: &dyn Fn(u64, usize, u64) -> bool,
        lag_wanted: &dyn Fn() -> bool,
        reserve: &mut dyn FnMut(usize) -> bool,
    ) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for i in 0..self.window {
            if self.refresh(i, still_holds) {
                let key = self.slots[i].seq.map_or(0, |q| q + 1);
                if best.is_none_or(|(k, _)| key < k) {
                    best = Some((key, i));
                }
            }
        }
        if let Some((_, i)) = best {
            return Some(self.clear(i));
        }
        if !lag_wanted() {
            return None;
        }
        if let Some(&oldest) = self.lag_order.front() {
            if self.refresh(oldest, still_holds) {
                self.lag_order.pop_front();
                return Some(self.clear(oldest));
            }
        }
        if let Some(i) = self.spare.pop() {
            return Some(i);
        }
        if let Some(&i) = self.fresh.last() {
            if reserve(i) {
                self.fresh.pop();
                return Some(i);
            }
            // Memory refused: the budget ends here.
            self.fresh.clear();
        }
        let k =
            (1..self.lag_order.len()).find(|&k| self.refresh(self.lag_order[k], still_holds))?;
        let i = self.lag_order.remove(k)?;
        Some(self.clear(i))
    }

    /// Slot `i`, taken with [`Slots::take_free`], was not filled after all
    /// (the batch was dropped unpublished): it is free again.
    pub fn give_back(&mut self, i: usize) {
        if i >= self.window && i < self.slots.len() && self.slots[i].seq.is_none() {
            self.spare.push(i);
        }
    }

    /// Slot `i` now holds batch `seq` of `rows` rows, published to `holders`.
    pub fn fill(&mut self, i: usize, seq: u64, rows: u64, holders: Vec<u64>) {
        if i >= self.window {
            self.lag_order.push_back(i);
        }
        self.by_seq.insert(seq, i);
        self.slots[i] = Slot {
            seq: Some(seq),
            holders,
            rows,
        };
    }

    /// Makes `id` a holder of slot `i` too.
    pub fn add_holder(&mut self, i: usize, id: u64) {
        self.slots[i].holders.push(id);
    }

    /// Removes `id` from the holders of every slot `keep(i, seq)` rejects;
    /// returns those slots.
    pub fn drop_holder(&mut self, id: u64, keep: &dyn Fn(usize, u64) -> bool) -> Vec<usize> {
        let mut dropped = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(seq) = slot.seq else { continue };
            if slot.holders.contains(&id) && !keep(i, seq) {
                slot.holders.retain(|&h| h != id);
                dropped.push(i);
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nobody(_: u64, _: usize, _: u64) -> bool {
        false
    }

    fn everybody(_: u64, _: usize, _: u64) -> bool {
        true
    }

    fn yes() -> bool {
        true
    }

    /// A window of one slot, holding batch 0 for consumer 7, and `lag` lag
    /// slots.
    fn window_of_one_held(lag: usize) -> Slots {
        let mut s = Slots::new(1);
        s.add_lag_slots(lag);
        let i = s.take_free(&everybody, &yes, &mut |_| true).unwrap();
        s.fill(i, 0, 1, vec![7]);
        s
    }

    #[test]
    fn lag_slots_are_not_used_unless_wanted() {
        let mut s = window_of_one_held(2);
        let mut reserve = |_| true;
        // Everyone is a window behind: back-pressure, as without lag slots.
        assert_eq!(s.take_free(&everybody, &|| false, &mut reserve), None);
        assert_eq!(s.take_free(&everybody, &yes, &mut reserve), Some(1));
    }

    #[test]
    fn window_slots_go_first_oldest_batch_first() {
        let mut s = Slots::new(3);
        s.add_lag_slots(2);
        let mut never = |_| panic!("no lag slot is needed");
        for seq in 0..3 {
            let i = s.take_free(&nobody, &yes, &mut never).unwrap();
            s.fill(i, seq, 1, vec![1]);
        }
        // All released: the slot of batch 0 is reused first.
        assert_eq!(s.take_free(&nobody, &yes, &mut never), Some(0));
        assert_eq!(s.find(0), None);
        assert_eq!(s.find(1), Some(1));
    }

    #[test]
    fn lag_slots_are_used_only_when_the_window_is_held_and_reused_in_order() {
        let mut s = Slots::new(2);
        s.add_lag_slots(3);
        let reserved = std::cell::RefCell::new(Vec::new());
        let mut reserve = |i| {
            reserved.borrow_mut().push(i);
            true
        };
        for seq in 0..4 {
            let i = s.take_free(&everybody, &yes, &mut reserve).unwrap();
            s.fill(i, seq, 1, vec![7]);
        }
        assert_eq!(*reserved.borrow(), vec![2, 3]);
        assert_eq!(s.lag_in_use(), 2);
        // Everything held: the last fresh lag slot, then nothing.
        let i = s.take_free(&everybody, &yes, &mut reserve).unwrap();
        s.fill(i, 4, 1, vec![7]);
        assert_eq!(s.take_free(&everybody, &yes, &mut reserve), None);
        // The laggard catches up: window slots first, then the oldest lag slot.
        let mut taken = Vec::new();
        let new_ones_held = |_: u64, _: usize, seq: u64| seq >= 5;
        for seq in 5..8 {
            let i = s.take_free(&new_ones_held, &yes, &mut reserve).unwrap();
            s.fill(i, seq, 1, vec![7]);
            taken.push(i);
        }
        assert_eq!(taken, vec![0, 1, 2]);
        assert_eq!(s.take_free(&new_ones_held, &yes, &mut reserve), Some(3));
        assert_eq!(
            *reserved.borrow(),
            vec![2, 3, 4],
            "no slot was reserved twice"
        );
    }

    #[test]
    fn refused_memory_ends_the_budget_and_out_of_order_releases_are_found() {
        let mut s = Slots::new(1);
        s.add_lag_slots(3);
        let calls = std::cell::Cell::new(0);
        let mut refuse_third = |_| {
            calls.set(calls.get() + 1);
            calls.get() < 3
        };
        for seq in 0..3 {
            let i = s.take_free(&everybody, &yes, &mut refuse_third).unwrap();
            s.fill(i, seq, 1, vec![7]);
        }
        assert_eq!(s.take_free(&everybody, &yes, &mut refuse_third), None);
        assert_eq!(calls.get(), 3);
        assert_eq!(s.take_free(&everybody, &yes, &mut refuse_third), None);
        assert_eq!(calls.get(), 3, "a refused reservation is not retried");
        // Batch 2 (the newest lag batch) released out of order.
        let only_2_released = |_: u64, _: usize, seq: u64| seq != 2;
        assert_eq!(
            s.take_free(&only_2_released, &yes, &mut refuse_third),
            Some(2)
        );
    }

    #[test]
    fn a_lag_slot_given_back_unfilled_is_not_lost() {
        let mut s = window_of_one_held(1);
        let lag = s.take_free(&everybody, &yes, &mut |_| true).unwrap();
        assert_eq!(lag, 1);
        s.give_back(lag);
        assert_eq!(s.take_free(&everybody, &yes, &mut |_| false), Some(1));
    }

    #[test]
    fn a_holder_is_dropped_where_it_is_not_kept() {
        let mut s = Slots::new(3);
        for seq in 0..3 {
            s.fill(seq as usize, seq, 1, vec![1, 2]);
        }
        let dropped = s.drop_holder(2, &|_, seq| seq == 1);
        assert_eq!(dropped, vec![0, 2]);
        assert_eq!(s.get(1).holders, vec![1, 2]);
        assert_eq!(s.get(0).holders, vec![1]);
    }
}
