//! Writes a synthetic drifting dataset for `batchcast serve --replay`: an
//! ImageFolder of CLASSES x PER_CLASS generated JPEGs and its `trace.csv`,
//! spread over STEPS time steps an hour apart with the class mix shifting
//! from the first classes to the last.
//!
//! `cargo run --release -p batchcast-pipeline --example drifting-trace -- DIR [CLASSES PER_CLASS STEPS]`
//! (default 10 classes of 100, 5 steps; small 64-96 px images).

use batchcast_pipeline::{class_split, generate_drifting_trace, DriftConfig, GenerateConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        return Err("usage: drifting-trace DIR [CLASSES PER_CLASS STEPS]".into());
    };
    let num = |i: usize, default: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(match args.get(i) {
            Some(a) => a.parse().map_err(|_| format!("{a:?} is not a count"))?,
            None => default,
        })
    };
    let config = GenerateConfig {
        classes: num(1, 10)?,
        images_per_class: num(2, 100)?,
        long_side: (64, 96),
        ..GenerateConfig::default()
    };
    let drift = DriftConfig {
        steps: num(3, 5)?,
        ..DriftConfig::default()
    };
    let csv = generate_drifting_trace(std::path::Path::new(dir), &config, &drift, &|_, _| {})?;
    println!("{}", csv.display());
    for step in 0..drift.steps {
        let mix: Vec<usize> = (0..config.classes)
            .map(|c| class_split(c, config.classes, config.images_per_class, drift.steps)[step])
            .collect();
        eprintln!("step {step}: per class {mix:?}");
    }
    Ok(())
}
