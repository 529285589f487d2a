//! Runs as an MLflow file store: the directory layout that MLflow's
//! `FileStore` reads (`mlflow ui --backend-store-uri DIR`,
//! `mlflow.search_runs`, `mlflow migrate-filestore` to move it into a
//! database).
//!
//! ```text
//! DIR/0/meta.yaml                           the Default experiment MLflow expects
//! DIR/<exp>/meta.yaml                       one experiment per batchcast experiment
//! DIR/<exp>/<run>/meta.yaml                 status, start and end, name
//! DIR/<exp>/<run>/params/<key>              the value
//! DIR/<exp>/<run>/metrics/<key>             one line per point: "ts_ms value step"
//! DIR/<exp>/<run>/tags/<key>                mlflow.* and batchcast.* tags
//! DIR/<exp>/<run>/artifacts/{stdout,stderr,events}.txt
//! ```
//!
//! Exporting is idempotent: an experiment is found again by name and a run
//! keeps its id (derived from its start time and its id in the store), so a
//! second export of the same run replaces it instead of adding a copy. A run
//! is written into a hidden directory and renamed into place, so a reader
//! never sees half a run.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use batchcast_store::file_uri;
use serde::Serialize;

use crate::{LogStream, Run, RunId, RunRow, RunStatus, Store};
use crate::{Result, StoreError};

/// A `meta.yaml` larger than this is not one MLflow wrote.
const MAX_META_BYTES: u64 = 1 << 20;

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MlflowExport {
    /// MLflow experiment ids, one per batchcast experiment exported.
    pub experiments: Vec<String>,
    /// MLflow run ids, in the order the runs were given.
    pub runs: Vec<String>,
    /// Metric points written.
    pub points: u64,
    /// Metric and parameter names MLflow would refuse, with the names they
    /// were written under.
    pub renamed: Vec<(String, String)>,
}

/// Writes `runs` of `store` into the MLflow file store at `dir` (made when
/// missing; an existing directory must be an MLflow file store or empty).
pub fn to_mlflow(store: &Store, runs: &[RunId], dir: &Path) -> Result<MlflowExport> {
    let root = prepare_root(dir)?;
    let mut out = MlflowExport::default();
    let mut experiments: Vec<(String, String)> = Vec::new();
    for &id in runs {
        let row = store.run(id)?;
        let exp_id = match experiments.iter().find(|(n, _)| *n == row.experiment) {
            Some((_, e)) => e.clone(),
            None => {
                let e = experiment_id(&root, &row.experiment)?;
                experiments.push((row.experiment.clone(), e.clone()));
                out.experiments.push(e.clone());
                e
            }
        };
        let run_id = write_run(store, &root, &exp_id, &row, &mut out)?;
        out.runs.push(run_id);
    }
    Ok(out)
}

/// The name MLflow accepts for a metric, parameter or tag `key`: letters,
/// digits, `_ - . / space`, and no empty, `.` or `..` path part (MLflow's
/// own rule, which also keeps every file inside the run's directory).
pub fn mlflow_key(key: &str) -> String {
    let clean: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-. /".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let parts: Vec<&str> = clean.split('/').collect();
    let mut name = parts
        .iter()
        .map(|p| {
            if p.is_empty() || *p == "." || *p == ".." {
                "_"
            } else {
                p
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    name.truncate(250);
    name
}

/// Makes `dir` an MLflow file store with its Default experiment, or checks
/// that it already is one; returns its absolute path.
fn prepare_root(dir: &Path) -> Result<PathBuf> {
    if dir.exists() {
        let meta = dir.join("0").join("meta.yaml");
        let empty = fs::read_dir(dir)
            .map_err(StoreError::export_file("cannot read", dir))?
            .next()
            .is_none();
        if !empty && !meta.is_file() {
            return Err(StoreError::Export(format!(
                "{} is neither empty nor an MLflow file store (it has no 0/meta.yaml); \
                 choose a new directory for --mlflow",
                dir.display()
            )));
        }
    }
    fs::create_dir_all(dir).map_err(StoreError::export_file("cannot create", dir))?;
    let root = fs::canonicalize(dir).map_err(StoreError::export_file("cannot resolve", dir))?;
    if !root.join("0").join("meta.yaml").is_file() {
        write_experiment(&root, "0", "Default")?;
    }
    Ok(root)
}

/// The id of the experiment called `name` in the file store, made when
/// there is none: one more than the largest numeric id there.
fn experiment_id(root: &Path, name: &str) -> Result<String> {
    let mut largest = 0u64;
    for entry in fs::read_dir(root).map_err(StoreError::export_file("cannot read", root))? {
        let entry = entry.map_err(StoreError::export_file("cannot read", root))?;
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        largest = largest.max(id);
        let meta = entry.path().join("meta.yaml");
        if read_meta_name(&meta)?.as_deref() == Some(name) {
            return Ok(id.to_string());
        }
    }
    let id = (largest + 1).to_string();
    write_experiment(root, &id, name)?;
    Ok(id)
}

/// The `name` field of an experiment's `meta.yaml`, if it has one.
fn read_meta_name(meta: &Path) -> Result<Option<String>> {
    #[derive(serde::Deserialize)]
    struct Meta {
        name: Option<String>,
    }
    if !meta.exists() {
        return Ok(None);
    }
    let text =
        batchcast_store::bounded::read_text(meta, MAX_META_BYTES).map_err(|e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => {
                StoreError::export_file("refusing to read", meta)(e)
            }
            _ => StoreError::export_file("cannot read", meta)(e),
        })?;
    let parsed: Meta = serde_norway::from_str(&text).map_err(|e| {
        StoreError::Export(format!(
            "cannot parse {}: {e} (is this directory an MLflow file store?)",
            meta.display()
        ))
    })?;
    Ok(parsed.name)
}

fn write_yaml(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_norway::to_string(value)
        .map_err(|e| StoreError::Export(format!("cannot encode {}: {e}", path.display())))?;
    fs::write(path, text).map_err(StoreError::export_file("cannot write", path))
}

fn write_experiment(root: &Path, id: &str, name: &str) -> Result<()> {
    #[derive(Serialize)]
    struct ExperimentMeta<'a> {
        artifact_location: String,
        creation_time: i64,
        experiment_id: &'a str,
        last_update_time: i64,
        lifecycle_stage: &'a str,
        name: &'a str,
    }
    let dir = root.join(id);
    fs::create_dir_all(&dir).map_err(StoreError::export_file("cannot create", &dir))?;
    let now = crate::now_ms();
    let meta = ExperimentMeta {
        artifact_location: file_uri(&dir),
        creation_time: now,
        experiment_id: id,
        last_update_time: now,
        lifecycle_stage: "active",
        name,
    };
    write_yaml(&dir.join("meta.yaml"), &meta)
}

/// MLflow's `RunStatus` numbers.
fn mlflow_status(status: RunStatus) -> u8 {
    match status {
        RunStatus::Running => 1,
        RunStatus::Pending => 2,
        RunStatus::Finished => 3,
        RunStatus::Failed => 4,
        RunStatus::Killed => 5,
    }
}

/// Writes one run into `root/exp_id/`, replacing an earlier export of it;
/// returns its MLflow run id.
fn write_run(
    store: &Store,
    root: &Path,
    exp_id: &str,
    row: &RunRow,
    out: &mut MlflowExport,
) -> Result<String> {
    let run = &row.run;
    let run_id = format!("{:016x}{:016x}", run.start_ms.unwrap_or(0), run.id);
    let exp_dir = root.join(exp_id);
    let tmp = exp_dir.join(format!(".{run_id}.tmp{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    let written = fill_run_dir(store, &tmp, &run_id, exp_id, row, out);
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let dest = exp_dir.join(&run_id);
    let old = exp_dir.join(format!(".{run_id}.old{}", std::process::id()));
    if dest.exists() {
        fs::rename(&dest, &old).map_err(StoreError::export_file("cannot replace", &dest))?;
    }
    fs::rename(&tmp, &dest).map_err(StoreError::export_file("cannot move into place", &dest))?;
    let _ = fs::remove_dir_all(&old);
    Ok(run_id)
}

/// Fills `dir` with one run as MLflow's file store lays it out: its
/// `meta.yaml`, tags, params, metrics and artifacts (the job's output and
/// the run's events).
fn fill_run_dir(
    store: &Store,
    dir: &Path,
    run_id: &str,
    exp_id: &str,
    row: &RunRow,
    out: &mut MlflowExport,
) -> Result<()> {
    let run = &row.run;
    for sub in ["params", "metrics", "tags", "artifacts"] {
        let d = dir.join(sub);
        fs::create_dir_all(&d).map_err(StoreError::export_file("cannot create", &d))?;
    }
    let user = run
        .env
        .get("user")
        .and_then(|u| u.as_str())
        .unwrap_or("batchcast");
    write_meta(dir, run_id, exp_id, run, user)?;
    write_values(&dir.join("tags"), &tags(row, user), out)?;
    let params: Vec<(String, String)> = store
        .params(run.id)?
        .into_iter()
        .map(|p| (p.key, p.value))
        .collect();
    write_values(&dir.join("params"), &params, out)?;
    write_metrics(store, &dir.join("metrics"), run.id, out)?;
    write_artifacts(store, &dir.join("artifacts"), run.id)
}

/// The run's `meta.yaml`, naming where its artifacts will be once `dir` is
/// moved into place as `run_id`.
fn write_meta(dir: &Path, run_id: &str, exp_id: &str, run: &Run, user: &str) -> Result<()> {
    #[derive(Serialize)]
    struct RunMeta<'a> {
        artifact_uri: String,
        end_time: Option<i64>,
        entry_point_name: &'a str,
        experiment_id: &'a str,
        lifecycle_stage: &'a str,
        run_id: &'a str,
        run_name: &'a str,
        run_uuid: &'a str,
        source_name: &'a str,
        source_type: u8,
        source_version: &'a str,
        start_time: Option<i64>,
        status: u8,
        tags: [u8; 0],
        user_id: &'a str,
    }
    let final_dir = dir.with_file_name(run_id);
    write_yaml(
        &dir.join("meta.yaml"),
        &RunMeta {
            artifact_uri: file_uri(&final_dir.join("artifacts")),
            end_time: run.end_ms,
            entry_point_name: "",
            experiment_id: exp_id,
            lifecycle_stage: "active",
            run_id,
            run_name: &run.name,
            run_uuid: run_id,
            source_name: "",
            source_type: 4,
            source_version: "",
            start_time: run.start_ms,
            status: mlflow_status(run.status),
            tags: [],
            user_id: user,
        },
    )
}

/// The run's tags: MLflow's own and batchcast's.
fn tags(row: &RunRow, user: &str) -> Vec<(String, String)> {
    let run = &row.run;
    let mut tags = vec![
        ("mlflow.runName", run.name.clone()),
        ("mlflow.user", user.to_string()),
        ("mlflow.source.type", "LOCAL".to_string()),
        ("mlflow.source.name", run.command.join(" ")),
        ("batchcast.experiment", row.experiment.clone()),
        ("batchcast.workload", row.workload.clone()),
        ("batchcast.run_id", run.id.to_string()),
        ("batchcast.status", run.status.to_string()),
        ("batchcast.host", run.host.clone()),
        ("batchcast.devices", run.devices.join(",")),
        ("batchcast.collocation", run.collocation.clone()),
    ];
    if let Some(code) = run.exit_code {
        tags.push(("batchcast.exit_code", code.to_string()));
    }
    if let Some(m) = &run.message {
        tags.push(("batchcast.message", m.clone()));
    }
    tags.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// One file per metric of `run` in `dir`, a `TIMESTAMP VALUE STEP` line
/// per point.
fn write_metrics(store: &Store, dir: &Path, run: RunId, out: &mut MlflowExport) -> Result<()> {
    let keys = store.metric_keys(run)?;
    for (key, name) in keys.iter().zip(file_names(&keys)) {
        let path = named_file(dir, key, &name, out)?;
        let file =
            fs::File::create(&path).map_err(StoreError::export_file("cannot create", &path))?;
        let mut w = BufWriter::new(file);
        store.for_each_point(run, key, |step, ts, value| {
            writeln!(w, "{ts} {value} {step}")
                .map_err(StoreError::export_file("cannot write", &path))?;
            out.points += 1;
            Ok::<(), StoreError>(())
        })?;
        w.flush()
            .map_err(StoreError::export_file("cannot write", &path))?;
    }
    Ok(())
}

/// The job's `stdout.txt` and `stderr.txt` in `dir`, and `events.txt`
/// when the run has events.
fn write_artifacts(store: &Store, dir: &Path, run: RunId) -> Result<()> {
    for stream in [LogStream::Stdout, LogStream::Stderr] {
        let path = dir.join(format!("{}.txt", stream.as_str()));
        let file =
            fs::File::create(&path).map_err(StoreError::export_file("cannot create", &path))?;
        let mut w = BufWriter::new(file);
        store.for_each_log_chunk(run, stream, |chunk| {
            w.write_all(chunk)
                .map_err(StoreError::export_file("cannot write", &path))
        })?;
        w.flush()
            .map_err(StoreError::export_file("cannot write", &path))?;
    }
    let events = store.events(run)?;
    if !events.is_empty() {
        let text: String = events
            .iter()
            .map(|e| format!("{} {} {}\n", e.ts_ms, e.source, e.message))
            .collect();
        let path = dir.join("events.txt");
        fs::write(&path, text).map_err(StoreError::export_file("cannot write", &path))?;
    }
    Ok(())
}

/// The file name each of `keys` is written under, in order: its
/// [`mlflow_key`] (a `/` making a directory, as MLflow's own file store
/// does), unless that is taken by another key of the same run, as a file or
/// as a directory (`loss` beside `loss/val`, `a:b` beside `a_b`); then the
/// first free `NAME_1`, `NAME_2`, ... Every key gets a file of its own.
/// Deeper names and names MLflow accepts as they are choose first, so
/// `loss/val` and `a_b` keep theirs.
fn file_names(keys: &[String]) -> Vec<String> {
    use std::collections::HashSet;
    let bases: Vec<String> = keys.iter().map(|k| mlflow_key(k)).collect();
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(bases[i].matches('/').count()),
            bases[i] != keys[i],
        )
    });
    // Names taken by files, and by the directories above them. A name is
    // placed after every deeper one, so none of its own directories can be
    // a file already.
    let mut files: HashSet<String> = HashSet::new();
    let mut dirs: HashSet<String> = HashSet::new();
    let mut names = vec![String::new(); keys.len()];
    for i in order {
        let base = &bases[i];
        let mut name = base.clone();
        let mut n = 1u64;
        while files.contains(&name) || dirs.contains(&name) {
            let mut stem = base.clone();
            stem.truncate(230);
            name = format!("{stem}_{n}");
            n += 1;
        }
        for (at, _) in name.match_indices('/') {
            dirs.insert(name[..at].to_string());
        }
        files.insert(name.clone());
        names[i] = name;
    }
    names
}

/// The file `name` under `dir` for `key` (its parent directories made),
/// noting in `out` when it is not the key itself.
fn named_file(dir: &Path, key: &str, name: &str, out: &mut MlflowExport) -> Result<PathBuf> {
    if name != key {
        out.renamed.push((key.to_string(), name.to_string()));
    }
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(StoreError::export_file("cannot create", parent))?;
    }
    Ok(path)
}

/// Writes each `(key, value)` into a file of its own under `dir`.
fn write_values(dir: &Path, values: &[(String, String)], out: &mut MlflowExport) -> Result<()> {
    let keys: Vec<String> = values.iter().map(|(k, _)| k.clone()).collect();
    for ((key, value), name) in values.iter().zip(file_names(&keys)) {
        let path = named_file(dir, key, &name, out)?;
        fs::write(&path, value).map_err(StoreError::export_file("cannot write", &path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_mlflow_refuses_are_renamed_inside_the_run() {
        for (key, want) in [
            ("proc/cpu_percent", "proc/cpu_percent"),
            (
                "gpu/0/DCGM_FI_PROF_SM_ACTIVE",
                "gpu/0/DCGM_FI_PROF_SM_ACTIVE",
            ),
            ("../../etc/passwd", "_/_/etc/passwd"),
            ("/abs", "_/abs"),
            ("a//b", "a/_/b"),
            ("loss:val", "loss_val"),
            ("é", "_"),
            ("", "_"),
        ] {
            assert_eq!(mlflow_key(key), want, "{key:?}");
        }
        assert!(mlflow_key(&"x".repeat(1000)).len() <= 250);
    }

    fn names(keys: &[&str]) -> Vec<String> {
        file_names(&keys.iter().map(|k| k.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn every_key_gets_a_file_of_its_own() {
        assert_eq!(names(&["loss", "loss/val"]), ["loss_1", "loss/val"]);
        assert_eq!(names(&["a:b", "a_b"]), ["a_b_1", "a_b"]);
        assert_eq!(names(&["a:b", "a;b", "a_b_1"]), ["a_b", "a_b_2", "a_b_1"]);
        assert_eq!(names(&["x/y", "x", "x/y/z"]), ["x/y_1", "x_1", "x/y/z"]);
        let long = "k".repeat(300);
        let got = names(&[&long, &format!("{long}:")]);
        assert_ne!(got[0], got[1]);
        assert!(got.iter().all(|n| n.len() <= 250), "{got:?}");
    }

    #[test]
    fn file_uris_escape_what_a_uri_cannot_hold() {
        assert_eq!(file_uri(Path::new("/tmp/a b%/c")), "file:///tmp/a%20b%25/c");
    }
}
