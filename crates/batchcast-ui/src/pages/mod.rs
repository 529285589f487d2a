//! The HTML pages: experiment list, experiment, workload, collocation, run.
//!
//! Pages are rendered on the server from the store; charts are a
//! `<section class="charts">` that the page's script fills from
//! `/api/series` (lines, and the runs' events as markers on the x axis),
//! and that polls while any of its runs is in progress.

pub(crate) mod collocation;
pub(crate) mod compare;
pub(crate) mod experiment;
pub(crate) mod experiments;
pub(crate) mod run;
mod stalls;
pub(crate) mod workload;

use std::collections::BTreeSet;

use axum::extract::{Path, State};
use axum::response::Html;
use batchcast_store::{keys, Experiment, ExperimentId, Run, RunFilter, RunStatus, Store};

use crate::error::UiError;
use crate::html::esc;
use crate::query::{parse_id, Query};
use crate::state::AppState;

/// Metrics charted first when a page opens with no chart set in its URL.
const PREFERRED: &[&str] = &[
    keys::BATCHCAST_SAMPLES_PER_S,
    keys::BATCHCAST_DATA_WAIT_SHARE,
    keys::PROC_CPU_PERCENT,
    keys::PROC_PSS_BYTES,
];

/// How a charts section draws its runs until the reader chooses otherwise.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Lines {
    /// One line per run.
    EachRun,
    /// One line per workload: the mean of its runs.
    PerWorkload,
}

/// A page of one thing named by the `{id}` in its path (a run, a
/// workload, an experiment's collocation), served by [`by_id`].
pub(crate) trait ById: 'static {
    /// What the id numbers, as the refusal of a malformed one names it.
    const WHAT: &'static str;
    /// The page's HTML, read from the store.
    fn render(store: &Store, id: i64) -> Result<String, UiError>;
}

/// Serves the [`ById`] page `P`: a malformed id is refused before the
/// store is opened; the page is rendered from a read-only store on a
/// blocking thread.
pub(crate) async fn by_id<P: ById>(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Html<String>, UiError> {
    let id = parse_id(P::WHAT, &id)?;
    state
        .read(move |store| P::render(store, id).map(Html))
        .await
}

/// The charts of a set of runs: the metrics they have, and which to show.
pub(crate) fn charts(store: &Store, runs: &[&Run], lines: Lines) -> Result<String, UiError> {
    let mut all = BTreeSet::new();
    for r in runs {
        all.extend(store.metric_keys(r.id)?);
    }
    if all.is_empty() {
        return Ok("<section class=\"charts-empty\"><h2>Charts</h2><p class=\"empty\">No metrics recorded yet.</p></section>".into());
    }
    let mut defaults: Vec<&str> = PREFERRED
        .iter()
        .copied()
        .filter(|k| all.contains(*k))
        .take(2)
        .collect();
    if defaults.is_empty() {
        defaults.extend(all.iter().next().map(String::as_str));
    }
    let ids: Vec<String> = runs.iter().map(|r| r.id.to_string()).collect();
    let live = runs.iter().any(|r| !r.status.is_terminal());
    let keys_json = serde_json::to_string(&all).unwrap_or_else(|_| "[]".into());
    let defaults_json = serde_json::to_string(&defaults).unwrap_or_else(|_| "[]".into());
    Ok(format!(
        "<section class=\"charts\" data-runs=\"{}\" data-keys=\"{}\" data-defaults=\"{}\" data-live=\"{}\"{}><h2>Charts</h2></section>",
        ids.join(","),
        esc(&keys_json),
        esc(&defaults_json),
        u8::from(live),
        if lines == Lines::PerWorkload {
            " data-mode=\"workload\""
        } else {
            ""
        }
    ))
}

/// The experiment with this id.
pub(crate) fn experiment(store: &Store, id: ExperimentId) -> Result<Experiment, UiError> {
    store
        .experiments()?
        .into_iter()
        .find(|e| e.id == id)
        .ok_or_else(|| {
            UiError::Store(batchcast_store::StoreError::NotFound {
                what: format!("experiment {id}"),
            })
        })
}

/// The search form (name or parameter, status) and the filter it asks for.
pub(crate) fn search(q: &Query, action: &str) -> Result<(String, RunFilter), UiError> {
    let text = q.text("q")?;
    let status = match q.text("status")? {
        None => None,
        Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
            UiError::BadRequest(format!(
                "status must be PENDING, RUNNING, FINISHED, FAILED or KILLED, not {s:?}"
            ))
        })?),
    };
    let mut options = String::from("<option value=\"\">any status</option>");
    for s in ["PENDING", "RUNNING", "FINISHED", "FAILED", "KILLED"] {
        let sel = if status.map(|x| x.as_str()) == Some(s) {
            " selected"
        } else {
            ""
        };
        options.push_str(&format!("<option{sel}>{s}</option>"));
    }
    let form = format!(
        "<form class=\"search\" method=\"get\" action=\"{}\"><input type=\"search\" name=\"q\" value=\"{}\" \
         placeholder=\"run name or parameter (lr=0.1)\" maxlength=\"200\"><select name=\"status\">{options}</select>\
         <button type=\"submit\">Filter</button></form>",
        esc(action),
        esc(text.as_deref().unwrap_or(""))
    );
    let filter = RunFilter {
        search: text,
        status,
        limit: Some(1000),
        ..Default::default()
    };
    Ok((form, filter))
}
