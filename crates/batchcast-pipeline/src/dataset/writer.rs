//! [`WebDatasetWriter`]: writes a WebDataset shard (for tests, demos and
//! converting small datasets).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::PipelineError;

/// Writes one WebDataset `.tar` shard: each sample is a `KEY.EXT` image member
/// followed by a `KEY.cls` member holding its label as decimal text.
///
/// ```no_run
/// # fn main() -> Result<(), batchcast_pipeline::PipelineError> {
/// # let jpeg_bytes: Vec<u8> = Vec::new();
/// use batchcast_pipeline::WebDatasetWriter;
/// let mut w = WebDatasetWriter::create("shard-000000.tar".as_ref())?;
/// w.add_sample("000000", "jpg", &jpeg_bytes, 3)?;
/// w.finish()?;
/// # Ok(()) }
/// ```
pub struct WebDatasetWriter {
    path: PathBuf,
    builder: tar::Builder<BufWriter<File>>,
    samples: usize,
}

impl WebDatasetWriter {
    /// Creates (or truncates) the shard file at `path`.
    ///
    /// # Errors
    /// The file cannot be created.
    pub fn create(path: &Path) -> Result<WebDatasetWriter, PipelineError> {
        let file = File::create(path).map_err(|e| PipelineError::write(path, e))?;
        Ok(WebDatasetWriter {
            path: path.to_path_buf(),
            builder: tar::Builder::new(BufWriter::new(file)),
            samples: 0,
        })
    }

    /// Appends a sample: `KEY.image_ext` with `image` as content, and
    /// `KEY.cls` with `label`. `key` must not contain a dot in its file name
    /// part (WebDataset splits the key at the first dot).
    ///
    /// # Errors
    /// A key with a dot in its file name, or a write error.
    pub fn add_sample(
        &mut self,
        key: &str,
        image_ext: &str,
        image: &[u8],
        label: i64,
    ) -> Result<(), PipelineError> {
        let name = key.rsplit('/').next().unwrap_or(key);
        if name.is_empty() || name.contains('.') {
            return Err(PipelineError::InvalidConfig(format!(
                "WebDataset key {key:?} must be non-empty and have no dot in its file name"
            )));
        }
        self.add_member(&format!("{key}.{image_ext}"), image)?;
        self.add_member(&format!("{key}.cls"), label.to_string().as_bytes())?;
        self.samples += 1;
        Ok(())
    }

    /// Appends one raw member (any name and content), e.g. to build odd shards
    /// in tests.
    ///
    /// # Errors
    /// A name the tar format cannot store, or a write error.
    pub fn add_member(&mut self, name: &str, data: &[u8]) -> Result<(), PipelineError> {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mtime(0);
        self.builder
            .append_data(&mut header, name, data)
            .map_err(|e| PipelineError::write(&self.path, e))
    }

    /// Number of samples added so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Writes the end-of-archive marker and flushes; returns the shard path.
    ///
    /// # Errors
    /// A write error.
    pub fn finish(self) -> Result<PathBuf, PipelineError> {
        let path = self.path;
        let mut inner = self
            .builder
            .into_inner()
            .map_err(|e| PipelineError::write(&path, e))?;
        inner.flush().map_err(|e| PipelineError::write(&path, e))?;
        Ok(path)
    }
}
