//! `/experiments/{id}`: an experiment's workloads and their runs, and
//! charts that compare the workloads: one line per workload (the mean of
//! its training runs) of a chosen metric, against time or step (accuracy
//! against samples trained, per policy), its producer's events marked.

use std::fmt::Write;

use axum::extract::{Path, RawQuery, State};
use axum::response::Html;
use batchcast_store::{keys, now_ms, RunRow, Store};

use crate::error::UiError;
use crate::html::{esc, page, runs_table};
use crate::query::{parse_id, Query, MAX_RUNS};
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
            body.push_str(&compared(store, &rows)?);
            let crumbs = [(format!("/experiments/{id}"), e.name.clone())];
            Ok(Html(page(&format!("Experiment {}", e.name), &crumbs, &body)))
        })
        .await
}

/// The charts of the training runs of `rows` (the shared producers' runs
/// left out), one line per workload, at most [`MAX_RUNS`] runs.
fn compared(store: &Store, rows: &[RunRow]) -> Result<String, UiError> {
    let training: Vec<_> = rows
        .iter()
        .rev()
        .filter(|r| r.run.name != keys::DATA_RUN)
        .map(|r| &r.run)
        .collect();
    if training.is_empty() {
        return Ok(String::new());
    }
    let cut = if training.len() > MAX_RUNS {
        format!(
            " The first {MAX_RUNS} of its {} training runs are drawn.",
            training.len()
        )
    } else {
        String::new()
    };
    Ok(format!(
        "<h2 id=\"compare\">Workloads compared</h2><p class=\"note\">One line per workload: the mean of its training runs \
         (<i>each run</i> draws them one by one). The events of its runs and of its shared producer (triggers, new data, \
         a resumed stream) are marked as vertical lines; hover one to read it. For a metric logged against a step \
         (accuracy against samples trained), choose <i>x: step</i>.{cut}</p>{}",
        super::charts(
            store,
            &training[..training.len().min(MAX_RUNS)],
            super::Lines::PerWorkload
        )?
    ))
}
