//! `pipeline-bench`: throughput of the native pipeline on a synthetic
//! ImageNet-like JPEG dataset (generated once, then reused from its cache
//! directory), for each requested number of worker threads.
//!
//! Each run is one full epoch (shuffled) through `fill_batch` into a reused
//! batch buffer, as a producer filling shared-memory slots does. The figure
//! reported is the median of the runs. CPU time (user + system, all threads
//! of the process, from `getrusage`) is measured over each run too, so
//! throughput per CPU-second can be compared with multi-process loaders.
//! `--json` prints one JSON object.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail};

use batchcast_pipeline::{
    generate_jpeg_dataset, DType, Dataset, GenerateConfig, GeneratedDataset, Layout, OnError,
    OutputFormat, Pipeline, Sampler, Transform,
};

const USAGE: &str = "\
usage: pipeline-bench [options]
  --dir DIR          dataset cache directory (default: $TMPDIR/batchcast-bench-N-SEED)
  --images N         images to generate (default 2000, in 10 classes)
  --threads LIST     worker thread counts, comma-separated (default 1,2)
  --runs R           timed epochs per thread count; the median is reported (default 5)
  --batch B          batch size (default 64)
  --transform T      train (RandomResizedCrop+flip, default) or eval (Resize+CenterCrop)
  --size S           output side (default 224; eval resizes to S*8/7)
  --output F         f32-nchw (as ToTensor, default), f32-nchw-imagenet (+Normalize), u8-nhwc
  --seed S           dataset and augmentation seed (default 0)
  --json             print the results as one JSON object on stdout
";

struct Args {
    dir: Option<PathBuf>,
    images: usize,
    threads: Vec<usize>,
    runs: usize,
    batch: usize,
    transform: String,
    size: u32,
    output: String,
    seed: u64,
    json: bool,
}

/// The options, or `None` when `--help` asks for the usage.
fn parse_args() -> anyhow::Result<Option<Args>> {
    let mut a = Args {
        dir: None,
        images: 2000,
        threads: vec![1, 2],
        runs: 5,
        batch: 64,
        transform: "train".into(),
        size: 224,
        output: "f32-nchw".into(),
        seed: 0,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            a.json = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        let value = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| anyhow!("{flag}: {v:?} is not a number"))
        };
        match flag.as_str() {
            "--dir" => a.dir = Some(PathBuf::from(value)),
            "--images" => a.images = num(&value)? as usize,
            "--threads" => {
                a.threads = value
                    .split(',')
                    .map(|t| num(t.trim()).map(|n| n as usize))
                    .collect::<Result<_, _>>()?
            }
            "--runs" => a.runs = num(&value)? as usize,
            "--batch" => a.batch = num(&value)? as usize,
            "--transform" => a.transform = value,
            "--size" => a.size = num(&value)? as u32,
            "--output" => a.output = value,
            "--seed" => a.seed = num(&value)?,
            _ => bail!("unknown option {flag}"),
        }
    }
    if a.images == 0 || a.runs == 0 || a.batch == 0 || a.threads.contains(&0) {
        bail!("--images, --runs, --batch and --threads must be at least 1");
    }
    Ok(Some(a))
}

fn output_format(name: &str) -> anyhow::Result<OutputFormat> {
    let (layout, dtype) = match name {
        "f32-nchw" => (Layout::Nchw, DType::to_tensor()),
        "f32-nchw-imagenet" => (Layout::Nchw, DType::imagenet()),
        "u8-nhwc" => (Layout::Nhwc, DType::U8),
        "u8-nchw" => (Layout::Nchw, DType::U8),
        other => bail!("unknown --output {other:?}"),
    };
    Ok(OutputFormat { layout, dtype })
}

fn transform(name: &str, size: u32) -> anyhow::Result<Transform> {
    match name {
        "train" => Ok(Transform::train(size)),
        "eval" => Ok(Transform::Eval {
            resize: size * 8 / 7,
            crop: size,
        }),
        other => Err(anyhow!("unknown --transform {other:?} (train or eval)")),
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

struct Result1 {
    threads: usize,
    /// Images per second of each run.
    runs: Vec<f64>,
    /// Images per CPU-second of each run.
    per_cpu: Vec<f64>,
}

/// CPU seconds (user + system) used so far by all threads of this process.
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable rusage; getrusage only writes it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return f64::NAN;
    }
    // SAFETY: getrusage succeeded, so it initialised the struct (and zeroed
    // memory is a valid rusage anyway).
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("pipeline-bench: {e}");
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipeline-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let output = output_format(&args.output)?;
    let transform = transform(&args.transform, args.size)?;
    let (generated, dataset) = open_dataset(args)?;
    let mut bytes = Vec::new();
    let mut total_bytes = 0u64;
    for i in 0..dataset.len() {
        if dataset.read_sample(i, &mut bytes).is_ok() {
            total_bytes += bytes.len() as u64;
        }
    }
    let n = dataset.len();
    let sampler = Sampler::new(n, args.batch)?.with_seed(args.seed);
    let mut results = Vec::new();
    for &threads in &args.threads {
        let pipeline = Pipeline::new(
            dataset.clone(),
            transform.clone(),
            output,
            threads,
            OnError::Fail,
        )?
        .with_seed(args.seed);
        results.push(measure(args, &pipeline, &sampler, threads)?);
    }
    let image_bytes = {
        let (h, w) = transform.output_size();
        output.image_bytes(h, w)
    };
    let report = Report {
        dataset: &generated,
        images: n,
        mean_file_bytes: total_bytes / n.max(1) as u64,
        image_bytes,
        results: &results,
    };
    if args.json {
        print_json(args, &report);
    } else {
        print_table(args, &report);
    }
    Ok(())
}

/// The synthetic dataset `args` asks for, generated (or reused from its
/// cache directory) and opened.
fn open_dataset(args: &Args) -> anyhow::Result<(GeneratedDataset, Dataset)> {
    let classes = args.images.min(10);
    let config = GenerateConfig {
        classes,
        images_per_class: args.images.div_ceil(classes),
        seed: args.seed,
        ..GenerateConfig::default()
    };
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("batchcast-bench-{}-{}", config.total(), args.seed))
    });
    let step = (config.total() / 10).max(1);
    let progress = |done: usize, total: usize| {
        if done.is_multiple_of(step) || done == total {
            eprintln!("generating {}: {done}/{total}", dir.display());
        }
    };
    let generated = generate_jpeg_dataset(&dir, &config, &progress)?;
    let dataset = Dataset::open(&generated.path)?;
    Ok((generated, dataset))
}

/// Times `args.runs` epochs through `pipeline` (after a warm-up of two
/// batches), in images per second and per CPU-second.
fn measure(
    args: &Args,
    pipeline: &Pipeline,
    sampler: &Sampler,
    threads: usize,
) -> anyhow::Result<Result1> {
    let mut images = vec![0u8; args.batch * pipeline.image_bytes()];
    let mut labels = vec![0i64; args.batch];
    // Warm-up: start the threads, size their scratch buffers.
    for batch in sampler.batches(0).take(2) {
        pipeline.fill_batch(0, &batch, &mut images, &mut labels)?;
    }
    let (mut runs, mut per_cpu) = (Vec::new(), Vec::new());
    for r in 0..args.runs {
        let epoch = r as u64 + 1;
        let cpu_start = process_cpu_seconds();
        let start = Instant::now();
        let mut rows = 0;
        for batch in sampler.batches(epoch) {
            let report = pipeline.fill_batch(epoch, &batch, &mut images, &mut labels)?;
            rows += report.rows_written;
        }
        runs.push(rows as f64 / start.elapsed().as_secs_f64());
        per_cpu.push(rows as f64 / (process_cpu_seconds() - cpu_start));
        if !args.json {
            eprintln!(
                "threads {threads} run {}: {:.1} images/s, {:.1} images/CPU-s",
                r + 1,
                runs[r],
                per_cpu[r]
            );
        }
    }
    Ok(Result1 {
        threads,
        runs,
        per_cpu,
    })
}

/// What the bench measured, for printing.
struct Report<'a> {
    dataset: &'a GeneratedDataset,
    images: usize,
    mean_file_bytes: u64,
    /// Bytes of one output image.
    image_bytes: usize,
    results: &'a [Result1],
}

/// Prints the report as one JSON object.
fn print_json(args: &Args, report: &Report<'_>) {
    let rows: Vec<String> = report
        .results
        .iter()
        .map(|r| {
            let m = median(&r.runs);
            let list = |v: &[f64]| {
                let s: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
                s.join(", ")
            };
            format!(
                "{{\"threads\": {}, \"images_per_s\": {m:.2}, \"images_per_s_per_thread\": \
                 {:.2}, \"images_per_cpu_s\": {:.2}, \"runs\": [{}], \"runs_per_cpu_s\": \
                 [{}]}}",
                r.threads,
                m / r.threads as f64,
                median(&r.per_cpu),
                list(&r.runs),
                list(&r.per_cpu)
            )
        })
        .collect();
    println!(
        "{{\"dataset\": {}, \"images\": {}, \"mean_file_bytes\": {}, \"transform\": {}, \
         \"size\": {}, \"output\": {}, \"image_bytes\": {}, \"batch\": {}, \
         \"runs\": {}, \"results\": [{}]}}",
        json_string(&report.dataset.path.display().to_string()),
        report.images,
        report.mean_file_bytes,
        json_string(&args.transform),
        args.size,
        json_string(&args.output),
        report.image_bytes,
        args.batch,
        args.runs,
        rows.join(", ")
    );
}

/// Prints the report as a table, one row per thread count.
fn print_table(args: &Args, report: &Report<'_>) {
    println!(
        "dataset    {} ({} JPEGs, mean {} KiB{})",
        report.dataset.path.display(),
        report.images,
        report.mean_file_bytes / 1024,
        if report.dataset.reused {
            ", reused"
        } else {
            ""
        }
    );
    println!(
        "transform  {} {}, output {} ({} B/image), batch {}, median of {} epochs",
        args.transform, args.size, args.output, report.image_bytes, args.batch, args.runs
    );
    println!(
        "{:>7}  {:>10}  {:>17}  {:>14}",
        "threads", "images/s", "images/s/thread", "images/CPU-s"
    );
    for r in report.results {
        let m = median(&r.runs);
        println!(
            "{:>7}  {:>10.1}  {:>17.1}  {:>14.1}",
            r.threads,
            m,
            m / r.threads as f64,
            median(&r.per_cpu)
        );
    }
}
