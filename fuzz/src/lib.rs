//! The bodies of batchcast's fuzz targets, shared by the libFuzzer entries
//! (`fuzz_targets/`, built by `cargo fuzz`) and the stable-Rust driver
//! (`stable-fuzz`, for machines without nightly). Each takes arbitrary
//! bytes and panics only on a bug.
//!
//! - [`jpeg`]: the image decoder (`batchcast_pipeline::decode_rgb_into`).
//! - [`wire`]: the frame decoder (`batchcast::internals::wire::FrameReader`) for both
//!   directions, with a re-encoding check.
//! - [`rebatch`]: the re-batcher (`batchcast::internals::rebatch`), checked
//!   for exactly-once, in-order delivery with exact batch counts.

use arbitrary::{Result as ArbResult, Unstructured};
use batchcast::internals::rebatch::{batches_in, Cut, Rebatcher, Span};
use batchcast::internals::wire::{encode, FrameReader, ToConsumer, ToProducer};
use batchcast_pipeline::{decode_rgb_into, DecodeError, DecodeLimits, RgbImage};
use serde::{de::DeserializeOwned, Serialize};

/// Pixel budget while fuzzing: big enough for any image a small input can
/// hold, small enough that a run never waits on a huge allocation.
const FUZZ_MAX_PIXELS: u64 = 4 << 20;

/// Decodes `data` as an image: any result but a panic is fine, and a
/// decoded image has the size it says.
pub fn jpeg(data: &[u8]) {
    let limits = DecodeLimits {
        max_pixels: FUZZ_MAX_PIXELS,
    };
    let mut out = RgbImage::default();
    match decode_rgb_into(data, &mut out, &limits) {
        Ok(()) => {
            let (w, h) = (out.width as u64, out.height as u64);
            assert!(w * h <= FUZZ_MAX_PIXELS, "{w}x{h} is over the budget");
            assert!(out.data.len() as u64 >= w * h * 3, "short image data");
        }
        // The pipeline turns a decoder panic into this error; for fuzzing
        // it is the bug to find.
        Err(DecodeError::Jpeg(m)) if m.contains("panicked") => panic!("decoder panicked"),
        Err(_) => {}
    }
}

/// Decodes `data[1..]` as a stream of frames to the producer (`data[0]`
/// even) or to a consumer (odd): every frame decoded re-encodes to a frame
/// that decodes to the same bytes, and decoding always makes progress.
pub fn wire(data: &[u8]) {
    let Some((&dir, stream)) = data.split_first() else {
        return;
    };
    if dir % 2 == 0 {
        frames::<ToProducer>(stream);
    } else {
        frames::<ToConsumer>(stream);
    }
}

fn frames<T: Serialize + DeserializeOwned>(stream: &[u8]) {
    let mut reader = FrameReader::from_bytes(stream);
    loop {
        let before = reader.pending();
        match reader.next_frame::<T>() {
            Ok(Some(msg)) => {
                assert!(reader.pending() < before, "a frame consumed no bytes");
                let frame = encode(&msg).expect("a decoded message re-encodes");
                let mut again = FrameReader::from_bytes(&frame);
                let back: T = again
                    .next_frame()
                    .expect("a re-encoded frame decodes")
                    .expect("a re-encoded frame is complete");
                assert_eq!(
                    again.pending(),
                    0,
                    "the re-encoded frame has trailing bytes"
                );
                assert_eq!(encode(&back).ok(), Some(frame), "encoding is not stable");
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// Feeds epochs of producer batches of arbitrary sizes (0 included) to a
/// re-batcher of arbitrary batch size: every row comes out exactly once,
/// in order, in full batches but the last, and as many batches as
/// `batches_in` says.
pub fn rebatch(data: &[u8]) {
    let _ = rebatch_checked(&mut Unstructured::new(data));
}

fn rebatch_checked(u: &mut Unstructured<'_>) -> ArbResult<()> {
    let bs: u64 = u.int_in_range(1..=3000)?;
    let drop_last: bool = u.arbitrary()?;
    let mut r = Rebatcher::<usize>::new(bs, drop_last);
    for _epoch in 0..u.int_in_range(1..=4)? {
        let sizes: Vec<u64> = (0..u.int_in_range(0..=200)?)
            .map(|_| u.int_in_range(0..=1000))
            .collect::<ArbResult<_>>()?;
        let mut firsts = Vec::with_capacity(sizes.len());
        let mut total = 0;
        for &rows in &sizes {
            firsts.push(total);
            total += rows;
        }
        let ids = |s: &Span<usize>| -> Vec<u64> {
            assert!(s.start < s.end, "empty span {s:?}");
            assert!(s.end <= sizes[s.piece], "span {s:?} past its batch");
            (s.start..s.end).map(|row| firsts[s.piece] + row).collect()
        };
        let mut out: Vec<Vec<u64>> = Vec::new();
        // The batch being assembled from pieces, if any.
        let mut assembling: Option<Vec<u64>> = None;
        let mut apply = |cut: Cut<usize>, out: &mut Vec<Vec<u64>>| match cut {
            Cut::View(s) => {
                assert!(assembling.is_none(), "a view inside an assembly");
                out.push(ids(&s));
            }
            Cut::Piece(s) => assembling.get_or_insert_with(Vec::new).extend(ids(&s)),
            Cut::Done => out.push(assembling.take().expect("done without pieces")),
            Cut::Discard => assert!(assembling.take().is_some(), "discard without pieces"),
        };
        for (i, &rows) in sizes.iter().enumerate() {
            for cut in r.push(i, rows) {
                apply(cut, &mut out);
            }
        }
        if let Some(tail) = r.finish() {
            apply(tail, &mut out);
        }
        assert_eq!(out.len() as u64, batches_in(total, bs, drop_last));
        let kept = if drop_last { total / bs * bs } else { total };
        let flat: Vec<u64> = out.concat();
        assert!(
            flat.iter().copied().eq(0..kept),
            "not every row once, in order"
        );
        for (i, b) in out.iter().enumerate() {
            if i + 1 < out.len() || drop_last {
                assert_eq!(b.len() as u64, bs, "batch {i} is not full");
            }
        }
    }
    Ok(())
}
