//! Image datasets through the native pipeline (batchcast-pipeline).

use std::path::Path;

use anyhow::{bail, Result};

use super::BatchSource;

/// Opens an image dataset as a batch source.
pub fn open(path: &Path, _batch_size: u64, _workers: usize) -> Result<Box<dyn BatchSource>> {
    bail!(
        "serving images from {} needs the native pipeline, which is not built in yet",
        path.display()
    )
}
