//! What the store's tests share: a store in a temporary directory with one
//! workload, and the runs, points and parameters they add to it.

#![allow(dead_code)]

use std::path::PathBuf;

use batchcast_store::{
    MetricPoint, NewRun, ParamSource, Recorder, RecorderHandle, RunFilter, RunId, Store, WorkloadId,
};

/// A new store in a temporary directory, with experiment "exp" and its
/// workload "w".
pub struct Fixture {
    /// The temporary directory the store is in (removed on drop).
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub store: Store,
    pub w: WorkloadId,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::at("runs.sqlite")
    }

    /// The store made at `file` under the temporary directory, with the
    /// directories `file` names.
    pub fn at(file: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        let store = Store::open(&path).unwrap();
        let e = store.experiment("exp").unwrap();
        let w = store.workload(e, "w", None, 0).unwrap();
        Fixture {
            dir,
            path,
            store,
            w,
        }
    }

    /// A recorder writing to this store.
    pub fn recorder(&self) -> Recorder {
        Recorder::start(&self.path).unwrap()
    }

    /// Sends what `record` sends through a handle of a new recorder,
    /// finishes the recorder (every point committed), and opens the store
    /// read-only.
    pub fn record_then_read(&self, record: impl FnOnce(&RecorderHandle)) -> Store {
        let rec = self.recorder();
        record(&rec.handle());
        rec.finish().unwrap();
        Store::open_read_only(&self.path).unwrap()
    }

    /// Adds run `name` to "w".
    pub fn run(&mut self, name: &str) -> RunId {
        self.store.add_run(self.w, &new_run(name)).unwrap().0
    }
}

/// Value `value` of metric `key` of run `r`, at step `step` and time `ts_ms`.
pub fn point(r: RunId, key: impl Into<String>, step: i64, ts_ms: i64, value: f64) -> MetricPoint {
    MetricPoint {
        run_id: r,
        key: key.into(),
        step,
        ts_ms,
        value,
    }
}

/// The steps of `points`, in their order.
pub fn steps_of(points: &[MetricPoint]) -> Vec<i64> {
    points.iter().map(|p| p.step).collect()
}

/// The names of the runs that a search for `search` finds, newest first.
pub fn found(store: &Store, search: &str) -> Vec<String> {
    let filter = RunFilter {
        search: Some(search.into()),
        ..Default::default()
    };
    let runs = store.runs(&filter).unwrap();
    runs.into_iter().map(|r| r.run.name).collect()
}

/// Logs parameter `key` = `value` of run `r`, as the run itself would.
pub fn log_param(store: &Store, r: RunId, key: &str, value: &str) {
    store.log_param(r, key, value, ParamSource::Logged).unwrap();
}

pub fn new_run(name: &str) -> NewRun {
    NewRun {
        name: name.into(),
        command: vec![
            "python".into(),
            "train.py".into(),
            "--lr".into(),
            "0.1".into(),
        ],
        params: vec![("lr".into(), "0.1".into())],
        devices: vec![],
        collocation: "-".into(),
        listeners: vec!["process".into()],
        host: "testhost".into(),
        plan_file: Some("plan.csv".into()),
        plan_row: Some(2),
    }
}
