//! Decoding: JPEG against libjpeg-turbo (stored reference decodes) and
//! another decoder, PNG exactly, colour-type conversions.

use std::path::Path;

use batchcast_pipeline::{decode_rgb, DecodeError};

use jpeg_encoder::ColorType;

use crate::common::*;

fn reference_decode(jpeg: &[u8]) -> Vec<u8> {
    let mut d = jpeg_decoder::Decoder::new(jpeg);
    let pixels = d.decode().unwrap();
    let info = d.info().unwrap();
    match info.pixel_format {
        jpeg_decoder::PixelFormat::RGB24 => pixels,
        jpeg_decoder::PixelFormat::L8 => pixels.iter().flat_map(|&g| [g, g, g]).collect(),
        other => panic!("unexpected reference format {other:?}"),
    }
}

/// RGB8 pixels of a PNG (the stored reference decodes are RGB8).
fn png_rgb(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

// tests/fixtures/jpeg: photo-like JPEGs written by Pillow (libjpeg-turbo
// 3.2) in 4:4:4, 4:2:2, 4:2:0 and grayscale, odd and tiny sizes, qualities
// 50-100, one with restart markers; each with PIL's own decode
// (`convert("RGB")`, what torchvision's loader gives) as PNG. See
// make_fixtures.py there.
#[test]
fn jpeg_decodes_exactly_as_libjpeg_turbo_does() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jpeg");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jpg") {
            continue;
        }
        let ours = decode_rgb(&std::fs::read(&path).unwrap()).unwrap();
        let (w, h, reference) = png_rgb(&std::fs::read(path.with_extension("png")).unwrap());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!((ours.width, ours.height), (w, h), "{name}");
        let max = max_abs_diff(&ours.data, &reference);
        assert!(max <= 1, "{name}: off by up to {max}");
        assert_eq!(ours.data, reference, "{name}: not bit-exact");
        checked.push(name);
    }
    checked.sort();
    assert_eq!(checked.len(), 9, "{checked:?}");
    for kind in ["444", "422", "420", "gray", "restart"] {
        assert!(
            checked.iter().any(|n| n.contains(kind)),
            "no {kind} fixture"
        );
    }
}

/// A photo-like test image: smooth gradients, a hard edge, fine texture.
fn photo(w: u32, h: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    let mut noise = 0x2545_f491u32;
    for y in 0..h {
        for x in 0..w {
            noise ^= noise << 13;
            noise ^= noise >> 17;
            noise ^= noise << 5;
            let n = (noise % 17) as i32 - 8;
            let edge = if x * 3 > w * 2 && y > h / 3 { 90 } else { 0 };
            let r = 40 + (x * 160 / w.max(1)) as i32 + n;
            let g = 200 - (y * 150 / h.max(1)) as i32 + edge - n;
            let b = 80 + (((x / 3 + y / 2) % 5) * 30) as i32 + n;
            v.extend([r, g, b].map(|c| c.clamp(0, 255) as u8));
        }
    }
    v
}

fn encode(
    rgb: &[u8],
    w: u32,
    h: u32,
    quality: u8,
    sampling: jpeg_encoder::SamplingFactor,
) -> Vec<u8> {
    jpeg_with(rgb, (w, h, ColorType::Rgb), quality, |e| {
        e.set_sampling_factor(sampling)
    })
}

// The jpeg-decoder crate is not libjpeg: on x86 it uses a 16-bit SIMD IDCT,
// a 6-bit fixed-point colour conversion and other chroma rounding, and it
// is itself up to 5 levels off libjpeg-turbo (mean about 0.05). So against
// it: close on average, never far, on many sizes and subsamplings. (Not
// below 5 pixels wide: libjpeg box-upsamples chroma rows of 2 samples or
// fewer, jpeg-decoder does not; the fixtures cover that case.)
#[test]
fn jpeg_is_close_to_another_decoder_at_every_size_and_subsampling() {
    use jpeg_encoder::SamplingFactor as S;
    for (w, h) in [(64, 48), (61, 47), (33, 17), (7, 5), (5, 3), (130, 9)] {
        let rgb = photo(w, h);
        for (name, sampling) in [
            ("4:4:4", S::F_1_1),
            ("4:2:2", S::F_2_1),
            ("4:2:0", S::F_2_2),
        ] {
            for quality in [100, 90, 75] {
                let jpeg = encode(&rgb, w, h, quality, sampling);
                let ours = decode_rgb(&jpeg).unwrap();
                assert_eq!((ours.width, ours.height), (w, h));
                let reference = reference_decode(&jpeg);
                let (mean, max) = (
                    mean_abs_diff(&ours.data, &reference),
                    max_abs_diff(&ours.data, &reference),
                );
                let what = format!("{w}x{h} {name} q{quality}: mean {mean}, max {max}");
                assert!(mean < 0.5 && max <= 6, "{what}");
            }
        }
    }
}

#[test]
fn restart_markers_do_not_change_the_pixels() {
    let (w, h) = (77, 45);
    let rgb = photo(w, h);
    for sampling in [
        jpeg_encoder::SamplingFactor::F_1_1,
        jpeg_encoder::SamplingFactor::F_2_2,
    ] {
        let plain = encode(&rgb, w, h, 90, sampling);
        let with_restarts = jpeg_with(&rgb, (w, h, ColorType::Rgb), 90, |e| {
            e.set_sampling_factor(sampling);
            e.set_restart_interval(2);
        });
        assert!(with_restarts.windows(2).any(|p| p == [0xff, 0xd0]));
        assert_eq!(
            decode_rgb(&with_restarts).unwrap(),
            decode_rgb(&plain).unwrap()
        );
    }
}

#[test]
fn progressive_jpeg_decodes_close_to_its_baseline_twin() {
    // Progressive files go to the general decoder (zune-jpeg).
    let (w, h) = (64, 48);
    let rgb = photo(w, h);
    let baseline = encode(&rgb, w, h, 95, jpeg_encoder::SamplingFactor::F_2_2);
    let progressive = jpeg_with(&rgb, (w, h, ColorType::Rgb), 95, |e| {
        e.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
        e.set_progressive(true);
    });
    let (a, b) = (
        decode_rgb(&baseline).unwrap(),
        decode_rgb(&progressive).unwrap(),
    );
    assert_eq!((a.width, a.height), (b.width, b.height));
    let mean = mean_abs_diff(&a.data, &b.data);
    assert!(mean < 1.0, "mean diff {mean}");
}

#[test]
fn truncated_scan_is_an_error() {
    let (w, h) = (64, 48);
    let jpeg = encode(&photo(w, h), w, h, 90, jpeg_encoder::SamplingFactor::F_2_2);
    for cut in [jpeg.len() * 2 / 3, jpeg.len() - 40] {
        let err = decode_rgb(&jpeg[..cut]).unwrap_err();
        assert!(matches!(err, DecodeError::Jpeg(_)), "{err}");
    }
}

#[test]
fn quality_100_jpeg_is_close_to_the_original() {
    let (w, h) = (40, 30);
    let rgb = pattern(w, h);
    let ours = decode_rgb(&encode_jpeg(&rgb, w, h, 100, false)).unwrap();
    let mean = mean_abs_diff(&ours.data, &rgb);
    assert!(mean < 2.0, "mean diff {mean}");
}

#[test]
fn grayscale_jpeg_becomes_rgb() {
    let (w, h) = (16, 8);
    let gray: Vec<u8> = (0..w * h).map(|i| (i * 2) as u8).collect();
    let jpeg = jpeg_with(&gray, (w, h, ColorType::Luma), 100, |_| {});
    let img = decode_rgb(&jpeg).unwrap();
    assert_eq!(img.data.len(), (w * h * 3) as usize);
    assert!(img.data.chunks(3).all(|p| p[0] == p[1] && p[1] == p[2]));
    assert!(max_abs_diff(&img.data, &reference_decode(&jpeg)) <= 1);
    let rgb: Vec<u8> = gray.iter().flat_map(|&g| [g, g, g]).collect();
    assert!(max_abs_diff(&img.data, &rgb) <= 2);
}

#[test]
fn cmyk_jpeg_becomes_rgb() {
    let (w, h) = (16, 16);
    // CMYK (0, 255, 255, 0): red.
    let cmyk: Vec<u8> = [0u8, 255, 255, 0]
        .iter()
        .copied()
        .cycle()
        .take((w * h * 4) as usize)
        .collect();
    let jpeg = jpeg_with(&cmyk, (w, h, ColorType::Cmyk), 100, |_| {});
    let img = decode_rgb(&jpeg).unwrap();
    assert_eq!(img.data.len(), (w * h * 3) as usize);
    let [r, g, b] = px(&img.data, w, 8, 8);
    assert!(r > 200 && g < 60 && b < 60, "({r}, {g}, {b})");
}

#[test]
fn png_decodes_exactly() {
    let (w, h) = (13, 7);
    let rgb = pattern(w, h);
    assert_eq!(decode_rgb(&rgb_png(&rgb, w, h)).unwrap().data, rgb);
}

#[test]
fn png_colour_types_convert_like_pil_convert_rgb() {
    use png::{BitDepth, ColorType};
    let (w, h) = (3, 2);
    let rgba: Vec<u8> = (0..w * h * 4).map(|i| (i * 10) as u8).collect();
    let gray: Vec<u8> = (0..w * h).map(|i| (i * 40) as u8).collect();
    let gray_rgb: Vec<u8> = gray.iter().flat_map(|&g| [g, g, g]).collect();
    let cases = [
        // RGBA: alpha dropped, not composited.
        (
            "rgba",
            rgba.clone(),
            ColorType::Rgba,
            BitDepth::Eight,
            rgba.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
        ),
        // Gray and gray+alpha: replicated.
        (
            "gray",
            gray.clone(),
            ColorType::Grayscale,
            BitDepth::Eight,
            gray_rgb.clone(),
        ),
        (
            "gray+alpha",
            gray.iter().flat_map(|&g| [g, 9]).collect(),
            ColorType::GrayscaleAlpha,
            BitDepth::Eight,
            gray_rgb,
        ),
        // 16-bit: the high byte.
        (
            "rgb16",
            (0..w * h * 3).flat_map(|i| [(i * 7) as u8, 0xee]).collect(),
            ColorType::Rgb,
            BitDepth::Sixteen,
            (0..w * h * 3).map(|i| (i * 7) as u8).collect::<Vec<u8>>(),
        ),
    ];
    for (what, pixels, colour, depth, expect) in cases {
        let img = decode_rgb(&encode_png(&pixels, w, h, colour, depth)).unwrap();
        assert_eq!(img.data, expect, "{what}");
    }
    // Palette: expanded.
    let palette = [10, 20, 30, 200, 100, 50];
    let idx = vec![0u8, 1, 1, 0, 1, 0];
    let png = encode_png_with(
        &idx,
        w,
        h,
        ColorType::Indexed,
        BitDepth::Eight,
        Some(&palette),
    );
    let img = decode_rgb(&png).unwrap();
    assert_eq!(&img.data[..6], &[10, 20, 30, 200, 100, 50]);
    // 1-bit gray: 0 / 255.
    let bits = vec![0b1010_0000u8, 0b0100_0000];
    let img = decode_rgb(&encode_png(
        &bits,
        w,
        h,
        ColorType::Grayscale,
        BitDepth::One,
    ))
    .unwrap();
    assert_eq!(&img.data[..9], &[255, 255, 255, 0, 0, 0, 255, 255, 255]);
}

#[test]
fn truncated_and_foreign_data_are_errors() {
    let (w, h) = (32, 32);
    let png = rgb_png(&pattern(w, h), w, h);
    assert!(matches!(
        decode_rgb(&png[..png.len() / 2]),
        Err(DecodeError::Png(_))
    ));
    assert!(matches!(
        decode_rgb(b"BM not an image"),
        Err(DecodeError::UnknownFormat(_))
    ));
    assert!(decode_rgb(&[]).is_err());
}
