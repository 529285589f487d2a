//! Metrics as CSV into a file, replaced whole; the rows are the store's
//! [`metrics_csv`].

use std::io::Write;
use std::path::{Path, PathBuf};

pub use batchcast_store::metrics_csv;

use crate::{Result, StoreError};
use crate::{RunId, Store};

/// [`metrics_csv`] into the file `path`, which is replaced only once the
/// whole export is written: a temporary file beside it is renamed over it,
/// so a failed export (a run that does not exist, a full disk) leaves an
/// earlier file as it was. A symbolic link is followed; an existing file's
/// permissions are kept.
pub fn metrics_csv_file(
    store: &Store,
    runs: &[RunId],
    keys: &[String],
    path: &Path,
) -> Result<u64> {
    let dest = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            StoreError::Export(format!(
                "{} is not a file name; give --csv a file",
                path.display()
            ))
        })?;
    let tmp: PathBuf = dest.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(StoreError::export_file("cannot create", &tmp))?;
    let written = (|| {
        if let Ok(meta) = std::fs::metadata(&dest) {
            file.set_permissions(meta.permissions())
                .map_err(StoreError::export_file(
                    "cannot set the permissions of",
                    &tmp,
                ))?;
        }
        let mut w = std::io::BufWriter::new(&file);
        let rows = metrics_csv(store, runs, keys, &mut w)?;
        w.flush()
            .map_err(StoreError::export_file("cannot write", &tmp))?;
        drop(w);
        file.sync_all()
            .map_err(StoreError::export_file("cannot write", &tmp))?;
        std::fs::rename(&tmp, &dest)
            .map_err(StoreError::export_file("cannot move into place", &dest))?;
        Ok(rows)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
