//! Decoding: JPEG against a reference decoder and the original pixels, PNG
//! exactly, colour-type conversions.

use batchcast_pipeline::{decode_rgb, DecodeError};

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

/// Share of values that differ by more than one level, and the largest
/// difference.
fn disagreement(a: &[u8], b: &[u8]) -> (f64, u8) {
    let over = a.iter().zip(b).filter(|(x, y)| x.abs_diff(**y) > 1).count();
    (over as f64 / a.len() as f64, max_abs_diff(a, b))
}

// Two independent JPEG decoders do not agree bit for bit: IDCT and colour
// conversion precision differ (zune-jpeg vs libjpeg-turbo, measured on
// ImageNet-like photos: 4:4:4 mean 0.01 level, 0.2% of values off by more than
// 1, at most 3; 4:2:0 mean 0.15-0.34, at most 4, from zune rounding between
// its vertical and horizontal chroma upsampling). The tests pin those bounds.
#[test]
fn jpeg_matches_the_reference_decoder_within_one_level_almost_everywhere() {
    let (w, h) = (61, 47); // not a multiple of the block size
    let rgb = pattern(w, h);
    for quality in [100, 90, 75] {
        let jpeg = encode_jpeg(&rgb, w, h, quality, false);
        let ours = decode_rgb(&jpeg).unwrap();
        assert_eq!((ours.width, ours.height), (w, h));
        let reference = reference_decode(&jpeg);
        let (over, max) = disagreement(&ours.data, &reference);
        assert!(
            over < 0.02 && max <= 3,
            "quality {quality} 4:4:4: {over} off by >1, max {max}"
        );
        let mean = mean_abs_diff(&ours.data, &reference);
        assert!(mean < 0.1, "quality {quality} 4:4:4: mean diff {mean}");
    }
}

#[test]
fn subsampled_jpeg_is_close_to_the_reference_decoder() {
    let (w, h) = (64, 48);
    let rgb = pattern(w, h);
    let jpeg = encode_jpeg(&rgb, w, h, 90, true);
    let ours = decode_rgb(&jpeg).unwrap();
    let reference = reference_decode(&jpeg);
    let (over, max) = disagreement(&ours.data, &reference);
    let mean = mean_abs_diff(&ours.data, &reference);
    assert!(
        mean < 0.5 && over < 0.1 && max <= 6,
        "4:2:0: mean {mean}, {over} off by >1, max {max}"
    );
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
    let mut jpeg = Vec::new();
    jpeg_encoder::Encoder::new(&mut jpeg, 100)
        .encode(&gray, w as u16, h as u16, jpeg_encoder::ColorType::Luma)
        .unwrap();
    let img = decode_rgb(&jpeg).unwrap();
    assert_eq!(img.data.len(), (w * h * 3) as usize);
    assert!(img.data.chunks(3).all(|p| p[0] == p[1] && p[1] == p[2]));
    assert!(max_abs_diff(&img.data, &reference_decode(&jpeg)) <= 1);
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
    let mut jpeg = Vec::new();
    jpeg_encoder::Encoder::new(&mut jpeg, 100)
        .encode(&cmyk, w as u16, h as u16, jpeg_encoder::ColorType::Cmyk)
        .unwrap();
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
    // RGBA: alpha dropped, not composited.
    let rgba: Vec<u8> = (0..w * h * 4).map(|i| (i * 10) as u8).collect();
    let expect: Vec<u8> = rgba.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
    let img = decode_rgb(&encode_png(&rgba, w, h, ColorType::Rgba, BitDepth::Eight)).unwrap();
    assert_eq!(img.data, expect);
    // Gray and gray+alpha: replicated.
    let gray: Vec<u8> = (0..w * h).map(|i| (i * 40) as u8).collect();
    let expect: Vec<u8> = gray.iter().flat_map(|&g| [g, g, g]).collect();
    let img = decode_rgb(&encode_png(
        &gray,
        w,
        h,
        ColorType::Grayscale,
        BitDepth::Eight,
    ))
    .unwrap();
    assert_eq!(img.data, expect);
    let ga: Vec<u8> = gray.iter().flat_map(|&g| [g, 9]).collect();
    let img = decode_rgb(&encode_png(
        &ga,
        w,
        h,
        ColorType::GrayscaleAlpha,
        BitDepth::Eight,
    ))
    .unwrap();
    assert_eq!(img.data, expect);
    // 16-bit: the high byte.
    let rgb16: Vec<u8> = (0..w * h * 3).flat_map(|i| [(i * 7) as u8, 0xee]).collect();
    let expect: Vec<u8> = (0..w * h * 3).map(|i| (i * 7) as u8).collect();
    let img = decode_rgb(&encode_png(&rgb16, w, h, ColorType::Rgb, BitDepth::Sixteen)).unwrap();
    assert_eq!(img.data, expect);
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
