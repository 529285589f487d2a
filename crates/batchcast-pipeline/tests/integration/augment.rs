//! Augmenting a decoded stream: the pipeline's geometry applied to decoded
//! images, per consumer seed, independent of the thread count.

use batchcast_pipeline::{
    Augmenter, DType, Dataset, Layout, OnError, OutputFormat, Pipeline, Transform,
};

use crate::common::{pattern, rgb_png, run, write_tree};

const S: u32 = 40;

/// Twelve S x S PNG images and the dataset over them.
fn square_dataset() -> (tempfile::TempDir, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let images: Vec<Vec<u8>> = (0..12u32)
        .map(|i| {
            let mut p = pattern(S, S);
            p.iter_mut()
                .enumerate()
                .for_each(|(k, v)| *v = v.wrapping_add((i * 7 + k as u32 % 5) as u8));
            p
        })
        .collect();
    let files: Vec<(String, Vec<u8>)> = images
        .iter()
        .enumerate()
        .map(|(i, img)| (format!("c{}/{i:02}.png", i % 3), rgb_png(img, S, S)))
        .collect();
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    write_tree(dir.path(), &files);
    (dir, images)
}

/// The decoded stream a producer would publish: `Eval { S, S }` on S x S
/// files is the identity, so the consumer's augmentation sees the file.
fn decoded(dir: &std::path::Path, idx: &[usize]) -> Vec<u8> {
    let p = Pipeline::new(
        Dataset::open(dir).unwrap(),
        Transform::Eval { resize: S, crop: S },
        OutputFormat::u8_nhwc(),
        1,
        OnError::Fail,
    )
    .unwrap();
    run(&p, 0, idx).unwrap().1
}

#[test]
fn augmenting_decoded_images_equals_the_pipeline_on_the_files() {
    let (dir, _) = square_dataset();
    let idx: Vec<usize> = (0..12).collect();
    let stream = decoded(dir.path(), &idx);
    for output in [
        OutputFormat::u8_nhwc(),
        OutputFormat {
            layout: Layout::Nchw,
            dtype: DType::imagenet(),
        },
    ] {
        let direct = Pipeline::new(
            Dataset::open(dir.path()).unwrap(),
            Transform::train(24),
            output,
            2,
            OnError::Fail,
        )
        .unwrap()
        .with_seed(7);
        let (_, want, _) = run(&direct, 3, &idx).unwrap();
        let aug = Augmenter::new(Transform::train(24), output, 2)
            .unwrap()
            .with_seed(7);
        let keys: Vec<u64> = idx.iter().map(|&i| i as u64).collect();
        let mut got = vec![0u8; 12 * aug.image_bytes()];
        aug.augment(3, &stream, S, S, &keys, &mut got).unwrap();
        assert_eq!(got, want, "the consumer's augmentation is the pipeline's");
    }
}

#[test]
fn seeds_give_each_consumer_its_own_crops_and_threads_change_nothing() {
    let (dir, _) = square_dataset();
    let idx: Vec<usize> = (0..12).collect();
    let stream = decoded(dir.path(), &idx);
    let keys: Vec<u64> = (100..112).collect();
    let out = |seed: u64, threads: usize| {
        let aug = Augmenter::new(Transform::train(16), OutputFormat::u8_nhwc(), threads)
            .unwrap()
            .with_seed(seed);
        let mut v = vec![0u8; 12 * aug.image_bytes()];
        aug.augment(0, &stream, S, S, &keys, &mut v).unwrap();
        v
    };
    let a = out(1, 1);
    assert_eq!(a, out(1, 3), "three threads draw what one does");
    assert_eq!(a, out(1, 1), "a fixed seed reproduces");
    let b = out(2, 1);
    let row = 16 * 16 * 3;
    let differing = a
        .chunks(row)
        .zip(b.chunks(row))
        .filter(|(x, y)| x != y)
        .count();
    assert!(
        differing >= 10,
        "another seed, other crops: {differing} of 12 differ"
    );
}

#[test]
fn short_buffers_and_empty_images_are_refused() {
    let aug = Augmenter::new(Transform::train(8), OutputFormat::u8_nhwc(), 1).unwrap();
    let mut out = vec![0u8; 8 * 8 * 3];
    let e = aug
        .augment(0, &[0u8; 10], 4, 4, &[0], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("images"), "{e}");
    let e = aug
        .augment(0, &[0u8; 48], 4, 4, &[0], &mut out[..10])
        .unwrap_err();
    assert!(e.to_string().contains("out"), "{e}");
    assert!(aug.augment(0, &[], 0, 4, &[0], &mut out).is_err());
    assert!(Augmenter::new(Transform::train(8), OutputFormat::u8_nhwc(), 0).is_err());
}
