//! `/`: every experiment, and runs found by name or parameter.

use std::fmt::Write;

use axum::extract::{RawQuery, State};
use axum::response::Html;
use batchcast_store::now_ms;

use crate::error::UiError;
use crate::html::{esc, page, runs_table, time};
use crate::query::Query;
use crate::state::AppState;

pub(crate) async fn index(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Html<String>, UiError> {
    let q = Query::parse(raw.as_deref())?;
    state
        .read(move |store| {
            let (form, filter) = super::search(&q, "/")?;
            let mut body = form;
            if filter.search.is_some() || filter.status.is_some() {
                let rows = store.runs(&filter)?;
                let with_params = rows
                    .into_iter()
                    .map(|r| Ok((store.params(r.run.id)?, r)))
                    .collect::<Result<Vec<_>, UiError>>()?
                    .into_iter()
                    .map(|(p, r)| (r, p))
                    .collect::<Vec<_>>();
                let _ = write!(
                    body,
                    "<h2>Matching runs ({})</h2>{}{}",
                    with_params.len(),
                    crate::html::pick_form(),
                    runs_table(&with_params, now_ms(), true)
                );
            }
            body.push_str("<h2>Experiments</h2>");
            let experiments = store.experiments()?;
            if experiments.is_empty() {
                body.push_str("<p class=\"empty\">The store holds no experiment yet: record one with <code>batchcast run PLAN --store FILE</code>.</p>");
            } else {
                body.push_str("<table class=\"experiments\"><thead><tr><th>experiment</th><th>created</th><th>workloads</th><th>runs</th><th>in progress</th><th></th></tr></thead><tbody>");
                for e in experiments {
                    let workloads = store.workloads(e.id)?;
                    let (mut runs, mut live) = (0, 0);
                    for w in &workloads {
                        let rs = store.workload_runs(w.id)?;
                        runs += rs.len();
                        live += rs.iter().filter(|r| !r.status.is_terminal()).count();
                    }
                    let _ = write!(
                        body,
                        "<tr><td><a href=\"/experiments/{id}\">{name}</a></td><td>{created}</td><td>{w}</td><td>{runs}</td><td>{live}</td>\
                         <td><a href=\"/experiments/{id}/collocation\">collocation</a></td></tr>",
                        id = e.id,
                        name = esc(&e.name),
                        created = time(e.created_ms),
                        w = workloads.len(),
                    );
                }
                body.push_str("</tbody></table>");
            }
            Ok(Html(page("Experiments", &[], &body)))
        })
        .await
}
