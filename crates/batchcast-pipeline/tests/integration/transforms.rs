//! Transform geometry on synthetic patterns, output layouts, reproducibility.

use batchcast_pipeline::{
    DType, Dataset, Layout, OnError, OutputFormat, Pipeline, Region, Transform,
};

use crate::common::*;

/// One-image ImageFolder holding `png`.
fn one_image(png: Vec<u8>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("only/img.png", png)]);
    dir
}

#[test]
fn eval_resize_and_center_crop_put_the_quadrant_boundaries_where_torchvision_does() {
    // 400x300, split at x=200, y=150. Resize(256) -> 341x256 (scale 300/256);
    // the split lands at x=170.67, y=128; CenterCrop(224) takes x from 58
    // (round(58.5) = 58) and y from 16, so in the output at x=112.67, y=112.
    let (w, h) = (400, 300);
    let dir = one_image(rgb_png(&quadrants(w, h, 200, 150), w, h));
    let p = u8_pipeline(dir.path(), Transform::eval(), OnError::Fail);
    let (_, img, _) = run(&p, 0, &[0]).unwrap();
    let c = QUADRANT_COLOURS;
    // Well inside each quadrant: the pure colour.
    assert_eq!(px(&img, 224, 0, 0), c[0]);
    assert_eq!(px(&img, 224, 111, 110), c[0]);
    assert_eq!(px(&img, 224, 114, 0), c[1]);
    assert_eq!(px(&img, 224, 223, 110), c[1]);
    assert_eq!(px(&img, 224, 0, 113), c[2]);
    assert_eq!(px(&img, 224, 111, 223), c[2]);
    assert_eq!(px(&img, 224, 114, 113), c[3]);
    assert_eq!(px(&img, 224, 223, 223), c[3]);
    // The transition column is 112/113 and the row 111/112.
    let red_to_green = px(&img, 224, 112, 50);
    assert!(
        red_to_green[0] > 100 && red_to_green[1] > 0,
        "{red_to_green:?}"
    );
    let row_above = px(&img, 224, 50, 111);
    let row_below = px(&img, 224, 50, 112);
    assert!(row_above[0] > row_below[0], "{row_above:?} {row_below:?}");
}

#[test]
fn eval_output_equals_full_resize_then_crop() {
    // The windowed resample must give the pixels of the full Resize, cropped.
    let (w, h) = (90, 70);
    let rgb = pattern(w, h);
    let dir = one_image(rgb_png(&rgb, w, h));
    let eval = Transform::Eval {
        resize: 40,
        crop: 32,
    };
    let p = u8_pipeline(dir.path(), eval, OnError::Fail);
    let (_, got, _) = run(&p, 0, &[0]).unwrap();
    // Full resize to 51x40 through a Train transform pinned to the whole image.
    let (rw, rh) = batchcast_pipeline::resize_output_size(w, h, 40);
    assert_eq!((rw, rh), (51, 40));
    let mut full = vec![0u8; (rw * rh * 3) as usize];
    let src = batchcast_pipeline::RgbImage {
        width: w,
        height: h,
        data: rgb,
    };
    let mut resizer = fast_image_resize::Resizer::new();
    let src_view = fast_image_resize::images::ImageRef::new(
        w,
        h,
        &src.data,
        fast_image_resize::PixelType::U8x3,
    )
    .unwrap();
    let mut dst = fast_image_resize::images::Image::from_slice_u8(
        rw,
        rh,
        &mut full,
        fast_image_resize::PixelType::U8x3,
    )
    .unwrap();
    let opts = fast_image_resize::ResizeOptions::new().resize_alg(
        fast_image_resize::ResizeAlg::Convolution(fast_image_resize::FilterType::Bilinear),
    );
    resizer.resize(&src_view, &mut dst, &opts).unwrap();
    let (top, left) = batchcast_pipeline::center_crop_offsets(rw, rh, 32, 32);
    let mut expect = Vec::new();
    for y in top..top + 32 {
        for x in left..left + 32 {
            expect.extend_from_slice(&px(&full, rw, x, y));
        }
    }
    let max = max_abs_diff(&got, &expect);
    assert!(max <= 1, "max diff {max}");
}

/// Train transform that always takes the whole `w` x `h` image.
fn whole_image_train(w: u32, h: u32, size: u32, hflip_p: f32) -> Transform {
    let r = w as f32 / h as f32;
    Transform::Train {
        size,
        scale: (1.0, 1.0),
        ratio: (r, r),
        hflip_p,
    }
}

#[test]
fn hflip_mirrors_the_output() {
    let (w, h) = (64, 48);
    let dir = one_image(rgb_png(&quadrants(w, h, 16, 24), w, h));
    let plain = u8_pipeline(dir.path(), whole_image_train(w, h, 32, 0.0), OnError::Fail);
    let flipped = u8_pipeline(dir.path(), whole_image_train(w, h, 32, 1.0), OnError::Fail);
    let (_, a, _) = run(&plain, 0, &[0]).unwrap();
    let (_, b, _) = run(&flipped, 0, &[0]).unwrap();
    for y in 0..32 {
        for x in 0..32 {
            assert_eq!(px(&a, 32, x, y), px(&b, 32, 31 - x, y), "({x}, {y})");
        }
    }
    // The red quadrant (left quarter, top half) is on the right once flipped.
    assert_eq!(px(&b, 32, 31, 0), QUADRANT_COLOURS[0]);
    assert_eq!(px(&a, 32, 0, 0), QUADRANT_COLOURS[0]);
}

#[test]
fn random_resized_crop_respects_scale_and_ratio_and_is_reproducible() {
    let t = Transform::train(224);
    for (w, h) in [(500u32, 375u32), (375, 500), (64, 64), (1000, 100)] {
        let area = f64::from(w * h);
        let mut flips = 0;
        let mut fallbacks = 0;
        let n = 2000;
        for i in 0..n {
            let plan = t.plan(w, h, 7, 3, i);
            assert_eq!(plan, t.plan(w, h, 7, 3, i), "reproducible");
            assert_eq!((plan.out_width, plan.out_height), (224, 224));
            let Region::Crop(c) = plan.region else {
                panic!("train crops")
            };
            assert!(c.width >= 1 && c.height >= 1);
            assert!(
                c.left + c.width <= w && c.top + c.height <= h,
                "{c:?} in {w}x{h}"
            );
            flips += usize::from(plan.flip);
            let (cw, ch) = (f64::from(c.width), f64::from(c.height));
            let frac = cw * ch / area;
            let ratio = cw / ch;
            // Rounding w and h to integers moves area and ratio a little.
            let slack = 0.5 / cw + 0.5 / ch;
            let in_bounds = frac >= 0.08 * (1.0 - 2.0 * slack) - 1e-9
                && frac <= 1.0
                && ratio >= 0.75 * (1.0 - 2.0 * slack)
                && ratio <= 4.0 / 3.0 * (1.0 + 2.0 * slack);
            if !in_bounds {
                // Only the central fallback may leave the bounds.
                fallbacks += 1;
                assert_eq!(c.left, (w - c.width) / 2, "{c:?}");
                assert_eq!(c.top, (h - c.height) / 2, "{c:?}");
            }
        }
        assert!(
            (800..1200).contains(&flips),
            "{w}x{h}: {flips} flips of {n}"
        );
        if w == h || (w, h) == (500, 375) || (w, h) == (375, 500) {
            assert_eq!(fallbacks, 0, "{w}x{h}");
        }
    }
    // Other epoch, index or seed: another crop (almost always).
    let a = t.plan(500, 375, 7, 3, 11);
    assert_ne!(a, t.plan(500, 375, 7, 4, 11));
    assert_ne!(a, t.plan(500, 375, 7, 3, 12));
    assert_ne!(a, t.plan(500, 375, 8, 3, 11));
}

#[test]
fn nchw_and_nhwc_are_transposes_and_f32_is_normalised_u8() {
    let (w, h) = (50, 40);
    let dir = one_image(rgb_png(&pattern(w, h), w, h));
    let train_to = |layout, dtype| {
        let output = OutputFormat { layout, dtype };
        pipeline(dir.path(), Transform::train(16), output, OnError::Fail)
    };
    let nhwc = train_to(Layout::Nhwc, DType::U8);
    let nchw = train_to(Layout::Nchw, DType::U8);
    let f32_nchw = train_to(Layout::Nchw, DType::imagenet());
    let (_, a, _) = run(&nhwc, 5, &[0]).unwrap();
    let (_, b, _) = run(&nchw, 5, &[0]).unwrap();
    let (_, f, _) = run(&f32_nchw, 5, &[0]).unwrap();
    assert_eq!(nchw.image_shape(), [3, 16, 16]);
    assert_eq!(nhwc.image_shape(), [16, 16, 3]);
    assert_eq!(f32_nchw.image_bytes(), 3 * 16 * 16 * 4);
    let f: Vec<f32> = f
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    for y in 0..16 {
        for x in 0..16 {
            for c in 0..3 {
                let hwc = a[(y * 16 + x) * 3 + c];
                let chw = c * 256 + y * 16 + x;
                assert_eq!(hwc, b[chw]);
                let expect =
                    (f32::from(hwc) / 255.0 - DType::IMAGENET_MEAN[c]) / DType::IMAGENET_STD[c];
                assert_eq!(f[chw], expect);
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_worker_count_and_change_with_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..12u32)
        .map(|i| {
            (
                format!("c{}/{i:02}.png", i % 3),
                rgb_png(&pattern(30 + i, 20 + i), 30 + i, 20 + i),
            )
        })
        .collect();
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    write_tree(dir.path(), &files);
    let make = |workers| {
        Pipeline::new(
            Dataset::open(dir.path()).unwrap(),
            Transform::train(8),
            OutputFormat::u8_nhwc(),
            workers,
            OnError::Fail,
        )
        .unwrap()
        .with_seed(99)
    };
    let idx: Vec<usize> = (0..12).rev().collect();
    let (one, two) = (make(1), make(2));
    let (ra, a, la) = run(&one, 4, &idx).unwrap();
    let (rb, b, lb) = run(&two, 4, &idx).unwrap();
    assert_eq!(ra.rows_written, 12);
    assert_eq!(ra, rb);
    assert_eq!(a, b);
    assert_eq!(la, lb);
    let (_, again, _) = run(&one, 4, &idx).unwrap();
    assert_eq!(a, again);
    let (_, other_epoch, _) = run(&one, 5, &idx).unwrap();
    assert_ne!(a, other_epoch);
}

#[test]
fn dct_scaling_decodes_large_jpegs_smaller_and_stays_within_a_few_levels() {
    // Smooth photo-like content of several sizes: 4:2:0 at 520x400 (1/2
    // scale for a 192 resize), 4:4:4 at 800x1100 (1/4), and 300x260 (too
    // small to scale: identical bytes).
    let smooth = |w: u32, h: u32| -> Vec<u8> {
        let mut v = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                let (fx, fy) = (f64::from(x), f64::from(y));
                v.extend([
                    (128.0 + 100.0 * (fx / 37.0).sin() * (fy / 53.0).cos()) as u8,
                    (128.0 + 90.0 * ((fx + 2.0 * fy) / 61.0).cos()) as u8,
                    (40.0 + fx / 5.0 + fy / 7.0).min(255.0) as u8,
                ]);
            }
        }
        v
    };
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            (
                "a/half.jpg",
                encode_jpeg(&smooth(520, 400), 520, 400, 92, true),
            ),
            (
                "a/quarter.jpg",
                encode_jpeg(&smooth(800, 1100), 800, 1100, 92, false),
            ),
            (
                "b/small.jpg",
                encode_jpeg(&smooth(300, 260), 300, 260, 92, true),
            ),
        ],
    );
    let eval = Transform::Eval {
        resize: 192,
        crop: 176,
    };
    let exact = u8_pipeline(dir.path(), eval.clone(), OnError::Fail);
    let scaled = u8_pipeline(dir.path(), eval, OnError::Fail).with_dct_scaling(true);
    let row = exact.image_bytes();
    let (_, want, _) = run(&exact, 0, &[0, 1, 2]).unwrap();
    let (_, got, _) = run(&scaled, 0, &[0, 1, 2]).unwrap();
    // Dataset order is sorted: a/half, a/quarter, b/small.
    for (i, name) in ["half", "quarter"].iter().enumerate() {
        let (a, b) = (&want[i * row..(i + 1) * row], &got[i * row..(i + 1) * row]);
        let mean = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from(x.abs_diff(*y)))
            .sum::<f64>()
            / row as f64;
        assert!(mean < 1.0, "{name}: mean difference {mean:.2} levels");
        assert!(
            max_abs_diff(a, b) <= 8,
            "{name}: max difference {}",
            max_abs_diff(a, b)
        );
        assert_ne!(a, b, "{name} was decoded at a reduced size");
    }
    assert_eq!(
        want[2 * row..],
        got[2 * row..],
        "too small to scale: the exact decode"
    );
}
