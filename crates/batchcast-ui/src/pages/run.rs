//! `/runs/{id}`: one run: facts, parameters, environment, events (and a
//! link to its workload's shared producer's), output (tail, full log
//! downloadable) and its charts, its and its producer's events marked.

use std::fmt::Write;

use batchcast_store::{keys, now_ms, LogStream, Run, RunId, RunRow, Store};

use crate::error::UiError;
use crate::html::{devices, duration, esc, page, status, time};

/// Bytes of each output stream shown on the page.
const TAIL: usize = 16 * 1024;

/// The page of one run.
pub(crate) struct RunPage;

impl super::ById for RunPage {
    const WHAT: &'static str = "run";

    fn render(store: &Store, id: i64) -> Result<String, UiError> {
        let row = store.run(id)?;
        let r = &row.run;
        let mut body = overview(store, &row)?;
        body.push_str(&super::stalls::section(store, id)?);
        body.push_str(&events(store, r)?);
        body.push_str(&logs(store, r)?);
        body.push_str(&super::charts(store, &[r], super::Lines::EachRun)?);
        let crumbs = [
            (
                format!("/workloads/{}", r.workload_id),
                format!("{} / {}", row.experiment, row.workload),
            ),
            (format!("/runs/{id}"), r.name.clone()),
        ];
        Ok(page(&format!("Run {} (#{id})", r.name), &crumbs, &body))
    }
}

/// The run's facts and command beside its parameters and environment.
fn overview(store: &Store, row: &RunRow) -> Result<String, UiError> {
    let r = &row.run;
    let mut body = String::from("<div class=\"cols\"><section><h2>Run</h2><table class=\"facts\">");
    for (k, v) in facts(row) {
        let _ = write!(body, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    let _ = write!(
        body,
        "</table><h2>Command</h2><pre class=\"command\">{}</pre></section><section><h2>Parameters</h2>",
        esc(&r.command.join(" "))
    );
    let params = store.params(r.id)?;
    if params.is_empty() {
        body.push_str("<p class=\"empty\">None.</p>");
    } else {
        body.push_str("<table class=\"params\">");
        for p in params {
            let _ = write!(
                body,
                "<tr><th>{}</th><td>{}</td><td class=\"source\">{:?}</td></tr>",
                esc(&p.key),
                esc(&p.value),
                p.source
            );
        }
        body.push_str("</table>");
    }
    body.push_str("<h2>Environment</h2>");
    body.push_str(&env_table(&r.env));
    body.push_str("</section></div>");
    Ok(body)
}

/// The rows of the run's facts table (names, and values as HTML).
fn facts(row: &RunRow) -> [(&'static str, String); 12] {
    let r = &row.run;
    let dash = || "-".to_string();
    [
        ("status", status(row)),
        (
            "exit code",
            r.exit_code.map(|c| c.to_string()).unwrap_or_else(dash),
        ),
        ("message", esc(r.message.as_deref().unwrap_or("-"))),
        ("started", r.start_ms.map(time).unwrap_or_else(dash)),
        ("ended", r.end_ms.map(time).unwrap_or_else(dash)),
        (
            "duration",
            r.duration_ms(now_ms()).map(duration).unwrap_or_else(dash),
        ),
        ("devices", devices(row)),
        ("collocation", esc(&r.collocation)),
        ("host", esc(&r.host)),
        ("pid", r.pid.map(|p| p.to_string()).unwrap_or_else(dash)),
        ("listeners", esc(&r.listeners.join(", "))),
        (
            "plan",
            match (&r.plan_file, r.plan_row) {
                (Some(f), Some(n)) => format!("{} row {n}", esc(f)),
                (Some(f), None) => esc(f),
                _ => dash(),
            },
        ),
    ]
}

/// The run's events, each with its time since the run started, and a link
/// to its workload's shared producer's (nothing when there are none).
fn events(store: &Store, r: &Run) -> Result<String, UiError> {
    let mut body = String::new();
    let events = store.events(r.id)?;
    let producer = producer_events(store, r)?;
    if !events.is_empty() || producer.is_some() {
        body.push_str("<h2>Events</h2>");
    }
    if let Some((data, n)) = producer {
        let _ = write!(
            body,
            "<p class=\"note producer-events\">Its workload's shared producer recorded {n} event{s} \
             (triggers, new data, a resumed stream): <a href=\"/runs/{data}\">run #{data}</a>. The charts mark them.</p>",
            s = if n == 1 { "" } else { "s" }
        );
    }
    if !events.is_empty() {
        body.push_str("<ul class=\"events\">");
        for e in events {
            // When in the run: the time since it started.
            let elapsed = match r.start_ms {
                Some(start) if e.ts_ms >= start => {
                    format!(
                        " <span class=\"elapsed\">+{}</span>",
                        duration(e.ts_ms - start)
                    )
                }
                _ => String::new(),
            };
            let _ = write!(
                body,
                "<li>{}{elapsed} <b>{}</b>: {}</li>",
                time(e.ts_ms),
                esc(&e.source),
                esc(&e.message)
            );
        }
        body.push_str("</ul>");
    }
    Ok(body)
}

/// The tail of the run's stdout and stderr (live while it runs), each
/// with a link to the whole.
fn logs(store: &Store, r: &Run) -> Result<String, UiError> {
    let id = r.id;
    let mut body = String::new();
    for stream in [LogStream::Stdout, LogStream::Stderr] {
        let (bytes, cut) = store.log(id, stream, Some(TAIL))?;
        let name = stream.as_str();
        let note = if cut {
            format!("last {} KiB; ", TAIL / 1024)
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<h2>{name}</h2><p class=\"note\">{note}<a href=\"/runs/{id}/log/{name}\" download>download the full {name}</a></p>\
             <pre class=\"log\" id=\"{name}\" data-run=\"{id}\" data-tail=\"{TAIL}\" data-live=\"{live}\">{}</pre>",
            esc(&String::from_utf8_lossy(&bytes)),
            live = u8::from(!r.status.is_terminal()),
        );
    }
    Ok(body)
}

/// The run of the shared producer of `r`'s workload and how many events
/// it recorded, when `r` is not that run and there are any.
fn producer_events(store: &Store, r: &Run) -> Result<Option<(RunId, usize)>, UiError> {
    if r.name == keys::DATA_RUN {
        return Ok(None);
    }
    let Some(data) = crate::markers::producer_run(store, r.workload_id)? else {
        return Ok(None);
    };
    let n = store.event_count(data)?;
    Ok((n > 0).then_some((data, n)))
}

/// The environment facts (a JSON object) as rows, nested keys dotted.
fn env_table(env: &serde_json::Value) -> String {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            serde_json::Value::String(s) => out.push((prefix.into(), s.clone())),
            other => out.push((prefix.into(), other.to_string())),
        }
    }
    let mut rows = Vec::new();
    walk("", env, &mut rows);
    if rows.is_empty() {
        return "<p class=\"empty\">Not recorded.</p>".into();
    }
    let mut t = String::from("<table class=\"env\">");
    for (k, v) in rows.into_iter().take(200) {
        let _ = write!(t, "<tr><th>{}</th><td>{}</td></tr>", esc(&k), esc(&v));
    }
    t.push_str("</table>");
    t
}
