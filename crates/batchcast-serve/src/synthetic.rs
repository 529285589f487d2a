//! A synthetic source: every sample is its id plus a payload derived from
//! the id, made at a chosen CPU cost. Consumers can check every byte they
//! receive against the id (see [`expected_byte`]), which is what the
//! multi-process tests and `batchcast consume --verify` do.

use std::time::Instant;

use batchcast::{DType, LeafSpec, Node};

use crate::error::Result;
use crate::source::BatchSource;

/// The payload byte `k` of sample `id`.
pub fn expected_byte(id: u64, k: usize) -> u8 {
    (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ (k as u8).wrapping_mul(31)
}

/// Settings of the synthetic source.
#[derive(Debug, Clone)]
pub struct Synthetic {
    /// Samples per epoch.
    pub samples: u64,
    /// Rows per batch.
    pub batch_size: u64,
    /// Payload bytes per sample.
    pub sample_bytes: usize,
    /// CPU microseconds of work per sample (a stand-in for decoding).
    pub work_us: f64,
    /// Threads that make the samples of a batch.
    pub workers: usize,
    /// Work iterations per microsecond, measured on this machine.
    pub iters_per_us: f64,
}

impl Synthetic {
    /// A source. `iters_per_us` is this machine's speed at the stand-in
    /// work ([`calibrate`]); measure it once, on an idle machine, and pass
    /// the same figure to every process that must do the same work.
    pub fn new(
        samples: u64,
        batch_size: u64,
        sample_bytes: usize,
        work_us: f64,
        workers: usize,
        iters_per_us: Option<f64>,
    ) -> Self {
        Synthetic {
            samples,
            batch_size,
            sample_bytes,
            work_us,
            workers: workers.max(1),
            iters_per_us: iters_per_us.unwrap_or_else(calibrate),
        }
    }

    /// Makes sample `id` into `out` (its payload).
    pub fn make(&self, id: u64, out: &mut [u8]) {
        let iters = (self.work_us * self.iters_per_us) as u64;
        let mut x = burn(id ^ 0x5DEE_CE66, iters);
        for (k, b) in out.iter_mut().enumerate() {
            *b = expected_byte(id, k);
        }
        // Keep the work observable so the optimiser cannot drop it.
        x ^= out.first().copied().unwrap_or(0) as u64;
        std::hint::black_box(x);
    }
}

fn burn(seed: u64, iters: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

/// Work iterations per microsecond on this core (median of 5 runs).
pub fn calibrate() -> f64 {
    let n = 1_000_000u64;
    let mut rates: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(burn(std::hint::black_box(7), n));
            n as f64 / (t0.elapsed().as_secs_f64() * 1e6).max(1e-3)
        })
        .collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    rates[2]
}

impl BatchSource for Synthetic {
    fn samples_per_epoch(&self) -> u64 {
        self.samples
    }

    fn batches(&self, _epoch: u64) -> Vec<Vec<u64>> {
        (0..self.samples)
            .step_by(self.batch_size as usize)
            .map(|s| (s..(s + self.batch_size).min(self.samples)).collect())
            .collect()
    }

    fn spec(&self, rows: u64) -> (Node, Vec<LeafSpec>) {
        (
            Node::Tuple(vec![Node::Leaf(0), Node::Leaf(1)]),
            vec![
                LeafSpec::array(DType::U8, vec![rows, self.sample_bytes as u64]),
                LeafSpec::array(DType::I64, vec![rows]),
            ],
        )
    }

    fn fill(&self, _epoch: u64, indices: &[u64], mut leaves: Vec<&mut [u8]>) -> Result<u64> {
        let ids_leaf = leaves.pop().unwrap_or_default();
        for (chunk, id) in ids_leaf.chunks_exact_mut(8).zip(indices) {
            chunk.copy_from_slice(&(*id as i64).to_le_bytes());
        }
        let payload = leaves.pop().unwrap_or_default();
        let sb = self.sample_bytes.max(1);
        let rows_per_worker = indices.len().div_ceil(self.workers).max(1);
        std::thread::scope(|s| {
            for (rows, ids) in payload
                .chunks_mut(rows_per_worker * sb)
                .zip(indices.chunks(rows_per_worker))
            {
                s.spawn(move || {
                    for (row, id) in rows.chunks_mut(sb).zip(ids) {
                        self.make(*id, row);
                    }
                });
            }
        });
        Ok(indices.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_every_sample_once_with_the_tail() {
        let s = Synthetic::new(10, 4, 8, 0.0, 2, Some(1.0));
        let b = s.batches(0);
        assert_eq!(b.len(), 3);
        assert_eq!(b.concat(), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn fill_writes_ids_and_checkable_payloads() {
        let s = Synthetic::new(10, 4, 16, 0.0, 2, Some(1.0));
        let mut payload = vec![0u8; 3 * 16];
        let mut ids = vec![0u8; 3 * 8];
        let rows = s.fill(0, &[4, 5, 6], vec![&mut payload, &mut ids]).unwrap();
        assert_eq!(rows, 3);
        assert_eq!(i64::from_le_bytes(ids[8..16].try_into().unwrap()), 5);
        for k in 0..16 {
            assert_eq!(payload[16 + k], expected_byte(5, k));
        }
    }
}
