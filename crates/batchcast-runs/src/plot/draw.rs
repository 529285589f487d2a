//! The chart itself: an SVG drawn with plotters, or a PNG of it.

use std::path::Path;

use plotters::prelude::*;

use batchcast_store::{unit_label, XAxis};

use crate::{Result, RunId, Store, StoreError};

/// Points per run drawn, at most (longer series are thinned evenly).
const MAX_DRAWN: usize = 20_000;

/// The kinds of file a chart is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics, as drawn.
    Svg,
    /// Rendered at twice the SVG's size, for print.
    Png,
}

impl Format {
    /// The format a file name asks for by its extension.
    pub fn of(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "svg" => Some(Format::Svg),
            "png" => Some(Format::Png),
            _ => None,
        }
    }
}

/// Draws `key` of `runs` into `out`, as SVG or PNG.
pub fn plot(
    store: &Store,
    runs: &[RunId],
    key: &str,
    x: XAxis,
    format: Format,
    out: &Path,
) -> Result<()> {
    let svg = draw_svg(store, runs, key, x)?;
    let bytes = match format {
        Format::Svg => svg.into_bytes(),
        Format::Png => super::png::render(&svg)?,
    };
    std::fs::write(out, bytes).map_err(StoreError::export_file("cannot write", out))
}

/// The SVG text of a chart of `key` of `runs`.
fn draw_svg(store: &Store, runs: &[RunId], key: &str, x: XAxis) -> Result<String> {
    let mut series = Vec::new();
    for &id in runs {
        let row = store.run(id)?;
        let start = row.run.start_ms.unwrap_or(0);
        let points = store.metric_thinned(id, key, None, MAX_DRAWN)?;
        let xy: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.value.is_finite())
            .map(|p| match x {
                XAxis::Elapsed => ((p.ts_ms - start) as f64 / 1000.0, p.value),
                XAxis::Step => (p.step as f64, p.value),
            })
            .collect();
        series.push((format!("{}/{} (#{id})", row.workload, row.run.name), xy));
    }
    let all: Vec<&(f64, f64)> = series.iter().flat_map(|(_, s)| s).collect();
    if all.is_empty() {
        return Err(StoreError::NotFound {
            what: format!("metric {key:?} in runs {runs:?}"),
        });
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.05).max(1e-9);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let draw =
        |e: &dyn std::fmt::Display| StoreError::Export(format!("cannot draw the chart: {e}"));
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (900, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw(&e))?;
        let x_label = match x {
            XAxis::Elapsed => "elapsed time since the run started (s)",
            XAxis::Step => "step",
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(key, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| draw(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(unit_label(key))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| draw(&e))?;
        for (i, (name, xy)) in series.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba().stroke_width(2);
            chart
                .draw_series(LineSeries::new(xy.iter().copied(), colour))
                .map_err(|e| draw(&e))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(
                        vec![(x, y), (x + 18, y)],
                        Palette99::pick(i).stroke_width(2),
                    )
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| draw(&e))?;
        root.present().map_err(|e| draw(&e))?;
    }
    Ok(text)
}
