//! `augment-profile`: where the CPU of a decoded stream goes, on one core,
//! as `bench/augment.py`'s variant (c) spends it: the producer (JPEG decode,
//! then `Eval { resize: S, crop: S }` to the stored `u8` NHWC square) and
//! four trainers (`RandomResizedCrop` 128/160/192/224 + flip to `f32` NCHW,
//! as `ToTensor`), each on one thread; and, for comparison, variant (b):
//! four native pipelines doing those four augmentations from the files.
//!
//! `augment-profile --dir DIR [--images N] [--runs R] [--store S]
//! [--stage all|decode|producer|trainers|native] [--dct-scale on|off]`; prints the median over
//! the runs of microseconds per image of each stage, and the ratio of the
//! CPU per sample of the native pipelines to the decoded stream's. The
//! decode stage reads files from memory; the pipelines read them from the
//! file system (the page cache, warm).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail};

use batchcast_pipeline::{
    decode_rgb_into, Augmenter, DType, Dataset, Layout, OnError, OutputFormat, Pipeline, RgbImage,
    Sampler, Transform,
};

/// The trainers of `bench/augment.py`: output side and crop scale range.
const TRAINERS: [(u32, (f32, f32)); 4] = [
    (128, (0.25, 1.0)),
    (160, (0.2, 1.0)),
    (192, (0.15, 1.0)),
    (224, (0.08, 1.0)),
];
const BATCH: usize = 64;

struct Args {
    dir: PathBuf,
    images: usize,
    runs: usize,
    store: u32,
    stage: String,
    dct_scale: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        dir: PathBuf::from("/tmp/batchcast-augment-bench"),
        images: 1000,
        runs: 5,
        store: 256,
        stage: "all".into(),
        dct_scale: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|_| anyhow!("{flag}: {v:?}"));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(value),
            "--images" => a.images = num(&value)?,
            "--runs" => a.runs = num(&value)?.max(1),
            "--store" => a.store = num(&value)? as u32,
            "--stage" => a.stage = value,
            "--dct-scale" => a.dct_scale = value == "on",
            _ => bail!("unknown option {flag}"),
        }
    }
    Ok(a)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    match parse_args().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("augment-profile: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> anyhow::Result<()> {
    let dataset = Dataset::open(&a.dir)?;
    let n = a.images.min(dataset.len());
    let mut files = vec![Vec::new(); n];
    for (i, f) in files.iter_mut().enumerate() {
        dataset.read_sample(i, f)?;
    }
    let side = a.store;
    let producer = Pipeline::new(
        dataset,
        Transform::Eval {
            resize: side,
            crop: side,
        },
        OutputFormat::u8_nhwc(),
        1,
        OnError::Fail,
    )?
    .with_dct_scaling(a.dct_scale);
    let batches: Vec<Vec<usize>> = Sampler::new(n, BATCH)?
        .with_shuffle(false)
        .batches(0)
        .collect();
    let (trainers, pipelines) = trainers_of(&producer)?;
    let profile = Profile {
        row: producer.image_bytes(),
        files,
        producer,
        batches,
        trainers,
        pipelines,
        side,
    };
    let mut stored = vec![0u8; n * profile.row];
    let mut labels = vec![0i64; BATCH];
    // Stored images are needed by the trainers whatever the stage.
    profile.fill(&mut stored, &mut labels)?;
    let times = profile.time(a, &mut stored, &mut labels)?;
    print_times(n, side, a.runs, times);
    Ok(())
}

/// Variant (c)'s four trainers (augmenting the stored images) and
/// variant (b)'s four pipelines (reading the files `producer` reads).
fn trainers_of(producer: &Pipeline) -> anyhow::Result<(Vec<Augmenter>, Vec<Pipeline>)> {
    let f32_nchw = OutputFormat {
        layout: Layout::Nchw,
        dtype: DType::to_tensor(),
    };
    let trainers: Vec<Augmenter> = TRAINERS
        .iter()
        .enumerate()
        .map(|(i, &(size, scale))| {
            Augmenter::new(train_crop(size, scale), f32_nchw, 1).map(|g| g.with_seed(i as u64 + 1))
        })
        .collect::<Result<_, _>>()?;
    let pipelines: Vec<Pipeline> = TRAINERS
        .iter()
        .enumerate()
        .map(|(i, &(size, scale))| {
            Pipeline::new(
                producer.dataset().clone(),
                train_crop(size, scale),
                f32_nchw,
                1,
                OnError::Fail,
            )
            .map(|p| p.with_seed(i as u64 + 1))
        })
        .collect::<Result<_, _>>()?;
    Ok((trainers, pipelines))
}

/// What is timed: the files in memory, the producer that stores them as
/// `side` x `side` squares of `row` bytes, and the trainers and pipelines.
struct Profile {
    files: Vec<Vec<u8>>,
    producer: Pipeline,
    batches: Vec<Vec<usize>>,
    row: usize,
    side: u32,
    trainers: Vec<Augmenter>,
    pipelines: Vec<Pipeline>,
}

/// Microseconds per image of each run of each stage (empty: not run).
struct Times {
    decode: Vec<f64>,
    producer: Vec<f64>,
    trainers: Vec<Vec<f64>>,
    native: Vec<Vec<f64>>,
}

impl Profile {
    /// The producer's pass: every image decoded and stored in `stored`.
    fn fill(&self, stored: &mut [u8], labels: &mut [i64]) -> anyhow::Result<()> {
        let row = self.row;
        for (b, batch) in self.batches.iter().enumerate() {
            let dst = &mut stored[b * BATCH * row..(b * BATCH + batch.len()) * row];
            self.producer
                .fill_batch(0, batch, dst, &mut labels[..batch.len()])?;
        }
        Ok(())
    }

    /// Times `a.runs` runs of the stages `a.stage` names.
    fn time(&self, a: &Args, stored: &mut [u8], labels: &mut [i64]) -> anyhow::Result<Times> {
        let n = self.files.len();
        let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let mut times = Times {
            decode: Vec::new(),
            producer: Vec::new(),
            trainers: vec![Vec::new(); TRAINERS.len()],
            native: vec![Vec::new(); TRAINERS.len()],
        };
        let stage = a.stage.as_str();
        for _ in 0..a.runs {
            if stage == "all" || stage == "decode" {
                let mut img = RgbImage::default();
                let t = Instant::now();
                for f in &self.files {
                    decode_rgb_into(f, &mut img, self.producer.limits())?;
                }
                times.decode.push(us(t));
            }
            if stage == "all" || stage == "producer" {
                let t = Instant::now();
                self.fill(stored, labels)?;
                times.producer.push(us(t));
            }
            if stage == "all" || stage == "trainers" {
                self.time_trainers(stored, &us, &mut times.trainers)?;
            }
            if stage == "all" || stage == "native" {
                self.time_native(labels, &us, &mut times.native)?;
            }
        }
        Ok(times)
    }

    /// One run of each trainer over the stored images.
    fn time_trainers(
        &self,
        stored: &[u8],
        us: &dyn Fn(Instant) -> f64,
        train: &mut [Vec<f64>],
    ) -> anyhow::Result<()> {
        let (row, side) = (self.row, self.side);
        for (g, times) in self.trainers.iter().zip(train) {
            let mut out = vec![0u8; BATCH * g.image_bytes()];
            let keys: Vec<u64> = (0..BATCH as u64).collect();
            let t = Instant::now();
            for chunk in stored.chunks(BATCH * row) {
                let k = chunk.len() / row;
                g.augment(0, chunk, side, side, &keys[..k], &mut out)?;
            }
            times.push(us(t));
        }
        Ok(())
    }

    /// One epoch of each native pipeline from the files.
    fn time_native(
        &self,
        labels: &mut [i64],
        us: &dyn Fn(Instant) -> f64,
        native: &mut [Vec<f64>],
    ) -> anyhow::Result<()> {
        for (p, times) in self.pipelines.iter().zip(native) {
            let mut out = vec![0u8; BATCH * p.image_bytes()];
            let t = Instant::now();
            for batch in &self.batches {
                p.fill_batch(0, batch, &mut out, &mut labels[..batch.len()])?;
            }
            times.push(us(t));
        }
        Ok(())
    }
}

/// Prints the median of each stage, and the CPU per sample of variant (b)
/// against (c) when every stage was timed.
fn print_times(n: usize, side: u32, runs: usize, times: Times) {
    println!("{n} images, stored {side}x{side}, median of {runs} runs, us/image:");
    if !times.decode.is_empty() {
        println!("  decode only            {:8.1}", median(times.decode));
    }
    let producer_us = (!times.producer.is_empty()).then(|| median(times.producer));
    if let Some(m) = producer_us {
        println!("  producer (read+decode+resize) {m:8.1}");
    }
    let trainers_us = per_trainer(times.trainers, "trainer", "trainers, all four");
    let native_us = per_trainer(times.native, "native pipeline", "native, all four");
    if let (Some(p), Some(t), Some(b)) = (producer_us, trainers_us, native_us) {
        // Per sample: (c) one decode for four trainers, (b) one each.
        let (c, b) = ((p + t) / 4.0, b / 4.0);
        println!(
            "  CPU per sample: (b) {b:.1} us, (c) {c:.1} us, (b)/(c) {:.3}",
            b / c
        );
    }
}

/// A trainer's RandomResizedCrop + flip, with torchvision's default ratios.
fn train_crop(size: u32, scale: (f32, f32)) -> Transform {
    Transform::Train {
        size,
        scale,
        ratio: (3.0 / 4.0, 4.0 / 3.0),
        hflip_p: 0.5,
    }
}

/// Prints each trainer's median (microseconds per sample) and their sum;
/// the sum, or None when this stage was not run.
fn per_trainer(times: Vec<Vec<f64>>, what: &str, all: &str) -> Option<f64> {
    if times[0].is_empty() {
        return None;
    }
    let mut total = 0.0;
    for ((size, _), t) in TRAINERS.iter().zip(times) {
        let m = median(t);
        total += m;
        println!("  {:<22} {m:8.1}", format!("{what} {size}"));
    }
    println!("  {all:<22} {total:8.1}");
    Some(total)
}
