//! The "Data stalls" section of a run recorded by `batchcast stalls
//! --store`: the modes, the stalls, what sharing would buy (predicted and,
//! with `--validate`, measured) and the verdict, read back from the run's
//! `stalls/...` metrics (named in [`batchcast_store::keys::STALLS_PREFIX`]).
//!
//! A run without such metrics gets no section.

use std::collections::BTreeMap;
use std::fmt::Write;

use batchcast_store::keys::{STALLS_MODE_FIGURES, STALLS_PREFIX};
use batchcast_store::{RunId, Store};

use crate::error::UiError;
use crate::html::esc;

/// Most `stalls/` keys read for one run (an analysis has about 60).
const MAX_KEYS: usize = 400;
/// The modes, then the DDP run, the loader alone (`loader`, what one shared
/// producer does) and the two copies on one core (`timeshared`).
const MODES: [&str; 6] = ["synthetic", "cold", "warm", "ddp", "loader", "timeshared"];
const STALLS: [&str; 4] = ["fetch", "prep", "fetch+prep", "communication"];

/// The run's `stalls/` figures, by key less the prefix.
type Figures = BTreeMap<String, f64>;

/// The section's HTML, or an empty string for a run that is no analysis.
pub(crate) fn section(store: &Store, id: RunId) -> Result<String, UiError> {
    let figures = figures(store, id)?;
    if figures.is_empty() {
        return Ok(String::new());
    }
    let mut out = String::from("<section class=\"stalls\"><h2>Data stalls</h2>");
    if let Some(p) = store.params(id)?.into_iter().find(|p| p.key == "verdict") {
        let _ = write!(out, "<p class=\"verdict\">{}</p>", esc(&p.value));
    }
    modes_table(&figures, &mut out);
    stalls_table(&figures, &mut out);
    sharing_table(&figures, &mut out);
    out.push_str("</section>");
    Ok(out)
}

/// The last value of each of the run's `stalls/` metrics (at most
/// [`MAX_KEYS`]).
fn figures(store: &Store, id: RunId) -> Result<Figures, UiError> {
    let prefix = format!("{STALLS_PREFIX}/");
    let mut figures = BTreeMap::new();
    for key in store
        .metric_keys(id)?
        .into_iter()
        .filter(|k| k.starts_with(&prefix))
        .take(MAX_KEYS)
    {
        if let Some(v) = store.last_metric(id, &key)? {
            figures.insert(key[prefix.len()..].to_string(), v);
        }
    }
    Ok(figures)
}

/// The figure named `key`, if recorded.
fn get(figures: &Figures, key: String) -> Option<f64> {
    figures.get(&key).copied()
}

/// One row per mode measured: its rate, waits and CPU.
fn modes_table(figures: &Figures, out: &mut String) {
    out.push_str(
        "<table class=\"stall-modes\"><tr><th>mode</th><th>steps/s</th><th>samples/s</th>\
         <th>wait mean</th><th>wait p50</th><th>wait p95</th><th>CPU s/1000</th></tr>",
    );
    for mode in MODES {
        let f: Vec<Option<f64>> = STALLS_MODE_FIGURES
            .iter()
            .map(|name| get(figures, format!("{mode}/{name}")))
            .collect();
        if f.iter().all(Option::is_none) {
            continue;
        }
        let (sps, samples, _, wmean, w50, w95, cpu) = (f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
        let _ = write!(
            out,
            "<tr><th>{mode}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            num(sps, 1),
            num(samples, 1),
            ms(wmean),
            ms(w50),
            ms(w95),
            num(cpu, 2)
        );
    }
    out.push_str("</table>");
}

/// One row per stall found: its time per step and share of the step
/// (nothing when none was).
fn stalls_table(figures: &Figures, out: &mut String) {
    let stall_rows: Vec<String> = STALLS
        .iter()
        .filter_map(|s| {
            let step = get(figures, format!("{s}/per_step_s"));
            let share = get(figures, format!("{s}/share"));
            (step.is_some() || share.is_some()).then(|| {
                format!(
                    "<tr><th>{}</th><td>{}</td><td>{}</td></tr>",
                    esc(s),
                    ms(step),
                    share.map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
                )
            })
        })
        .collect();
    if !stall_rows.is_empty() {
        out.push_str(
            "<table class=\"stall-shares\"><tr><th>stall</th><th>per step</th><th>share of the step</th></tr>",
        );
        out.extend(stall_rows);
        out.push_str("</table>");
    }
}

/// One row per number of jobs: own loaders against one producer,
/// predicted and measured (nothing when no prediction was made).
fn sharing_table(figures: &Figures, out: &mut String) {
    let mut jobs: Vec<u64> = figures
        .keys()
        .filter_map(|k| k.strip_prefix("jobs_")?.split('/').next()?.parse().ok())
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    if jobs.is_empty() {
        return;
    }
    out.push_str(
        "<table class=\"stall-sharing\"><tr><th>jobs</th><th>own loaders</th><th>one producer</th>\
         <th>speedup</th></tr><tr><td colspan=\"4\" class=\"note\">aggregate samples/s: predicted [measured]</td></tr>",
    );
    for n in jobs {
        let v = |what: &str| get(figures, format!("jobs_{n}/{what}_samples_per_s"));
        let (pi, ps) = (v("predicted_independent"), v("predicted_shared"));
        let (mi, ms_) = (v("measured_independent"), v("measured_shared"));
        let _ = write!(
            out,
            "<tr><th>{n}</th><td>{}</td><td>{}</td><td>{}</td></tr>",
            pair(pi, mi, |x| format!("{x:.0}")),
            pair(ps, ms_, |x| format!("{x:.0}")),
            pair(ratio(ps, pi), ratio(ms_, mi), |x| format!("{x:.2}x")),
        );
    }
    out.push_str("</table>");
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

fn ms(seconds: Option<f64>) -> String {
    seconds.map_or("-".into(), |s| format!("{:.1} ms", s * 1000.0))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// "predicted [measured]", or the prediction alone.
fn pair(pred: Option<f64>, meas: Option<f64>, f: impl Fn(f64) -> String) -> String {
    match (pred, meas) {
        (Some(p), Some(m)) => format!("{} [{}]", f(p), f(m)),
        (Some(p), None) => f(p),
        (None, Some(m)) => format!("- [{}]", f(m)),
        (None, None) => "-".into(),
    }
}
