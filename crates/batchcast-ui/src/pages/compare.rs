//! `/compare?runs=1,7` (or `run=1&run=7` from the tables' checkboxes):
//! chosen runs of any workloads side by side, and their charts.

use axum::extract::{RawQuery, State};
use axum::response::Html;
use batchcast_store::now_ms;

use crate::error::UiError;
use crate::html::{page, pick_form, runs_table};
use crate::query::Query;
use crate::state::AppState;

pub(crate) async fn show(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Html<String>, UiError> {
    let q = Query::parse(raw.as_deref())?;
    let ids = q.run_ids().map_err(|_| {
        UiError::BadRequest(
            "choose runs to chart: tick them in a runs table (or give runs=ID,ID,…)".into(),
        )
    })?;
    state
        .read(move |store| {
            let mut rows = Vec::new();
            for &id in &ids {
                let row = store.run(id)?;
                let params = store.params(id)?;
                rows.push((row, params));
            }
            let runs: Vec<_> = rows.iter().map(|(r, _)| &r.run).collect();
            let body = format!(
                "{}{}{}",
                pick_form(),
                runs_table(&rows, now_ms(), true),
                super::charts(store, &runs, super::Lines::EachRun)?
            );
            let list: Vec<String> = ids.iter().map(|i| format!("#{i}")).collect();
            Ok(Html(page(&format!("Runs {}", list.join(", ")), &[], &body)))
        })
        .await
}
