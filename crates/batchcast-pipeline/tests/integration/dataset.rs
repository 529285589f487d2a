//! Datasets, labels and the sample set of each epoch.

use std::collections::BTreeMap;

use batchcast_pipeline::{
    Dataset, DatasetKind, OnError, OutputFormat, Pipeline, Sampler, Transform, WebDatasetWriter,
};

use crate::common::*;

/// A solid 12x10 PNG whose colour encodes `id` (0..25).
fn id_png(id: usize) -> Vec<u8> {
    let v = (id * 10) as u8;
    rgb_png(&solid(12, 10, [v, 255 - v, 77]), 12, 10)
}

/// The id of a (resampled) solid image.
fn id_of(pixel: [u8; 3]) -> usize {
    (f64::from(pixel[0]) / 10.0).round() as usize
}

#[test]
fn imagefolder_classes_labels_and_order_follow_torchvision() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("bird/2.PNG", id_png(0)),
            ("bird/1.jpeg", id_png(1)),
            ("ant/b.png", id_png(2)),
            ("ant/a.JPG", id_png(3)),
            ("ant/notes.txt", b"x".to_vec()),
            ("cat/readme.md", b"no images here".to_vec()),
            ("top-level-file.png", id_png(4)),
        ],
    );
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.kind(), DatasetKind::ImageFolder);
    assert_eq!(ds.class_names(), ["ant", "bird", "cat"]);
    assert_eq!(ds.num_classes(), 3);
    assert_eq!(ds.len(), 4);
    let names: Vec<String> = (0..4)
        .map(|i| {
            ds.sample_name(i)
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["a.JPG", "b.png", "1.jpeg", "2.PNG"]);
    let labels: Vec<i64> = (0..4).map(|i| ds.label(i).unwrap()).collect();
    assert_eq!(labels, [0, 0, 1, 1]);
    assert_eq!(ds.label(4), None);
}

/// Runs every batch of `epoch`; returns (id, label) per delivered row.
fn deliver(p: &Pipeline, sampler: &Sampler, epoch: u64) -> Vec<(usize, i64)> {
    let mut out = Vec::new();
    let row = p.image_bytes();
    let mut images = vec![0u8; sampler.batch_size() * row];
    let mut labels = vec![0i64; sampler.batch_size()];
    for batch in sampler.batches(epoch) {
        let report = p
            .fill_batch(epoch, &batch, &mut images, &mut labels)
            .unwrap();
        assert_eq!(report.rows_written, batch.len());
        for k in 0..report.rows_written {
            out.push((id_of(px(&images[k * row..], 4, 1, 1)), labels[k]));
        }
    }
    out
}

#[test]
fn every_file_exactly_once_per_epoch_with_its_label() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("class{}/{i:02}.png", i / 7), id_png(i)))
        .collect();
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    write_tree(dir.path(), &files);
    let p = Pipeline::new(
        Dataset::open(dir.path()).unwrap(),
        Transform::train(4),
        OutputFormat::u8_nhwc(),
        2,
        OnError::Fail,
    )
    .unwrap();
    let sampler = Sampler::new(20, 6).unwrap().with_seed(5);
    assert_eq!(sampler.num_batches(), 4);
    let mut orders = Vec::new();
    for epoch in 0..3 {
        let got = deliver(&p, &sampler, epoch);
        let mut ids: Vec<usize> = got.iter().map(|g| g.0).collect();
        orders.push(ids.clone());
        ids.sort_unstable();
        assert_eq!(ids, (0..20).collect::<Vec<_>>(), "epoch {epoch}");
        for (id, label) in got {
            assert_eq!(label, (id / 7) as i64, "file {id}");
        }
    }
    assert_ne!(orders[0], orders[1]);
    assert_eq!(
        orders[1],
        deliver(&p, &sampler, 1)
            .iter()
            .map(|g| g.0)
            .collect::<Vec<_>>()
    );
    // drop_last: 18 of 20, each at most once.
    let dropping = sampler.clone().with_drop_last(true);
    let got = deliver(&p, &dropping, 0);
    assert_eq!(got.len(), 18);
    let mut ids: Vec<usize> = got.iter().map(|g| g.0).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 18);
}

fn write_shards(root: &std::path::Path) {
    let mut w = WebDatasetWriter::create(&root.join("shard-000001.tar")).unwrap();
    for id in 5..8 {
        w.add_sample(&format!("s{id:04}"), "png", &id_png(id), (id % 3) as i64)
            .unwrap();
    }
    w.finish().unwrap();
    let mut w = WebDatasetWriter::create(&root.join("shard-000000.tar")).unwrap();
    for id in 0..5 {
        w.add_member(&format!("s{id:04}.json"), b"{}").unwrap();
        w.add_sample(
            &format!("s{id:04}"),
            if id == 2 { "PNG" } else { "png" },
            &id_png(id),
            (id % 3) as i64,
        )
        .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn webdataset_shards_are_indexed_in_order_and_read_by_offset() {
    let dir = tempfile::tempdir().unwrap();
    write_shards(dir.path());
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.kind(), DatasetKind::WebDataset);
    assert_eq!(ds.len(), 8);
    assert_eq!(ds.num_classes(), 3);
    assert_eq!(ds.class_names(), ["0", "1", "2"]);
    assert!(ds
        .sample_name(0)
        .unwrap()
        .ends_with("shard-000000.tar:s0000.png"));
    assert!(ds
        .sample_name(7)
        .unwrap()
        .ends_with("shard-000001.tar:s0007.png"));
    // Random access, backwards.
    let mut buf = Vec::new();
    for i in (0..8).rev() {
        ds.read_sample(i, &mut buf).unwrap();
        assert_eq!(buf, id_png(i), "sample {i}");
        assert_eq!(ds.label(i), Some((i % 3) as i64));
    }
    // Through the pipeline: pixels and labels agree.
    let p = Pipeline::new(
        ds,
        Transform::train(4),
        OutputFormat::u8_nhwc(),
        2,
        OnError::Fail,
    )
    .unwrap();
    let got = deliver(&p, &Sampler::new(8, 3).unwrap(), 0);
    let by_id: BTreeMap<usize, i64> = got.into_iter().collect();
    assert_eq!(by_id.len(), 8);
    for (id, label) in by_id {
        assert_eq!(label, (id % 3) as i64);
    }
    // A single shard opens on its own.
    let one = Dataset::open(&dir.path().join("shard-000001.tar")).unwrap();
    assert_eq!(one.len(), 3);
    assert_eq!(one.label(0), Some(2));
}
