//! SVG charts (plotters, rendered into strings): JCT CDF, utilisation and
//! queue length over time, one line per policy.

use plotters::prelude::*;

use crate::engine::Outcome;
use crate::error::SimError;

/// Points per line drawn, at most.
const MAX_POINTS: usize = 4_000;

type Line = (String, Vec<(f64, f64)>);

fn thin(v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let stride = v.len().div_ceil(MAX_POINTS).max(1);
    let last = v.last().copied();
    let mut out: Vec<(f64, f64)> = v.into_iter().step_by(stride).collect();
    if let Some(l) = last {
        if out.last() != Some(&l) {
            out.push(l);
        }
    }
    out
}

fn draw(title: &str, x_label: &str, y_label: &str, lines: &[Line]) -> Result<String, SimError> {
    let err = |e: &dyn std::fmt::Display| SimError::Config(format!("cannot draw {title}: {e}"));
    let (mut x1, mut y1) = (1e-9f64, 1e-9f64);
    for (_, pts) in lines {
        for &(x, y) in pts {
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d(0.0..x1 * 1.02, 0.0..y1 * 1.05)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()
            .map_err(|e| err(&e))?;
        for (k, (name, pts)) in lines.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// CDF of job completion times (hours).
pub fn jct_cdf_svg(outcomes: &[Outcome]) -> Result<String, SimError> {
    let lines: Vec<Line> = outcomes
        .iter()
        .map(|o| {
            let mut jct: Vec<f64> = o
                .jobs
                .iter()
                .filter_map(|j| j.finish.map(|f| (f - j.spec.arrival) / 3600.0))
                .collect();
            jct.sort_by(f64::total_cmp);
            let n = jct.len().max(1) as f64;
            let pts = jct
                .iter()
                .enumerate()
                .map(|(k, &x)| (x, (k + 1) as f64 / n))
                .collect();
            (o.policy.clone(), thin(pts))
        })
        .collect();
    draw(
        "JCT CDF",
        "job completion time (h)",
        "fraction of jobs",
        &lines,
    )
}

fn over_time(
    outcomes: &[Outcome],
    f: impl Fn(&Outcome, &crate::engine::Sample) -> f64,
) -> Vec<Line> {
    outcomes
        .iter()
        .map(|o| {
            let pts = o.timeline.iter().map(|s| (s.t / 3600.0, f(o, s))).collect();
            (o.policy.clone(), thin(pts))
        })
        .collect()
}

/// GPU utilisation (busy / all) over time.
pub fn utilisation_svg(outcomes: &[Outcome]) -> Result<String, SimError> {
    let lines = over_time(outcomes, |o, s| s.busy as f64 / o.total_gpus.max(1) as f64);
    draw(
        "GPU utilisation",
        "time (h)",
        "busy GPUs / all GPUs",
        &lines,
    )
}

/// Jobs waiting over time.
pub fn queue_svg(outcomes: &[Outcome]) -> Result<String, SimError> {
    let lines = over_time(outcomes, |_, s| s.pending as f64);
    draw("Queue length", "time (h)", "jobs waiting", &lines)
}
