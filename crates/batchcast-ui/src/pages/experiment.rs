//! `/experiments/{id}`: an experiment's workloads and their runs.

use std::fmt::Write;

use axum::extract::{Path, RawQuery, State};
use axum::response::Html;
use batchcast_store::now_ms;

use crate::error::UiError;
use crate::html::{esc, page, runs_table};
use crate::query::{parse_id, Query};
use crate::state::AppState;

pub(crate) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Html<String>, UiError> {
    let id = parse_id("experiment", &id)?;
    let q = Query::parse(raw.as_deref())?;
    state
        .read(move |store| {
            let e = super::experiment(store, id)?;
            let (form, mut filter) = super::search(&q, &format!("/experiments/{id}"))?;
            filter.experiment = Some(e.name.clone());
            filter.limit = None;
            let rows = store.runs(&filter)?;
            let mut body = format!(
                "<p class=\"links\"><a href=\"/experiments/{id}/collocation\">Collocation view: independent and shared workloads side by side</a></p>{form}{}",
                crate::html::pick_form()
            );
            let now = now_ms();
            for w in store.workloads(id)? {
                let mut mine = Vec::new();
                for r in rows.iter().rev().filter(|r| r.run.workload_id == w.id) {
                    mine.push((r.clone(), store.params(r.run.id)?));
                }
                let data = match &w.data {
                    Some(cmd) => format!("shared pipeline: <code>{}</code>", esc(cmd)),
                    None => "own loaders (independent)".into(),
                };
                let _ = write!(
                    body,
                    "<h2><a href=\"/workloads/{}\">{}</a></h2><p class=\"data\">{data}</p>{}",
                    w.id,
                    esc(&w.name),
                    runs_table(&mine, now, false)
                );
            }
            let crumbs = [(format!("/experiments/{id}"), e.name.clone())];
            Ok(Html(page(&format!("Experiment {}", e.name), &crumbs, &body)))
        })
        .await
}
