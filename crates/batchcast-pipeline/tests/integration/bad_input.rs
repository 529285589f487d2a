//! Bad input: corrupt and unreadable files, broken shards, empty or missing
//! datasets, misuse of the buffers.

use std::fs;
use std::sync::{Arc, Mutex};

use batchcast_pipeline::{
    Dataset, OnError, OutputFormat, Pipeline, PipelineError, Transform, WebDatasetWriter,
};

use crate::common::*;

fn small_png(v: u8) -> Vec<u8> {
    rgb_png(&solid(8, 8, [v, v, v]), 8, 8)
}

/// Three classes of two images; `a/1.jpg` is corrupt.
fn folder_with_corrupt_jpeg() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = encode_jpeg(&pattern(16, 16), 16, 16, 90, false);
    bad.truncate(20);
    bad.extend_from_slice(&[0x13; 50]);
    write_tree(
        dir.path(),
        &[
            ("a/0.png", small_png(10)),
            ("a/1.jpg", bad),
            ("b/2.png", small_png(20)),
            ("b/3.png", small_png(30)),
            ("c/4.png", small_png(40)),
            ("c/5.txt.png", b"plain text, not an image".to_vec()),
        ],
    );
    dir
}

#[test]
fn skip_mode_compacts_the_batch_and_names_the_files() {
    let dir = folder_with_corrupt_jpeg();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = Arc::clone(&seen);
    let p = Pipeline::new(
        Dataset::open(dir.path()).unwrap(),
        Transform::Eval { resize: 8, crop: 8 },
        OutputFormat::u8_nhwc(),
        2,
        OnError::Skip,
    )
    .unwrap()
    .with_skip_callback(move |s| seen2.lock().unwrap().push(s.path.clone()));
    let (report, images, labels) = run(&p, 0, &[0, 1, 2, 3, 4, 5]).unwrap();
    assert_eq!(report.rows_written, 4);
    assert_eq!(report.skipped.len(), 2);
    assert!(
        report.skipped[0].path.ends_with("a/1.jpg"),
        "{:?}",
        report.skipped
    );
    assert_eq!(report.skipped[0].index, 1);
    assert!(
        report.skipped[0].reason.contains("JPEG"),
        "{}",
        report.skipped[0].reason
    );
    assert!(report.skipped[1].path.ends_with("c/5.txt.png"));
    assert!(report.skipped[1].reason.contains("not a JPEG or PNG"));
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(p.skipped_total(), 2);
    // Good rows moved up, in order, with their labels.
    assert_eq!(&labels[..4], &[0, 1, 1, 2]);
    let row = p.image_bytes();
    let grey: Vec<u8> = (0..4).map(|k| images[k * row]).collect();
    assert_eq!(grey, [10, 20, 30, 40]);
}

#[test]
fn fail_mode_names_the_file() {
    let dir = folder_with_corrupt_jpeg();
    let p = pipeline(
        dir.path(),
        Transform::train(8),
        OutputFormat::default(),
        OnError::Fail,
    );
    let err = run(&p, 0, &[0, 1, 2]).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, PipelineError::Sample { index: 1, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("a/1.jpg") && msg.contains("OnError::Skip"),
        "{msg}"
    );
    assert!(run(&p, 0, &[0, 2]).is_ok());
}

#[test]
fn vanished_file_is_reported() {
    // A dangling symlink (or a file deleted after open) fails at read time,
    // whoever runs the test.
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("a/0.png", small_png(1))]);
    std::os::unix::fs::symlink(dir.path().join("gone.png"), dir.path().join("a/1.png")).unwrap();
    let p = u8_pipeline(dir.path(), Transform::train(8), OnError::Skip);
    assert_eq!(p.dataset().len(), 2);
    let (report, _, labels) = run(&p, 0, &[1, 0]).unwrap();
    assert_eq!(report.rows_written, 1);
    assert_eq!(labels[0], 0);
    assert!(report.skipped[0].path.ends_with("a/1.png"));
    assert!(
        report.skipped[0].reason.contains("cannot read"),
        "{}",
        report.skipped[0].reason
    );
}

#[test]
fn unreadable_file_is_reported() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[("a/0.png", small_png(1)), ("a/1.png", small_png(2))],
    );
    let locked = dir.path().join("a/1.png");
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    if fs::read(&locked).is_ok() {
        eprintln!(
            "skipping unreadable_file_is_reported: running as root, chmod 000 does not block reads"
        );
        return;
    }
    let p = u8_pipeline(dir.path(), Transform::train(8), OnError::Skip);
    let (report, _, _) = run(&p, 0, &[0, 1]).unwrap();
    assert_eq!(report.rows_written, 1);
    assert!(report.skipped[0].path.ends_with("a/1.png"));
    assert!(
        report.skipped[0].reason.contains("cannot read"),
        "{}",
        report.skipped[0].reason
    );
    let p = u8_pipeline(dir.path(), Transform::train(8), OnError::Fail);
    let msg = run(&p, 0, &[1]).unwrap_err().to_string();
    assert!(
        msg.contains("a/1.png") && msg.contains("ermission"),
        "{msg}"
    );
}

fn good_shard(path: &std::path::Path, n: usize) {
    let mut w = WebDatasetWriter::create(path).unwrap();
    for i in 0..n {
        w.add_sample(&format!("k{i}"), "png", &small_png(i as u8), 1)
            .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn truncated_or_corrupt_tar_names_the_shard_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let shard = dir.path().join("data.tar");
    good_shard(&shard, 3);
    let bytes = fs::read(&shard).unwrap();
    // Cut in the middle of the second sample's image data.
    fs::write(&shard, &bytes[..512 * 6 + 100]).unwrap();
    let err = Dataset::open(&shard).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PipelineError::CorruptShard { .. }), "{msg}");
    assert!(msg.contains("data.tar") && msg.contains("offset"), "{msg}");
    // Cut inside a header.
    fs::write(&shard, &bytes[..512 * 4 + 200]).unwrap();
    assert!(matches!(
        Dataset::open(&shard),
        Err(PipelineError::CorruptShard { .. })
    ));
    // A garbled header (bad checksum) at the second member.
    let mut garbled = bytes.clone();
    let second_header = 512 * 2;
    garbled[second_header..second_header + 100].fill(b'z');
    fs::write(&shard, &garbled).unwrap();
    match Dataset::open(&shard) {
        Err(PipelineError::CorruptShard { offset, .. }) => assert_eq!(offset, second_header as u64),
        other => panic!("expected CorruptShard, got {other:?}"),
    }
}

#[test]
fn webdataset_sample_without_label_or_image_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let shard = dir.path().join("s.tar");
    let mut w = WebDatasetWriter::create(&shard).unwrap();
    w.add_sample("k0", "png", &small_png(1), 0).unwrap();
    w.add_member("k1.png", &small_png(2)).unwrap();
    w.finish().unwrap();
    let msg = Dataset::open(&shard).unwrap_err().to_string();
    assert!(
        msg.contains("\"k1\"") && msg.contains(".cls") && msg.contains("s.tar"),
        "{msg}"
    );

    let mut w = WebDatasetWriter::create(&shard).unwrap();
    w.add_member("k2.cls", b"3").unwrap();
    w.finish().unwrap();
    let err = Dataset::open(&shard).unwrap_err();
    assert!(matches!(err, PipelineError::MissingImage { .. }), "{err}");

    let mut w = WebDatasetWriter::create(&shard).unwrap();
    w.add_member("k3.png", &small_png(2)).unwrap();
    w.add_member("k3.cls", b"dog").unwrap();
    w.finish().unwrap();
    let err = Dataset::open(&shard).unwrap_err();
    assert!(err.to_string().contains("\"dog\""), "{err}");

    assert!(w_empty(&dir.path().join("empty.tar"))
        .to_string()
        .contains(".jpg"));
}

fn w_empty(path: &std::path::Path) -> PipelineError {
    WebDatasetWriter::create(path).unwrap().finish().unwrap();
    Dataset::open(path).unwrap_err()
}

#[test]
fn empty_missing_and_wrong_paths_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    // No class folder at all.
    let err = Dataset::open(dir.path()).unwrap_err();
    assert!(matches!(err, PipelineError::NoClasses { .. }), "{err}");
    // Class folders without images.
    fs::create_dir(dir.path().join("a")).unwrap();
    fs::write(dir.path().join("a/readme.txt"), b"x").unwrap();
    let err = Dataset::open(dir.path()).unwrap_err();
    assert!(matches!(err, PipelineError::Empty { .. }), "{err}");
    assert!(err.to_string().contains(".jpeg") && err.to_string().contains(".png"));
    // Missing.
    let missing = dir.path().join("nope");
    let err = Dataset::open(&missing).unwrap_err();
    assert!(matches!(err, PipelineError::NotFound { .. }));
    assert!(err.to_string().contains("nope"));
    // A plain file.
    let file = dir.path().join("a/readme.txt");
    assert!(matches!(
        Dataset::open(&file),
        Err(PipelineError::NotADataset { .. })
    ));
}

#[test]
fn misuse_of_buffers_and_indices_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("a/0.png", small_png(1))]);
    let p = u8_pipeline(dir.path(), Transform::train(8), OnError::Fail);
    let mut images = vec![0u8; p.image_bytes()];
    let mut labels = vec![0i64; 2];
    assert!(matches!(
        p.fill_batch(0, &[0, 0], &mut images, &mut labels),
        Err(PipelineError::BufferTooSmall { what: "images", .. })
    ));
    assert!(matches!(
        p.fill_batch(0, &[0], &mut images, &mut labels[..0]),
        Err(PipelineError::BufferTooSmall { what: "labels", .. })
    ));
    assert!(matches!(
        p.fill_batch(0, &[1], &mut images, &mut labels),
        Err(PipelineError::IndexOutOfRange { index: 1, len: 1 })
    ));
    assert_eq!(
        p.fill_batch(0, &[], &mut images, &mut labels)
            .unwrap()
            .rows_written,
        0
    );
    let ds = Dataset::open(dir.path()).unwrap();
    assert!(Pipeline::new(
        ds.clone(),
        Transform::train(8),
        OutputFormat::u8_nhwc(),
        0,
        OnError::Fail
    )
    .is_err());
    assert!(Pipeline::new(
        ds,
        Transform::Eval { resize: 8, crop: 9 },
        OutputFormat::u8_nhwc(),
        1,
        OnError::Fail
    )
    .is_err());
}
