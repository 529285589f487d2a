//! Helpers shared by batchcast-runs' integration tests.

mod memory;

pub use memory::*;
