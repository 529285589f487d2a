//! `jitter-profile [RUNS]`: what `ColorJitter` adds to a trainer's
//! augmentation of a decoded stream, one thread: microseconds per image of
//! `RandomResizedCrop(224)` + flip to `f32` NCHW alone, then with
//! `ColorJitter(0.4, 0.4, 0.4)`, then with `ColorJitter(0.4, 0.4, 0.4,
//! 0.1)` (the hue too), on 256 x 256 stored images of noise; the median of
//! RUNS (default 5) passes over 512 images.

use std::process::ExitCode;
use std::time::Instant;

use batchcast_pipeline::{Augmenter, ColorJitter, DType, Layout, OutputFormat, Transform};

const SIDE: u32 = 256;
const IMAGES: usize = 512;

fn main() -> ExitCode {
    let runs = match std::env::args().nth(1).map(|r| r.parse::<usize>()) {
        None => 5,
        Some(Ok(r)) if r > 0 => r,
        Some(_) => {
            eprintln!("jitter-profile: RUNS must be a positive number");
            return ExitCode::FAILURE;
        }
    };
    match run(runs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jitter-profile: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(runs: usize) -> Result<(), batchcast_pipeline::PipelineError> {
    // Noise from a small LCG: every hue sector and saturation level occurs.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let stored: Vec<u8> = (0..IMAGES * (SIDE * SIDE * 3) as usize)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 56) as u8
        })
        .collect();
    let keys: Vec<u64> = (0..IMAGES as u64).collect();
    let crop = Transform::Train {
        size: 224,
        scale: (0.08, 1.0),
        ratio: (3.0 / 4.0, 4.0 / 3.0),
        hflip_p: 0.5,
    };
    let f32_nchw = OutputFormat {
        layout: Layout::Nchw,
        dtype: DType::to_tensor(),
    };
    let strong = Some((0.6, 1.4));
    let jitter = ColorJitter {
        brightness: strong,
        contrast: strong,
        saturation: strong,
        hue: None,
    };
    let variants = [
        ("crop + flip", Augmenter::new(crop.clone(), f32_nchw, 1)?),
        (
            "+ ColorJitter(0.4, 0.4, 0.4)",
            Augmenter::new(crop.clone(), f32_nchw, 1)?.with_jitter(jitter)?,
        ),
        (
            "+ ColorJitter(0.4, 0.4, 0.4, 0.1)",
            Augmenter::new(crop, f32_nchw, 1)?.with_jitter(ColorJitter {
                hue: Some((-0.1, 0.1)),
                ..jitter
            })?,
        ),
    ];
    let mut out = vec![0u8; IMAGES * variants[0].1.image_bytes()];
    let mut times = vec![Vec::new(); variants.len()];
    for run in 0..runs {
        for (t, (_, augmenter)) in times.iter_mut().zip(&variants) {
            let t0 = Instant::now();
            augmenter.augment(run as u64, &stored, SIDE, SIDE, &keys, &mut out)?;
            t.push(t0.elapsed().as_secs_f64() * 1e6 / IMAGES as f64);
        }
    }
    println!("{IMAGES} stored {SIDE}x{SIDE} images to 224x224 f32 NCHW, one thread, median of {runs} runs:");
    let base = median(times[0].clone());
    for ((what, _), t) in variants.iter().zip(times) {
        let m = median(t);
        println!(
            "  {what:36} {m:7.1} us/image ({:.2}x of crop + flip)",
            m / base
        );
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
