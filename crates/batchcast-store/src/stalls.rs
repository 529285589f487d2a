//! Records a `batchcast stalls` analysis (the JSON that
//! `python -m batchcast.stalls --json-out` writes) as one FINISHED run of
//! the experiment `stalls`, one workload per command, so that `batchcast
//! runs` and the dashboard show it beside the runs of `batchcast run`.

use std::path::Path;

use serde_json::Value;

use crate::keys::{STALLS_MODE_FIGURES, STALLS_PREFIX};
use crate::{
    now_ms, MetricPoint, NewRun, ParamSource, Result, RunId, RunStatus, Store, StoreError,
};

/// The largest analysis file read (it holds figures, not samples).
pub const MAX_REPORT_BYTES: u64 = 4 << 20;

/// Reads the analysis in `report` and records it in the store at `store`.
pub fn record_file(store: &Path, report: &Path) -> Result<RunId> {
    let bad = |why: String| StoreError::NotFound {
        what: format!("a stalls analysis in {} ({why})", report.display()),
    };
    let text =
        crate::bounded::read_text(report, MAX_REPORT_BYTES).map_err(|e| bad(e.to_string()))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let mut store = Store::open(store)?;
    record(&mut store, &value)
}

/// The metric points of an analysis, `(key, value)`, in a stable order.
pub fn metrics(report: &Value) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut modes: Vec<(String, &Value)> = report["modes"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v)).collect())
        .unwrap_or_default();
    if report["ddp"].is_object() {
        modes.push(("ddp".into(), &report["ddp"]));
    }
    if report["loader"].is_object() {
        modes.push(("loader".into(), &report["loader"]));
    }
    if report["timeshare"].is_object() {
        modes.push(("timeshared".into(), &report["timeshare"]));
    }
    for (mode, figures) in modes {
        for f in STALLS_MODE_FIGURES {
            if let Some(v) = figures[f].as_f64() {
                out.push((format!("{STALLS_PREFIX}/{mode}/{f}"), v));
            }
        }
    }
    for s in report["stalls"].as_array().into_iter().flatten() {
        let name = s["name"].as_str().unwrap_or("unknown");
        for f in ["per_step_s", "share"] {
            if let Some(v) = s[f].as_f64() {
                out.push((format!("{STALLS_PREFIX}/{name}/{f}"), v));
            }
        }
    }
    for p in report["predictions"].as_array().into_iter().flatten() {
        let jobs = p["jobs"].as_i64().unwrap_or(0);
        for (src, field) in [
            (&p["independent"], "predicted_independent"),
            (&p["shared"], "predicted_shared"),
            (&p["measured"]["independent"], "measured_independent"),
            (&p["measured"]["shared"], "measured_shared"),
        ] {
            if let Some(v) = src.as_f64() {
                out.push((
                    format!("{STALLS_PREFIX}/jobs_{jobs}/{field}_samples_per_s"),
                    v,
                ));
            }
        }
    }
    out
}

/// Records an analysis as a FINISHED run; returns its id.
pub fn record(store: &mut Store, report: &Value) -> Result<RunId> {
    let command: Vec<String> = report["command"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    let experiment = store.experiment(STALLS_PREFIX)?;
    let workload = store.workload(experiment, &command.join(" "), None, 0)?;
    let now = now_ms();
    let run = NewRun {
        name: format!("stalls-{now}"),
        command,
        params: Vec::new(),
        devices: Vec::new(),
        collocation: "alone".into(),
        listeners: Vec::new(),
        host: String::new(),
        plan_file: None,
        plan_row: None,
    };
    let (id, _) = store.add_run(workload, &run)?;
    let verdict = report["verdict"].as_str().unwrap_or("");
    for (key, field) in [("regime", "regime"), ("verdict", "verdict")] {
        if let Some(v) = report[field].as_str() {
            store.log_param(id, key, v, ParamSource::Logged)?;
        }
    }
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
    store.finish_run(id, RunStatus::Finished, Some(0), Some(verdict))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn every_figure_becomes_a_metric() {
        let m = metrics(&report());
        let get = |k: &str| m.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("stalls/synthetic/samples_per_s"), Some(100.0));
        assert_eq!(get("stalls/warm/step_s"), Some(0.05));
        assert_eq!(get("stalls/prep/share"), Some(0.8));
        assert_eq!(get("stalls/timeshared/cpu_per_1000"), Some(60.0));
        assert_eq!(get("stalls/loader/samples_per_s"), Some(30.0));
        assert_eq!(
            get("stalls/jobs_2/measured_shared_samples_per_s"),
            Some(75.0)
        );
        assert_eq!(
            get("stalls/jobs_2/predicted_independent_samples_per_s"),
            Some(40.0)
        );
    }

    #[test]
    fn an_analysis_is_one_finished_run_in_a_real_store() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        std::fs::write(&file, report().to_string()).unwrap();
        let db = dir.path().join("runs.db");
        let id = record_file(&db, &file).unwrap();
        let store = Store::open_read_only(&db).unwrap();
        let row = store.run(id).unwrap();
        assert_eq!(row.run.status, RunStatus::Finished);
        assert_eq!(
            store.last_metric(id, "stalls/prep/share").unwrap(),
            Some(0.8)
        );
    }

    #[test]
    fn a_missing_or_bad_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{not json").unwrap();
        let err = record_file(&dir.path().join("runs.db"), &bad).unwrap_err();
        assert!(err.to_string().contains("bad.json"), "{err}");
    }
}
