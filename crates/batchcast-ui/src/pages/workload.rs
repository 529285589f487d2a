//! `/workloads/{id}`: the runs of one workload, and their charts.

use axum::extract::{Path, State};
use axum::response::Html;
use batchcast_store::{now_ms, RunRow};

use crate::error::UiError;
use crate::html::{esc, page, runs_table};
use crate::query::parse_id;
use crate::state::AppState;

pub(crate) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Html<String>, UiError> {
    let id = parse_id("workload", &id)?;
    state
        .read(move |store| {
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
            Ok(Html(page(&format!("Workload {}", w.name), &crumbs, &body)))
        })
        .await
}
