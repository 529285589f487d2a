//! The main job and the image path, end to end, at a tiny size.

mod common;

use batchcast_pipeline::{generate_jpeg_dataset, GenerateConfig};
use common::Env;

fn tiny_dataset(dir: &std::path::Path, classes: usize, per_class: usize) -> std::path::PathBuf {
    let config = GenerateConfig {
        classes,
        images_per_class: per_class,
        long_side: (64, 96),
        ..GenerateConfig::default()
    };
    generate_jpeg_dataset(&dir.join("data"), &config, &|_, _| {})
        .unwrap()
        .path
}

/// `batchcast demo --json` runs both modes on a dataset it generates and
/// reports every figure; the arithmetic of the speedup is right.
#[test]
fn demo_runs_both_modes_and_reports_every_figure() {
    let env = Env::new();
    let cache_root = tempfile::tempdir().unwrap();
    let cache = cache_root.path().join("cache");
    let out = env
        .cmd(&[
            "demo",
            "--trainers",
            "2",
            "--images",
            "40",
            "--batch-size",
            "8",
            "--image-size",
            "32",
            "--step-ms",
            "1",
            "--json",
            "--cache-dir",
        ])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for mode in ["independent", "shared"] {
        let run = &v[mode];
        assert_eq!(run["trainers"].as_array().unwrap().len(), 2, "{v}");
        for t in run["trainers"].as_array().unwrap() {
            assert_eq!(t["samples"], 40);
            let share = t["data_wait_share"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&share));
        }
        assert!(run["aggregate_samples_per_sec"].as_f64().unwrap() > 0.0);
        assert!(run["cpu_secs_per_1000_samples"].as_f64().unwrap() > 0.0);
    }
    let ratio = v["shared"]["aggregate_samples_per_sec"].as_f64().unwrap()
        / v["independent"]["aggregate_samples_per_sec"]
            .as_f64()
            .unwrap();
    assert!((v["speedup"].as_f64().unwrap() - ratio).abs() < 1e-9);
    // The dataset was written once into the cache and is reused.
    assert!(cache.join("demo-jpeg-40").is_dir());
    assert!(env.leftovers().is_empty());
}

/// `batchcast serve --data` serves an ImageFolder: every image once per
/// epoch, with exact len, to consumers of different batch sizes.
#[test]
fn serve_data_delivers_every_image_once_per_epoch() {
    let env = Env::new();
    let data = tiny_dataset(env.path(), 3, 7); // 21 images
    let data = data.to_str().unwrap();
    let mut producer = env.spawn(&[
        "serve",
        "--name",
        "img",
        "--data",
        data,
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--image-size",
        "16",
        "--consumers",
        "2",
        "--json",
        "--workers",
        "2",
    ]);
    producer.expect("listening");
    let mut consumers: Vec<_> = ["5", "4"]
        .iter()
        .map(|bs| env.spawn(&["consume", "img", "--batch-size", bs]))
        .collect();
    for c in &mut consumers {
        assert!(c.finish().success());
        let ends = c.events("epoch_end");
        assert_eq!(ends.len(), 2);
        for end in &ends {
            assert_eq!(end["samples"], 21, "{end}");
            assert_eq!(end["batches"], end["expected_batches"], "{end}");
            // Labels are class indices 0..3 (the "ids" the consumer reads).
            assert!(end["first_id"].as_i64().unwrap() < 3);
        }
    }
    assert!(producer.finish().success());
}

/// A corrupt JPEG is skipped with a warning naming it; the epoch is one
/// sample shorter and nothing stops. A missing dataset is a clear error.
#[test]
fn serve_data_skips_a_corrupt_file_and_names_it() {
    let env = Env::new();
    let data = tiny_dataset(env.path(), 2, 5); // 10 images
    let victim = std::fs::read_dir(data.join("class_001"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&victim, b"\xff\xd8\xff garbage, not a JPEG").unwrap();
    let data_s = data.to_str().unwrap();
    let mut producer = env.spawn(&[
        "serve",
        "--name",
        "bad",
        "--data",
        data_s,
        "--batch-size",
        "4",
        "--image-size",
        "16",
        "--consumers",
        "1",
        "--json",
    ]);
    producer.expect("listening");
    let mut c = env.spawn(&["consume", "bad"]);
    assert!(c.finish().success());
    assert_eq!(c.events("epoch_end")[0]["samples"], 9);
    assert!(producer.finish().success());
    let err = producer.stderr_text();
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "the warning names the file: {err}");

    let out = env
        .cmd(&["serve", "--name", "x", "--data", "/nonexistent/imagenet"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/imagenet"), "{err}");
}

/// `batchcast bench --json` measures every (size, consumers) cell with real
/// consumer processes and reports the growth ratios it prints.
#[test]
fn bench_reports_every_cell_and_the_ratios() {
    let env = Env::new();
    let out = env
        .cmd(&[
            "bench",
            "--batches",
            "30",
            "--sizes-mb",
            "1",
            "--consumers",
            "1,2",
            "--repeat",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{v}");
    for c in cells {
        assert!(c["batches_per_sec"].as_f64().unwrap() > 0.0, "{v}");
        assert!(c["producer_cpu_written_us"].as_f64().unwrap() > 0.0, "{v}");
    }
    let growth = v["producer_cpu_growth_written_by_size"].as_array().unwrap();
    assert_eq!(growth.len(), 1, "{v}");
    // Nothing is left behind in the socket directory.
    assert_eq!(env.leftovers(), Vec::<std::path::PathBuf>::new());
}

/// `batchcast bench --copy-on-write` measures consumers that map the arena
/// private and writable, as Python consumers do by default.
#[test]
fn bench_measures_copy_on_write_consumers() {
    let env = Env::new();
    let args = "bench --batches 30 --sizes-mb 1 --consumers 1 --repeat 1 --json --copy-on-write";
    let out = env
        .cmd(&args.split(' ').collect::<Vec<_>>())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["copy_on_write"], true, "{v}");
    assert!(
        v["cells"][0]["batches_per_sec"].as_f64().unwrap() > 0.0,
        "{v}"
    );
}
