//! JSON and CSV endpoints the pages' script reads, and log downloads.
//!
//! - `GET /api/series?runs=1,2&key=K[&key=K2][&x=elapsed|step][&after=TS]`:
//!   points of up to two metrics of up to 50 runs, `[x, value, ts_ms]`;
//!   with `after`, only points newer than it (live updates); and the
//!   events to mark on the chart's timeline, every time (at most
//!   [`crate::markers::MAX_MARKERS`], a shared producer's once).
//! - `GET /api/csv?…same…`: the same points, every one, as CSV in the
//!   columns of `batchcast runs export --csv` (the store's `MetricsCsv`).
//! - `GET /api/runs?runs=1,2`: status and duration of runs (live tables).
//! - `GET /runs/{id}/log/{stdout|stderr}[?tail=BYTES]`: a run's whole
//!   output (a download, streamed a stored chunk at a time), or its last
//!   bytes.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::Json;
use batchcast_store::{now_ms, LogStream, MetricsCsv, RunId, RunRow, Store};
use batchcast_store::{unit_label, WorkloadId, XAxis};
use serde::Serialize;

use crate::error::{ApiError, UiError};
use crate::markers::{markers, Marker};
use crate::query::{parse_id, Query};
use crate::state::AppState;

/// Points sent per series to draw (longer series are thinned evenly).
const MAX_DRAWN: usize = 5_000;
/// Values scanned for one request, at most, over all its series (a day at
/// 1 Hz is 86,400 per series): it bounds the request's time, as only the
/// thinned points are held. More is refused, not cut short silently.
const MAX_POINTS: usize = 2_000_000;
/// Stored chunks (64 KiB each) of a log download read at once.
const LOG_AHEAD: usize = 16;
/// Bytes of a log tail asked with `?tail=`, at most.
const MAX_TAIL: usize = 1024 * 1024;

#[derive(Serialize)]
struct Series {
    run: RunId,
    label: String,
    /// The run's workload's name.
    workload: String,
    /// The run's workload (pages group runs by it: names repeat across
    /// experiments).
    workload_id: WorkloadId,
    key: String,
    start_ms: Option<i64>,
    /// `[x, value, ts_ms]`.
    points: Vec<[f64; 3]>,
}

#[derive(Serialize)]
struct SeriesReply {
    x: &'static str,
    /// `(key, axis label with unit)`.
    keys: Vec<(String, String)>,
    live: bool,
    series: Vec<Series>,
    markers: Vec<Marker>,
    /// Markers not sent (past [`crate::markers::MAX_MARKERS`]).
    markers_left_off: usize,
}

/// A chart's request, checked against the store: runs exist, each metric
/// is held by at least one of them.
struct Ask {
    runs: Vec<RunRow>,
    keys: Vec<String>,
    x: XAxis,
    after: Option<i64>,
}

fn ask(store: &Store, q: &Query) -> Result<Ask, UiError> {
    let ids = q.run_ids()?;
    let keys = q.metric_keys()?;
    let runs = ids
        .iter()
        .map(|&id| store.run(id))
        .collect::<Result<Vec<_>, _>>()?;
    let mut held = BTreeSet::new();
    for r in &runs {
        held.extend(store.metric_keys(r.run.id)?);
    }
    if let Some(k) = keys.iter().find(|k| !held.contains(*k)) {
        return Err(UiError::BadRequest(format!(
            "none of runs {ids:?} has the metric {k:?}"
        )));
    }
    Ok(Ask {
        runs,
        keys,
        x: q.x_axis()?,
        after: q.after()?,
    })
}

/// The points of one series, thinned to at most `keep`; the values it
/// scans are counted against the request's budget before any is read.
fn read(
    store: &Store,
    run: RunId,
    key: &str,
    after: Option<i64>,
    budget: &mut usize,
    keep: usize,
) -> Result<Vec<batchcast_store::MetricPoint>, UiError> {
    charge(store, run, key, after, budget)?;
    Ok(store.metric_thinned(run, key, after, keep)?)
}

/// Counts the values of one series after `after` against the request's
/// budget, before any is read; returns how many there are.
fn charge(
    store: &Store,
    run: RunId,
    key: &str,
    after: Option<i64>,
    budget: &mut usize,
) -> Result<usize, UiError> {
    let n = store.metric_len(run, key, after)?;
    if n > *budget {
        return Err(UiError::BadRequest(format!(
            "more than {MAX_POINTS} points asked at once: choose fewer runs, or use `batchcast runs export --csv`"
        )));
    }
    *budget -= n;
    Ok(n)
}

fn label(r: &RunRow) -> String {
    format!("{}/{} (#{})", r.workload, r.run.name, r.run.id)
}

fn x_of(x: XAxis, start: i64, step: i64, ts: i64) -> f64 {
    match x {
        XAxis::Elapsed => (ts - start) as f64 / 1000.0,
        XAxis::Step => step as f64,
    }
}

pub(crate) async fn series(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    let q = Query::parse(raw.as_deref())?;
    let reply = state
        .read(move |store| {
            let a = ask(store, &q)?;
            let mut series = Vec::new();
            let mut budget = MAX_POINTS;
            for r in &a.runs {
                let start = r.run.start_ms.unwrap_or(0);
                for key in &a.keys {
                    let points = read(store, r.run.id, key, a.after, &mut budget, MAX_DRAWN)?
                        .iter()
                        .filter(|p| p.value.is_finite())
                        .map(|p| [x_of(a.x, start, p.step, p.ts_ms), p.value, p.ts_ms as f64])
                        .collect();
                    series.push(Series {
                        run: r.run.id,
                        label: label(r),
                        workload: r.workload.clone(),
                        workload_id: r.run.workload_id,
                        key: key.clone(),
                        start_ms: r.run.start_ms,
                        points,
                    });
                }
            }
            let (markers, markers_left_off) = markers(store, &a.runs)?;
            Ok(SeriesReply {
                x: match a.x {
                    XAxis::Elapsed => "elapsed",
                    XAxis::Step => "step",
                },
                keys: a.keys.iter().map(|k| (k.clone(), unit_label(k))).collect(),
                live: a.runs.iter().any(|r| !r.run.status.is_terminal()),
                series,
                markers,
                markers_left_off,
            })
        })
        .await?;
    Ok(Json(
        serde_json::to_value(reply).map_err(|e| UiError::Internal(e.to_string()))?,
    ))
}

pub(crate) async fn csv(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<impl IntoResponse, ApiError> {
    let q = Query::parse(raw.as_deref())?;
    let body = state
        .read(move |store| {
            let a = ask(store, &q)?;
            let mut out = MetricsCsv::new(Vec::new())?;
            let mut budget = MAX_POINTS;
            for r in &a.runs {
                for key in &a.keys {
                    // The download has every point, each written as it is
                    // read; the budget bounds them.
                    let n = charge(store, r.run.id, key, a.after, &mut budget)?;
                    store.for_each_point_after(r.run.id, key, a.after, n, |step, ts, v| {
                        out.point(r, key, step, ts, v).map_err(UiError::from)
                    })?;
                }
            }
            Ok(out.finish()?)
        })
        .await?;
    Ok((
        [
            (CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                CONTENT_DISPOSITION,
                "attachment; filename=\"batchcast-chart.csv\"",
            ),
        ],
        body,
    ))
}

#[derive(Serialize)]
struct RunState {
    id: RunId,
    status: &'static str,
    duration: Option<String>,
}

pub(crate) async fn runs(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let q = Query::parse(raw.as_deref())?;
    let ids = q.run_ids()?;
    let out = state
        .read(move |store| {
            let now = now_ms();
            ids.iter()
                .map(|&id| {
                    let r = store.run(id)?.run;
                    let s = RunState {
                        id,
                        status: r.status.as_str(),
                        duration: r.duration_ms(now).map(crate::html::duration),
                    };
                    serde_json::to_value(s).map_err(|e| UiError::Internal(e.to_string()))
                })
                .collect::<Result<Vec<_>, UiError>>()
        })
        .await?;
    Ok(Json(out))
}

pub(crate) async fn log(
    State(state): State<AppState>,
    Path((id, stream)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<impl IntoResponse, UiError> {
    let id = parse_id("run", &id)?;
    // `?tail=N`: the last N bytes, shown in the page (live runs poll it).
    let tail = match Query::parse(raw.as_deref())?.get("tail") {
        None => None,
        Some(n) => Some(
            n.parse::<usize>()
                .ok()
                .filter(|&n| n <= MAX_TAIL)
                .ok_or_else(|| {
                    UiError::BadRequest(format!("tail must be a byte count up to {MAX_TAIL}"))
                })?,
        ),
    };
    let stream = match stream.as_str() {
        "stdout" => LogStream::Stdout,
        "stderr" => LogStream::Stderr,
        _ => {
            return Err(UiError::NoPage(format!(
                "/runs/{id}/log/…: stdout or stderr"
            )))
        }
    };
    let (disposition, body) = match tail {
        Some(n) => {
            let bytes = state
                .read(move |store| {
                    store.run(id)?;
                    Ok(store.log(id, stream, Some(n))?.0)
                })
                .await?;
            ("inline".to_string(), Body::from(bytes))
        }
        None => {
            state
                .read(move |store| Ok(store.run(id).map(|_| ())?))
                .await?;
            (
                format!("attachment; filename=\"run-{id}-{}.log\"", stream.as_str()),
                stream_log(&state, id, stream),
            )
        }
    };
    Ok((
        [
            (CONTENT_TYPE, "text/plain; charset=utf-8".to_string()),
            (CONTENT_DISPOSITION, disposition),
        ],
        body,
    ))
}

/// A run's whole log as a response body, read [`LOG_AHEAD`] stored chunks
/// at a time (a short read on a blocking thread each, none held while the
/// client is slow): a download holds a few chunks, never the log.
fn stream_log(state: &AppState, id: RunId, stream: LogStream) -> Body {
    let state = state.clone();
    let pages = futures_util::stream::unfold(Some(-1i64), move |after| {
        let state = state.clone();
        async move {
            let after = after?;
            let page = state
                .read(move |store| Ok(store.log_chunks(id, stream, after, LOG_AHEAD)?))
                .await;
            match page {
                Ok(page) if page.is_empty() => None,
                Ok(page) => {
                    let next = (page.len() == LOG_AHEAD).then(|| page[page.len() - 1].0);
                    let bytes: Vec<u8> = page.into_iter().flat_map(|(_, d)| d).collect();
                    Some((Ok(bytes), next))
                }
                // The client sees the download end early, not a whole file.
                Err(e) => Some((Err(std::io::Error::other(e.to_string())), None)),
            }
        }
    });
    Body::from_stream(pages)
}
