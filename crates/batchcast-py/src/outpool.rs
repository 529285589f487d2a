//! Reused memory for a consumer's augmented batches.
//!
//! A fresh float32 batch (40 MB for 64 images of 224 x 224) pays a page
//! fault on the first touch of every page, which costs about as much as
//! augmenting into it. [`OutPool`] keeps the buffers of batches that are
//! gone and hands them out again: a buffer lent out is owned by the
//! [`Keepalive`] of the [`ArrayView`](crate::dlpack::ArrayView) (and of every
//! tensor made from it through DLPack), whose last drop, when PyTorch or
//! NumPy frees the last array viewing it, gives the buffer back. So a
//! buffer is reused only when nothing can see it any more; a training loop
//! that keeps its batches simply gets fresh ones. (Tested from Python:
//! `tests/python/test_augment.py`, this crate has no Rust test binary.)

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

use batchcast::Keepalive;

/// Free buffers, at most `keep` of them.
pub(crate) struct OutPool {
    free: Mutex<Vec<Vec<u64>>>,
    keep: usize,
}

impl OutPool {
    pub(crate) fn new(keep: usize) -> Arc<OutPool> {
        Arc::new(OutPool {
            free: Mutex::new(Vec::new()),
            keep,
        })
    }

    /// A buffer of at least `bytes` bytes, 8-byte aligned: a returned one
    /// that is large enough, else a new one.
    pub(crate) fn take(self: &Arc<Self>, bytes: usize) -> Lent {
        let words = bytes.div_ceil(8);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            free.iter()
                .position(|b| b.len() >= words)
                .map(|i| free.swap_remove(i))
        };
        Lent {
            words: reused.unwrap_or_else(|| vec![0u64; words]),
            bytes,
            pool: Arc::downgrade(self),
        }
    }

    fn give_back(&self, words: Vec<u64>) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < self.keep {
            free.push(words);
        }
    }
}

/// A buffer lent by an [`OutPool`]; given back when dropped.
pub(crate) struct Lent {
    words: Vec<u64>,
    bytes: usize,
    pool: Weak<OutPool>,
}

impl Lent {
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `words` owns at least `bytes` initialised bytes (it holds
        // `bytes.div_ceil(8)` u64s), u8 has no alignment needs, and the
        // borrow of `self` keeps it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.bytes) }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: as in `bytes_mut`, shared.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.bytes) }
    }

    /// The keepalive that owns this buffer from now on (its heap memory
    /// does not move), and gives it back when its last clone is dropped.
    pub(crate) fn into_keepalive(self) -> Keepalive {
        Arc::new(self) as Arc<dyn Any + Send + Sync>
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(std::mem::take(&mut self.words));
        }
    }
}
