//! `/experiments/{id}/collocation`: what `batchcast runs compare` shows
//! per workload, independent and shared side by side, with the speedup of
//! sharing.

use std::fmt::Write;

use batchcast_store::compare::{self, WorkloadSummary};
use batchcast_store::Store;

use crate::error::UiError;
use crate::html::{esc, page};

/// The collocation page of one experiment.
pub(crate) struct CollocationPage;

impl super::ById for CollocationPage {
    const WHAT: &'static str = "experiment";

    fn render(store: &Store, id: i64) -> Result<String, UiError> {
        let e = super::experiment(store, id)?;
        let mut rows = compare::collocation(store, Some(&e.name))?;
        // Independent workloads first, then shared ones, each in plan order.
        rows.sort_by_key(|w| w.shared);
        let mut body = String::from(
        "<table class=\"collocation\"><thead><tr><th>workload</th><th>data</th><th>runs done</th><th>wall (s)</th>\
         <th>aggregate samples/s</th><th>data wait</th><th>CPU s / 1000 samples</th><th>GPU activity</th><th>memory (peak PSS)</th></tr></thead><tbody>",
    );
        for w in &rows {
            let _ = write!(
            body,
            "<tr class=\"{cls}\"><td><a href=\"/workloads/{wid}\">{name}</a></td><td>{data}</td><td>{done}/{runs}</td><td>{wall}</td>\
             <td class=\"num\">{rate}</td><td class=\"num\">{wait}</td><td class=\"num\">{cpu}</td><td class=\"num\">{gpu}</td><td class=\"num\">{mem}</td></tr>",
            cls = if w.shared { "shared" } else { "independent" },
            wid = w.workload_id,
            name = esc(&w.workload),
            data = if w.shared { "shared" } else { "own" },
            done = w.finished,
            runs = w.runs,
            wall = num(w.wall_s, 1),
            rate = num(w.samples_per_s, 1),
            wait = w.data_wait_share.map(|v| format!("{:.1} %", v * 100.0)).unwrap_or_else(|| "-".into()),
            cpu = num(w.cpu_s_per_1000_samples, 2),
            gpu = w.gpu_activity.map(|v| format!("{:.0} %", v * 100.0)).unwrap_or_else(|| "-".into()),
            mem = w.memory_bytes.map(|b| format!("{:.1} MiB", b / 1048576.0)).unwrap_or_else(|| "-".into()),
        );
        }
        body.push_str("</tbody></table>");
        let speedups = compare::speedups(&rows);
        body.push_str("<h2>Speedup of sharing</h2>");
        if speedups.is_empty() {
            body.push_str("<p class=\"empty\">No shared workload has an independent one with as many training runs to compare with.</p>");
        }
        for s in &speedups {
            let cpu = s
                .cpu_saving
                .map(|c| format!(", <b>{c:.2}×</b> less CPU per sample"))
                .unwrap_or_default();
            let (shared, independent) = (esc(&s.shared), esc(&s.independent));
            let _ = write!(
                body,
                "<p class=\"speedup\">{shared} vs {independent}: <b>{:.2}×</b> aggregate samples/s{cpu}</p>",
                s.throughput
            );
        }
        body.push_str(&bars(&rows));
        body.push_str(DEFINITIONS);
        let crumbs = [
            (format!("/experiments/{id}"), e.name.clone()),
            (
                format!("/experiments/{id}/collocation"),
                "collocation".into(),
            ),
        ];
        Ok(page(&format!("Collocation: {}", e.name), &crumbs, &body))
    }
}

const DEFINITIONS: &str = "<p class=\"note\">Aggregate samples/s: the sum of each training run's samples over its wall time. \
Data wait: mean share of time the consumers waited for data. CPU per 1000 samples counts every process of the workload, the shared producer included. \
Memory sums each run's peak PSS, so a shared arena counts once. As in <code>batchcast runs compare</code>.</p>";

fn num(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// Aggregate samples/s per workload as horizontal bars (inline SVG).
fn bars(rows: &[WorkloadSummary]) -> String {
    let max = rows
        .iter()
        .filter_map(|w| w.samples_per_s)
        .fold(0.0_f64, f64::max);
    if max <= 0.0 {
        return String::new();
    }
    let (label_w, bar_w, row_h) = (220.0, 520.0, 30.0);
    let h = rows.len() as f64 * row_h + 10.0;
    let mut svg = format!(
        "<h2>Aggregate samples/s</h2><svg class=\"bars\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\">",
        w = label_w + bar_w + 100.0
    );
    for (i, w) in rows.iter().enumerate() {
        let y = i as f64 * row_h + 5.0;
        let v = w.samples_per_s.unwrap_or(0.0);
        let len = bar_w * v / max;
        let _ = write!(
            svg,
            "<text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{name} ({what})</text>\
             <rect class=\"{kind}\" x=\"{label_w}\" y=\"{y}\" width=\"{len:.1}\" height=\"{bh}\"></rect>\
             <text x=\"{vx:.1}\" y=\"{ty}\">{v:.0}</text>",
            tx = label_w - 8.0,
            ty = y + 16.0,
            name = esc(&w.workload),
            kind = if w.shared { "shared" } else { "independent" },
            what = if w.shared { "shared pipeline" } else { "own loaders" },
            bh = row_h - 10.0,
            vx = label_w + len + 6.0,
        );
    }
    svg.push_str("</svg>");
    svg
}
