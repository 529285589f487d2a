//! Records a `batchcast stalls` analysis (the JSON that
//! `python -m batchcast.stalls --json-out` writes) as one FINISHED run of
//! the experiment `stalls`, one workload per command, so that `batchcast
//! runs` and the dashboard show it beside the runs of `batchcast run`.
//!
//! The analysis is read into [`StallsReport`], typed, after its
//! `schema_version` is checked against [`SCHEMA_VERSIONS`] (the versions
//! this reader knows; an analysis without the field is version 1). Python
//! writes the version from `batchcast.stalls._report.SCHEMA_VERSION`;
//! `tests/data/stalls-report-v1.json` is an analysis of version 1 that the
//! tests of both sides read. Fields this reader does not use (the cores,
//! the spread of rounds, the notes) are left to the JSON.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::keys::{STALLS_MODE_FIGURES, STALLS_PREFIX};
use crate::{now_ms, MetricPoint, NewRun, ParamSource, RunId, RunStatus, Store, StoreError};

/// The largest analysis file read (it holds figures, not samples).
pub const MAX_REPORT_BYTES: u64 = 4 << 20;

/// The layout versions of the analysis this reader knows.
pub const SCHEMA_VERSIONS: [u64; 1] = [1];

/// What went wrong reading or recording an analysis.
#[derive(Debug, thiserror::Error)]
pub enum StallsError {
    /// The file could not be read (missing, unreadable, too large).
    #[error("cannot read the stalls analysis {path}: {source}; pass the file that `python -m batchcast.stalls --json-out` wrote")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not an analysis of a layout this reader knows.
    #[error("{path} is not a stalls analysis this batchcast reads: {source}")]
    File { path: PathBuf, source: ReportError },
    /// The analysis is not of a layout this reader knows.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// The run store refused it.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why an analysis's JSON is not one [`StallsReport`] of a known version.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Its `schema_version` is one this reader does not know.
    #[error(
        "its schema_version is {found}, and this batchcast reads version {}; record it with the \
         batchcast release whose Python package wrote it (the `batchcast` binary and \
         `pip show batchcast` must be the same release)",
        known_versions()
    )]
    UnknownVersion { found: String },
    /// A field is missing or of the wrong kind.
    #[error("{0} (was it written by `python -m batchcast.stalls`?)")]
    Layout(serde_json::Error),
}

/// A `batchcast stalls` analysis, the fields the run store records.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StallsReport {
    /// The training command analysed.
    pub command: Vec<String>,
    /// The regime (`prep-bound`, `fetch-bound`, `compute-bound`, ...).
    #[serde(default)]
    pub regime: Option<String>,
    /// The verdict in plain words.
    pub verdict: String,
    /// The figures of each mode measured (`synthetic`, `cold`, `warm`).
    pub modes: BTreeMap<String, ModeFigures>,
    /// K data-parallel processes under torchrun (`--nproc`).
    #[serde(default)]
    pub ddp: Option<ModeFigures>,
    /// Two copies held to one core together.
    #[serde(default)]
    pub timeshare: Option<ModeFigures>,
    /// The loader alone, with no training step.
    #[serde(default)]
    pub loader: Option<ModeFigures>,
    /// The stalls found, each a share of the real step.
    pub stalls: Vec<Stall>,
    /// Aggregate samples/s of N copies, predicted (and measured).
    pub predictions: Vec<Prediction>,
}

/// The figures of one mode; each named in [`STALLS_MODE_FIGURES`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModeFigures {
    pub steps_per_s: Option<f64>,
    pub samples_per_s: Option<f64>,
    pub step_s: Option<f64>,
    pub wait_mean: Option<f64>,
    pub wait_p50: Option<f64>,
    pub wait_p95: Option<f64>,
    pub cpu_per_1000: Option<f64>,
}

/// One data stall (`fetch`, `prep`, `fetch+prep`, `communication`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Stall {
    pub name: String,
    /// Seconds of each step spent waiting for it.
    pub per_step_s: f64,
    /// Its share of the real step.
    pub share: f64,
}

/// The prediction for `jobs` collocated copies.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Prediction {
    pub jobs: u32,
    /// Aggregate samples/s with a loader each.
    pub independent: f64,
    /// Aggregate samples/s reading one shared producer.
    pub shared: f64,
    /// What `--validate` measured, when it ran.
    #[serde(default)]
    pub measured: Option<Measured>,
}

/// Aggregate samples/s of copies measured together by `--validate`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Measured {
    pub independent: f64,
    pub shared: f64,
}

impl ModeFigures {
    /// Each figure with its name from [`STALLS_MODE_FIGURES`], in that order.
    pub fn named(&self) -> [(&'static str, Option<f64>); 7] {
        let [a, b, c, d, e, f, g] = STALLS_MODE_FIGURES;
        [
            (a, self.steps_per_s),
            (b, self.samples_per_s),
            (c, self.step_s),
            (d, self.wait_mean),
            (e, self.wait_p50),
            (f, self.wait_p95),
            (g, self.cpu_per_1000),
        ]
    }
}

impl StallsReport {
    /// The analysis in `value`, after checking its `schema_version` (none
    /// is version 1).
    pub fn from_value(value: &Value) -> Result<StallsReport, ReportError> {
        match value.get("schema_version") {
            None => {}
            Some(v) if v.as_u64().is_some_and(|v| SCHEMA_VERSIONS.contains(&v)) => {}
            Some(v) => {
                return Err(ReportError::UnknownVersion {
                    found: v.to_string(),
                })
            }
        }
        StallsReport::deserialize(value).map_err(ReportError::Layout)
    }
}

/// [`SCHEMA_VERSIONS`] in words: `1` or `1, 2`.
fn known_versions() -> String {
    let known: Vec<String> = SCHEMA_VERSIONS.iter().map(u64::to_string).collect();
    known.join(", ")
}

/// Reads the analysis in `report` and records it in the store at `store`.
pub fn record_file(store: &Path, report: &Path) -> Result<RunId, StallsError> {
    let read = |source| StallsError::Read {
        path: report.to_path_buf(),
        source,
    };
    let bad = |source| StallsError::File {
        path: report.to_path_buf(),
        source,
    };
    let text = crate::bounded::read_text(report, MAX_REPORT_BYTES).map_err(read)?;
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(ReportError::Layout(e)))?;
    let parsed = StallsReport::from_value(&value).map_err(bad)?;
    let mut store = Store::open(store)?;
    Ok(record_report(&mut store, &parsed)?)
}

/// The metric points of an analysis, `(key, value)`, in a stable order.
pub fn metrics(report: &StallsReport) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut modes: Vec<(&str, &ModeFigures)> =
        report.modes.iter().map(|(k, v)| (k.as_str(), v)).collect();
    for (name, figures) in [
        ("ddp", &report.ddp),
        ("loader", &report.loader),
        ("timeshared", &report.timeshare),
    ] {
        if let Some(f) = figures {
            modes.push((name, f));
        }
    }
    for (mode, figures) in modes {
        for (f, v) in figures.named() {
            if let Some(v) = v {
                out.push((format!("{STALLS_PREFIX}/{mode}/{f}"), v));
            }
        }
    }
    for s in &report.stalls {
        for (f, v) in [("per_step_s", s.per_step_s), ("share", s.share)] {
            out.push((format!("{STALLS_PREFIX}/{}/{f}", s.name), v));
        }
    }
    for p in &report.predictions {
        let measured = p.measured.as_ref();
        for (v, field) in [
            (Some(p.independent), "predicted_independent"),
            (Some(p.shared), "predicted_shared"),
            (measured.map(|m| m.independent), "measured_independent"),
            (measured.map(|m| m.shared), "measured_shared"),
        ] {
            if let Some(v) = v {
                let jobs = p.jobs;
                out.push((
                    format!("{STALLS_PREFIX}/jobs_{jobs}/{field}_samples_per_s"),
                    v,
                ));
            }
        }
    }
    out
}

/// Records the analysis in `report` (JSON as Python wrote it) as a
/// FINISHED run; returns its id.
pub fn record(store: &mut Store, report: &Value) -> Result<RunId, StallsError> {
    let parsed = StallsReport::from_value(report)?;
    Ok(record_report(store, &parsed)?)
}

/// Records an analysis as a FINISHED run; returns its id.
pub fn record_report(store: &mut Store, report: &StallsReport) -> crate::Result<RunId> {
    let experiment = store.experiment(STALLS_PREFIX)?;
    let workload = store.workload(experiment, &report.command.join(" "), None, 0)?;
    let now = now_ms();
    let run = NewRun {
        name: format!("stalls-{now}"),
        command: report.command.clone(),
        params: Vec::new(),
        devices: Vec::new(),
        collocation: "alone".into(),
        listeners: Vec::new(),
        host: String::new(),
        plan_file: None,
        plan_row: None,
    };
    let (id, _) = store.add_run(workload, &run)?;
    if let Some(regime) = &report.regime {
        store.log_param(id, "regime", regime, ParamSource::Logged)?;
    }
    store.log_param(id, "verdict", &report.verdict, ParamSource::Logged)?;
    let points: Vec<MetricPoint> = metrics(report)
        .into_iter()
        .map(|(key, value)| MetricPoint {
            run_id: id,
            key,
            step: 0,
            ts_ms: now,
            value,
        })
        .collect();
    store.insert_metrics(&points)?;
    store.finish_run(id, RunStatus::Finished, Some(0), Some(&report.verdict))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An analysis of version 1 as Python writes it (every part present);
    /// tests/python/test_stalls.py checks that Python's still has its layout.
    const FIXTURE: &str = include_str!("../../../tests/data/stalls-report-v1.json");

    fn fixture() -> Value {
        serde_json::from_str(FIXTURE).unwrap()
    }

    fn report() -> Value {
        serde_json::json!({
            "command": ["python", "train.py"],
            "regime": "prep-bound",
            "verdict": "prep-bound: 80% of each step waits for data",
            "modes": {"synthetic": {"samples_per_s": 100.0, "step_s": 0.01},
                      "warm": {"samples_per_s": 20.0, "step_s": 0.05}},
            "ddp": null,
            "timeshare": {"samples_per_s": 15.0, "cpu_per_1000": 60.0, "core": 1},
            "loader": {"samples_per_s": 30.0, "cpu_per_1000": 30.0},
            "stalls": [{"name": "prep", "per_step_s": 0.04, "share": 0.8}],
            "predictions": [{"jobs": 2, "independent": 40.0, "shared": 80.0,
                             "measured": {"independent": 38.0, "shared": 75.0}}]
        })
    }

    fn get(m: &[(String, f64)], key: &str) -> Option<f64> {
        m.iter().find(|(n, _)| n == key).map(|(_, v)| *v)
    }

    #[test]
    fn a_figure_or_part_left_out_is_no_metric() {
        let m = metrics(&StallsReport::from_value(&report()).unwrap());
        let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "stalls/synthetic/samples_per_s",
                "stalls/synthetic/step_s",
                "stalls/warm/samples_per_s",
                "stalls/warm/step_s",
                "stalls/loader/samples_per_s",
                "stalls/loader/cpu_per_1000",
                "stalls/timeshared/samples_per_s",
                "stalls/timeshared/cpu_per_1000",
                "stalls/prep/per_step_s",
                "stalls/prep/share",
                "stalls/jobs_2/predicted_independent_samples_per_s",
                "stalls/jobs_2/predicted_shared_samples_per_s",
                "stalls/jobs_2/measured_independent_samples_per_s",
                "stalls/jobs_2/measured_shared_samples_per_s",
            ]
        );
        assert_eq!(get(&m, "stalls/timeshared/cpu_per_1000"), Some(60.0));
    }

    #[test]
    fn the_analysis_python_writes_is_read_whole() {
        let r = StallsReport::from_value(&fixture()).unwrap();
        assert_eq!(r.command, ["python", "train.py"]);
        assert_eq!(r.regime.as_deref(), Some("prep-bound"));
        assert_eq!(
            r.modes.keys().collect::<Vec<_>>(),
            ["cold", "synthetic", "warm"]
        );
        let m = metrics(&r);
        assert_eq!(get(&m, "stalls/synthetic/samples_per_s"), Some(200.0));
        assert_eq!(get(&m, "stalls/ddp/step_s"), Some(0.25));
        assert_eq!(get(&m, "stalls/communication/share"), Some(0.8));
        assert_eq!(get(&m, "stalls/loader/cpu_per_1000"), Some(30.0));
        assert_eq!(get(&m, "stalls/timeshared/cpu_per_1000"), Some(80.0));
        assert_eq!(
            get(&m, "stalls/jobs_2/measured_shared_samples_per_s"),
            Some(180.0)
        );
        // Every figure of every mode, every stall's two and the prediction's four.
        assert_eq!(m.len(), 6 * 7 + 3 * 2 + 4);
    }

    #[test]
    fn an_analysis_without_a_version_is_version_1() {
        let mut old = fixture();
        assert_eq!(old["schema_version"], 1);
        old.as_object_mut().unwrap().remove("schema_version");
        assert_eq!(
            StallsReport::from_value(&old).unwrap(),
            StallsReport::from_value(&fixture()).unwrap()
        );
    }

    #[test]
    fn an_unknown_version_is_refused_with_the_versions_read_and_the_fix() {
        for found in [
            serde_json::json!(2),
            serde_json::json!("1"),
            serde_json::json!(1.5),
        ] {
            let mut newer = fixture();
            newer["schema_version"] = found.clone();
            let err = StallsReport::from_value(&newer).unwrap_err();
            assert!(matches!(err, ReportError::UnknownVersion { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains(&format!("schema_version is {found}")),
                "{text}"
            );
            assert!(text.contains("reads version 1"), "{text}");
            assert!(text.contains("same release"), "{text}");
        }
    }

    #[test]
    fn a_missing_field_is_named() {
        let mut bad = fixture();
        bad.as_object_mut().unwrap().remove("verdict");
        let err = StallsReport::from_value(&bad).unwrap_err().to_string();
        assert!(err.contains("`verdict`"), "{err}");
        bad["verdict"] = serde_json::json!(3);
        let err = StallsReport::from_value(&bad).unwrap_err().to_string();
        assert!(err.contains("invalid type"), "{err}");
    }

    #[test]
    fn each_figure_is_named_as_in_the_json() {
        let json: serde_json::Map<String, Value> = STALLS_MODE_FIGURES
            .iter()
            .enumerate()
            .map(|(i, name)| (name.to_string(), Value::from(i as f64)))
            .collect();
        let figures = ModeFigures::deserialize(Value::Object(json)).unwrap();
        for (i, (name, value)) in figures.named().into_iter().enumerate() {
            assert_eq!((name, value), (STALLS_MODE_FIGURES[i], Some(i as f64)));
        }
    }

    #[test]
    fn an_analysis_is_one_finished_run_in_a_real_store() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        std::fs::write(&file, FIXTURE).unwrap();
        let db = dir.path().join("runs.db");
        let id = record_file(&db, &file).unwrap();
        let store = Store::open_read_only(&db).unwrap();
        let row = store.run(id).unwrap();
        assert_eq!(row.run.status, RunStatus::Finished);
        assert_eq!(
            store.last_metric(id, "stalls/prep/share").unwrap(),
            Some(0.5000000000000001)
        );
    }

    #[test]
    fn a_missing_bad_or_newer_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("runs.db");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{not json").unwrap();
        let err = record_file(&db, &bad).unwrap_err();
        assert!(matches!(err, StallsError::File { .. }), "{err}");
        assert!(err.to_string().contains("bad.json"), "{err}");
        let missing = dir.path().join("missing.json");
        let err = record_file(&db, &missing).unwrap_err();
        assert!(matches!(err, StallsError::Read { .. }), "{err}");
        assert!(err.to_string().contains("missing.json"), "{err}");
        let newer = dir.path().join("newer.json");
        let mut v = fixture();
        v["schema_version"] = Value::from(9);
        std::fs::write(&newer, v.to_string()).unwrap();
        let err = record_file(&db, &newer).unwrap_err().to_string();
        assert!(
            err.contains("newer.json") && err.contains("schema_version is 9"),
            "{err}"
        );
        assert!(
            !db.exists(),
            "nothing is recorded from a file it cannot read"
        );
    }
}
