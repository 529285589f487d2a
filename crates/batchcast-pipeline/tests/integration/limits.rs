//! Decode limits: the pixel budget and the least data for the declared
//! size, checked from the header before anything is allocated (fault 6 of
//! issue 10: a 655-byte JPEG declaring 30000x30000 cost 1.3 GiB and 5-9 s).

use batchcast_pipeline::{
    decode_rgb, decode_rgb_into, DecodeError, DecodeLimits, OnError, RgbImage, Transform,
    DEFAULT_MAX_PIXELS,
};

use crate::common::*;
use crate::forge::set_jpeg_size;

/// A small 4:2:0 JPEG whose header declares `w`x`h`: a valid header and
/// the scan data of a 16x16 image.
pub fn bomb_jpeg(w: u16, h: u16, progressive: bool) -> Vec<u8> {
    let rgb = (16, 16, jpeg_encoder::ColorType::Rgb);
    let mut out = jpeg_with(&pattern(16, 16), rgb, 90, |e| {
        e.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
        e.set_progressive(progressive);
    });
    set_jpeg_size(&mut out, w, h);
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A small PNG whose IHDR declares `w`x`h` (CRC fixed up).
fn bomb_png(w: u32, h: u32) -> Vec<u8> {
    let mut png = rgb_png(&pattern(16, 16), 16, 16);
    // Signature (8), IHDR length (4), "IHDR" (4), then width and height.
    png[16..20].copy_from_slice(&w.to_be_bytes());
    png[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&png[12..29]);
    png[29..33].copy_from_slice(&crc.to_be_bytes());
    png
}

fn unlimited() -> DecodeLimits {
    DecodeLimits {
        max_pixels: u64::MAX,
    }
}

#[test]
fn a_655_byte_jpeg_declaring_30000x30000_is_refused_from_its_header() {
    for progressive in [false, true] {
        let bomb = bomb_jpeg(30000, 30000, progressive);
        assert!(bomb.len() < 1500, "{} bytes", bomb.len());
        let err = decode_rgb(&bomb).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::TooManyPixels {
                    width: 30000,
                    height: 30000,
                    max_pixels: DEFAULT_MAX_PIXELS
                }
            ),
            "{err}"
        );
        let m = err.to_string();
        assert!(
            m.contains("30000x30000") && m.contains("--max-pixels"),
            "{m}"
        );
        // Past the budget, the data is too little for the size.
        let mut out = RgbImage::default();
        let err = decode_rgb_into(&bomb, &mut out, &unlimited()).unwrap_err();
        assert!(
            matches!(err, DecodeError::TooLittleData { width: 30000, .. }),
            "{err}"
        );
        assert!(out.data.capacity() < 1 << 20, "allocated for the bomb");
    }
}

#[test]
fn a_jpeg_within_the_budget_but_short_of_data_is_refused() {
    // 4000x4000 4:2:0 needs at least 250000 + 2 * 62500 blocks of 2 bits.
    let bomb = bomb_jpeg(4000, 4000, false);
    let err = decode_rgb(&bomb).unwrap_err();
    assert!(
        matches!(err, DecodeError::TooLittleData { need: 93750, .. }),
        "{err}"
    );
}

#[test]
fn a_truncated_scan_stops_at_the_end_of_the_data() {
    // Enough data to pass the least-data bound, far too little for the
    // image: the decoder stops where the data ends, with an error.
    let (w, h) = (512, 512);
    let jpeg = encode_jpeg(&pattern(w, h), w, h, 90, true);
    let cut = &jpeg[..jpeg.len() / 3];
    let err = decode_rgb(cut).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn the_budget_is_an_option_and_exact() {
    let (w, h) = (40, 30);
    let jpeg = encode_jpeg(&pattern(w, h), w, h, 90, true);
    let png = rgb_png(&pattern(w, h), w, h);
    for file in [&jpeg, &png] {
        let mut out = RgbImage::default();
        let at = DecodeLimits { max_pixels: 1200 };
        decode_rgb_into(file, &mut out, &at).unwrap();
        assert_eq!((out.width, out.height), (40, 30));
        let under = DecodeLimits { max_pixels: 1199 };
        let err = decode_rgb_into(file, &mut out, &under).unwrap_err();
        assert!(matches!(err, DecodeError::TooManyPixels { .. }), "{err}");
    }
}

#[test]
fn a_png_declaring_30000x30000_is_refused_from_its_header() {
    let bomb = bomb_png(30000, 30000);
    let err = decode_rgb(&bomb).unwrap_err();
    assert!(matches!(err, DecodeError::TooManyPixels { .. }), "{err}");
    let mut out = RgbImage::default();
    let err = decode_rgb_into(&bomb, &mut out, &unlimited()).unwrap_err();
    assert!(matches!(err, DecodeError::TooLittleData { .. }), "{err}");
}

#[test]
fn the_pipeline_skips_a_bomb_naming_the_file_and_the_option() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("a/good.png", rgb_png(&pattern(16, 16), 16, 16)),
            ("a/bomb.jpg", bomb_jpeg(30000, 30000, false)),
            (
                "b/good.jpg",
                encode_jpeg(&pattern(32, 24), 32, 24, 90, true),
            ),
        ],
    );
    let p = u8_pipeline(dir.path(), Transform::train(8), OnError::Skip);
    assert_eq!(p.limits().max_pixels, DEFAULT_MAX_PIXELS);
    let (report, _, labels) = run(&p, 0, &[0, 1, 2]).unwrap();
    assert_eq!(report.rows_written, 2);
    assert_eq!(&labels[..2], &[0, 1]);
    let skipped = &report.skipped[0];
    assert!(skipped.path.ends_with("a/bomb.jpg"), "{skipped:?}");
    assert!(skipped.reason.contains("30000x30000"), "{skipped:?}");
    assert!(skipped.reason.contains("--max-pixels"), "{skipped:?}");

    // A smaller budget skips the 32x24 file too.
    let p = u8_pipeline(dir.path(), Transform::train(8), OnError::Skip).with_max_pixels(500);
    let (report, _, _) = run(&p, 0, &[0, 1, 2]).unwrap();
    assert_eq!(report.rows_written, 1);
    assert!(report.skipped[1].path.ends_with("b/good.jpg"));
}
