//! `/workloads/{id}`: the runs of one workload, and their charts.

use batchcast_store::{now_ms, RunRow, Store};

use crate::error::UiError;
use crate::html::{esc, page, runs_table};

/// The page of one workload.
pub(crate) struct WorkloadPage;

impl super::ById for WorkloadPage {
    const WHAT: &'static str = "workload";

    fn render(store: &Store, id: i64) -> Result<String, UiError> {
        let w = store.workload_by_id(id)?;
        let e = super::experiment(store, w.experiment_id)?;
        let runs = store.workload_runs(id)?;
        let mut rows = Vec::new();
        for r in &runs {
            let row = RunRow {
                experiment: e.name.clone(),
                workload: w.name.clone(),
                run: r.clone(),
            };
            rows.push((row, store.params(r.id)?));
        }
        let data = match &w.data {
            Some(cmd) => format!("shared pipeline: <code>{}</code>", esc(cmd)),
            None => "own loaders (independent)".into(),
        };
        let body = format!(
        "<p class=\"data\">{data} · <a href=\"/experiments/{eid}/collocation\">collocation view</a></p>{pick}{table}{charts}",
        pick = crate::html::pick_form(),
        eid = e.id,
        table = runs_table(&rows, now_ms(), false),
        charts = super::charts(store, &runs.iter().collect::<Vec<_>>(), super::Lines::EachRun)?,
    );
        let crumbs = [
            (format!("/experiments/{}", e.id), e.name.clone()),
            (format!("/workloads/{id}"), w.name.clone()),
        ];
        Ok(page(&format!("Workload {}", w.name), &crumbs, &body))
    }
}
