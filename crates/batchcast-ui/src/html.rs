//! Small helpers that write HTML: escaping, the page frame, times, the
//! runs table every listing shares.

use std::fmt::Write;

use batchcast_store::{Param, RunRow};

/// Escapes text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page: header with the path of links that led here, then `body`.
pub(crate) fn page(title: &str, crumbs: &[(String, String)], body: &str) -> String {
    let mut nav = String::from("<a href=\"/\">Experiments</a>");
    for (href, label) in crumbs {
        let _ = write!(nav, " › <a href=\"{}\">{}</a>", esc(href), esc(label));
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} · batchcast</title><link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/static/style.css\"></head>\
         <body><header><span class=\"brand\">batchcast</span><nav>{nav}</nav></header>\
         <main><h1>{t}</h1>{body}</main>\
         <script src=\"/static/chart.js\"></script><script src=\"/static/app.js\"></script></body></html>",
        t = esc(title)
    )
}

/// `2026-11-24 06:30:12 UTC` from milliseconds since the epoch; a time
/// past the four-digit years (a spoiled store) as `N ms since 1970`.
pub(crate) fn time(ms: i64) -> String {
    match time::UtcDateTime::from_unix_timestamp(ms.div_euclid(1000)) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{ms} ms since 1970"),
    }
}

/// `1 h 02 min`, `3 min 07 s`, `12.4 s`.
pub(crate) fn duration(ms: i64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// The status as a coloured badge (live pages update it by `data-run`).
pub(crate) fn status(row: &RunRow) -> String {
    let s = row.run.status.as_str();
    format!(
        "<span class=\"status {}\" data-status=\"{}\">{s}</span>",
        s.to_ascii_lowercase(),
        row.run.id
    )
}

/// A run's devices: GPU list, or `CPU`.
pub(crate) fn devices(row: &RunRow) -> String {
    if row.run.devices.is_empty() {
        "CPU".into()
    } else {
        esc(&row.run.devices.join(", "))
    }
}

/// A table of runs, with their parameters (given per run, same order).
pub(crate) fn runs_table(rows: &[(RunRow, Vec<Param>)], now_ms: i64, with_place: bool) -> String {
    if rows.is_empty() {
        return "<p class=\"empty\">No runs.</p>".into();
    }
    let mut t = String::from("<table class=\"runs\"><thead><tr><th></th><th>#</th>");
    if with_place {
        t.push_str("<th>experiment / workload</th>");
    }
    t.push_str("<th>run</th><th>status</th><th>started</th><th>duration</th><th>devices</th><th>collocation</th><th>exit</th><th>parameters</th></tr></thead><tbody>");
    for (row, params) in rows {
        let r = &row.run;
        let _ = write!(
            t,
            "<tr data-run=\"{id}\"><td><input type=\"checkbox\" name=\"run\" value=\"{id}\" form=\"pick\" title=\"chart this run\"></td><td>{id}</td>",
            id = r.id
        );
        if with_place {
            let _ = write!(
                t,
                "<td><a href=\"/workloads/{}\">{} / {}</a></td>",
                r.workload_id,
                esc(&row.experiment),
                esc(&row.workload)
            );
        }
        let params: Vec<String> = params
            .iter()
            .map(|p| format!("{}={}", p.key, p.value))
            .collect();
        let _ = write!(
            t,
            "<td><a href=\"/runs/{id}\">{name}</a></td><td>{status}</td><td>{start}</td>\
             <td data-duration=\"{id}\">{dur}</td><td>{dev}</td><td>{col}</td><td>{exit}</td><td class=\"params\">{params}</td></tr>",
            id = r.id,
            name = esc(&r.name),
            status = status(row),
            start = r.start_ms.map(time).unwrap_or_else(|| "-".into()),
            dur = r.duration_ms(now_ms).map(duration).unwrap_or_else(|| "-".into()),
            dev = devices(row),
            col = esc(&r.collocation),
            exit = r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            params = esc(&params.join(", ")),
        );
    }
    t.push_str("</tbody></table>");
    t
}

/// The form that the runs tables' checkboxes belong to: charts of the
/// chosen runs, whatever their workloads.
pub(crate) fn pick_form() -> &'static str {
    "<form id=\"pick\" class=\"pick\" method=\"get\" action=\"/compare\"><button type=\"submit\">Chart the selected runs</button></form>"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }

    #[test]
    fn times_and_durations() {
        assert_eq!(time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(time(1_709_251_199_000), "2024-02-29 23:59:59 UTC");
        assert_eq!(time(-1), "1969-12-31 23:59:59 UTC");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(time(253_402_300_799_999), "9999-12-31 23:59:59 UTC");
        assert_eq!(time(-62_135_596_800_000), "0001-01-01 00:00:00 UTC");
        assert_eq!(time(253_402_300_800_000), "253402300800000 ms since 1970");
        assert_eq!(time(i64::MIN), format!("{} ms since 1970", i64::MIN));
        assert_eq!(duration(12_400), "12.4 s");
        assert_eq!(duration(187_000), "3 min 07 s");
        assert_eq!(duration(3_720_000), "1 h 02 min");
    }
}
