//! Helpers: synthetic images, encoders, small datasets, a pipeline runner.

use std::fs;
use std::path::Path;

use jpeg_encoder::ColorType;

use batchcast_pipeline::{
    BatchReport, Dataset, OnError, OutputFormat, Pipeline, PipelineError, Transform,
};

/// A smooth RGB test pattern with some detail, `w * h * 3` bytes.
pub fn pattern(w: u32, h: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let r = (x * 255 / w.max(2)) as u8;
            let g = (y * 255 / h.max(2)) as u8;
            let b = (((x / 4 + y / 4) % 2) * 120 + 60) as u8;
            v.extend_from_slice(&[r, g, b]);
        }
    }
    v
}

/// Four solid quadrants split at (`sx`, `sy`): red, green / blue, white.
pub const QUADRANT_COLOURS: [[u8; 3]; 4] = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]];

pub fn quadrants(w: u32, h: u32, sx: u32, sy: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let q = usize::from(x >= sx) + 2 * usize::from(y >= sy);
            v.extend_from_slice(&QUADRANT_COLOURS[q]);
        }
    }
    v
}

/// A solid colour image.
pub fn solid(w: u32, h: u32, rgb: [u8; 3]) -> Vec<u8> {
    rgb.iter()
        .copied()
        .cycle()
        .take((w * h * 3) as usize)
        .collect()
}

pub fn encode_jpeg(rgb: &[u8], w: u32, h: u32, quality: u8, subsample: bool) -> Vec<u8> {
    let sampling = if subsample {
        jpeg_encoder::SamplingFactor::F_2_2
    } else {
        jpeg_encoder::SamplingFactor::F_1_1
    };
    jpeg_with(rgb, (w, h, ColorType::Rgb), quality, |e| {
        e.set_sampling_factor(sampling)
    })
}

/// `pixels`, `w`x`h` of `colour`, as a JPEG of `quality` from an encoder
/// that `setup` has set up first (sampling, restarts, progressive).
pub fn jpeg_with(
    pixels: &[u8],
    (w, h, colour): (u32, u32, ColorType),
    quality: u8,
    setup: impl FnOnce(&mut jpeg_encoder::Encoder<&mut Vec<u8>>),
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, quality);
    setup(&mut enc);
    enc.encode(pixels, w as u16, h as u16, colour).unwrap();
    out
}

pub fn encode_png(
    data: &[u8],
    w: u32,
    h: u32,
    color: png::ColorType,
    depth: png::BitDepth,
) -> Vec<u8> {
    encode_png_with(data, w, h, color, depth, None)
}

pub fn encode_png_with(
    data: &[u8],
    w: u32,
    h: u32,
    color: png::ColorType,
    depth: png::BitDepth,
    palette: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(color);
        enc.set_depth(depth);
        if let Some(p) = palette {
            enc.set_palette(p.to_vec());
        }
        let mut writer = enc.write_header().unwrap();
        writer.write_image_data(data).unwrap();
        writer.finish().unwrap();
    }
    out
}

pub fn rgb_png(rgb: &[u8], w: u32, h: u32) -> Vec<u8> {
    encode_png(rgb, w, h, png::ColorType::Rgb, png::BitDepth::Eight)
}

/// Writes `files` (relative path, bytes) under `root`, creating folders.
pub fn write_tree(root: &Path, files: &[(&str, Vec<u8>)]) {
    for (rel, bytes) in files {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    }
}

/// A pipeline over `root` with one worker.
pub fn pipeline(
    root: &Path,
    transform: Transform,
    output: OutputFormat,
    on_error: OnError,
) -> Pipeline {
    Pipeline::new(Dataset::open(root).unwrap(), transform, output, 1, on_error)
        .unwrap()
        .with_skip_callback(|_| {})
}

/// [`pipeline`] with u8 NHWC output.
pub fn u8_pipeline(root: &Path, transform: Transform, on_error: OnError) -> Pipeline {
    pipeline(root, transform, OutputFormat::u8_nhwc(), on_error)
}

/// Runs one batch into fresh buffers; returns the report, images and labels.
pub fn run(
    p: &Pipeline,
    epoch: u64,
    indices: &[usize],
) -> Result<(BatchReport, Vec<u8>, Vec<i64>), PipelineError> {
    let mut images = vec![0u8; indices.len() * p.image_bytes()];
    let mut labels = vec![-7i64; indices.len()];
    let report = p.fill_batch(epoch, indices, &mut images, &mut labels)?;
    Ok((report, images, labels))
}

/// Pixel `(x, y)` of an RGB8 HWC image of width `w`.
pub fn px(img: &[u8], w: u32, x: u32, y: u32) -> [u8; 3] {
    let i = ((y * w + x) * 3) as usize;
    [img[i], img[i + 1], img[i + 2]]
}

pub fn max_abs_diff(a: &[u8], b: &[u8]) -> u8 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap_or(0)
}

pub fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(x.abs_diff(*y)))
        .sum::<f64>()
        / a.len() as f64
}
