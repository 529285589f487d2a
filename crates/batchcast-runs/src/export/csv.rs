//! Metrics as CSV: one row per point, long format.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Result, StoreError};
use crate::{RunId, Store};

/// Writes every point of `keys` (all of each run's metrics when empty) of
/// `runs` as CSV: `run_id, experiment, workload, run, key, step, ts_ms,
/// elapsed_s, value`, where `elapsed_s` counts from the run's start so
/// that runs line up. Returns the rows written.
pub fn metrics_csv(store: &Store, runs: &[RunId], keys: &[String], out: impl Write) -> Result<u64> {
    let io = |e: std::io::Error| StoreError::Export(e.to_string());
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "run_id",
        "experiment",
        "workload",
        "run",
        "key",
        "step",
        "ts_ms",
        "elapsed_s",
        "value",
    ])
    .map_err(|e| io(e.into()))?;
    let mut rows = 0;
    for &id in runs {
        let row = store.run(id)?;
        let start = row.run.start_ms;
        let run_keys = if keys.is_empty() {
            store.metric_keys(id)?
        } else {
            keys.to_vec()
        };
        for key in &run_keys {
            store.for_each_point(id, key, |step, ts_ms, value| {
                let elapsed = start
                    .map(|s| format!("{:.3}", (ts_ms - s) as f64 / 1000.0))
                    .unwrap_or_default();
                w.write_record([
                    id.to_string(),
                    row.experiment.clone(),
                    row.workload.clone(),
                    row.run.name.clone(),
                    key.clone(),
                    step.to_string(),
                    ts_ms.to_string(),
                    elapsed,
                    value.to_string(),
                ])
                .map_err(|e| io(e.into()))?;
                rows += 1;
                Ok::<(), StoreError>(())
            })?;
        }
    }
    w.flush().map_err(io)?;
    Ok(rows)
}

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
    let err = |what: &str, p: &Path, e: std::io::Error| {
        StoreError::Export(format!("{what} {}: {e}", p.display()))
    };
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
        .map_err(|e| err("cannot create", &tmp, e))?;
    let written = (|| {
        if let Ok(meta) = std::fs::metadata(&dest) {
            file.set_permissions(meta.permissions())
                .map_err(|e| err("cannot set the permissions of", &tmp, e))?;
        }
        let mut w = std::io::BufWriter::new(&file);
        let rows = metrics_csv(store, runs, keys, &mut w)?;
        w.flush().map_err(|e| err("cannot write", &tmp, e))?;
        drop(w);
        file.sync_all().map_err(|e| err("cannot write", &tmp, e))?;
        std::fs::rename(&tmp, &dest).map_err(|e| err("cannot move into place", &dest, e))?;
        Ok(rows)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
