//! A libFuzzer-free driver for the fuzz targets, on stable Rust: runs a
//! target's body over its seed corpus, then over random mutations of it
//! (seeded, so a run can be repeated) for a bounded time. No coverage
//! feedback: it is the fallback for machines without nightly, where
//! `cargo fuzz` cannot run.
//!
//! ```text
//! stable-fuzz TARGET SECONDS [SEED]     # TARGET: jpeg | wire | rebatch
//! stable-fuzz seeds                     # (re)writes the generated seeds
//! ```
//!
//! A panicking input is written to `artifacts/TARGET/crash-N` and the
//! driver exits 1.

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use batchcast::internals::wire::{
    encode, Boundary, ConsumerHello, EpochStart, Hello, JoinPolicy, Position, Role, ShutdownReason,
    ToConsumer, ToProducer, TriggerFired, Welcome, MAGIC, PROTOCOL_VERSION,
};

/// Longest input tried (libFuzzer's default `-max_len` is 4096).
const MAX_LEN: usize = 16 * 1024;

static PANICKED: AtomicBool = AtomicBool::new(false);

fn target(name: &str) -> Option<fn(&[u8])> {
    match name {
        "jpeg" => Some(batchcast_fuzz::jpeg),
        "wire" => Some(batchcast_fuzz::wire),
        "rebatch" => Some(batchcast_fuzz::rebatch),
        _ => None,
    }
}

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to eight random edits of `input`, some splicing in `other`.
fn mutate(input: &mut Vec<u8>, other: &[u8], rng: &mut Rng) {
    const INTERESTING: [u8; 8] = [0, 1, 0x7f, 0x80, 0xff, 0xd8, 0xda, 0xc0];
    for _ in 0..1 + rng.below(8) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => input[rng.below(len)] ^= 1 << rng.below(8),
            1 if len > 0 => input[rng.below(len)] = rng.next() as u8,
            2 if len > 0 => input[rng.below(len)] = INTERESTING[rng.below(INTERESTING.len())],
            3 if len < MAX_LEN => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                input.drain(at..at + n);
            }
            5 if len > 0 => input.truncate(rng.below(len)),
            6 if !other.is_empty() && len > 0 => {
                let from = rng.below(other.len());
                let n = 1 + rng.below((other.len() - from).min(256));
                let at = rng.below(len);
                let end = (at + n).min(len);
                input.splice(at..end, other[from..from + n].iter().copied());
            }
            7 if len >= 4 => {
                // A big-endian 16-bit field (JPEG lengths and sizes).
                let at = rng.below(len - 1);
                let v = [0u16, 1, 0x7fff, 0xffff, 30000][rng.below(5)];
                input[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
            _ => input.push(rng.next() as u8),
        }
    }
    input.truncate(MAX_LEN);
}

/// Runs `body` on `input`; true if it panicked.
fn crashes(body: fn(&[u8]), input: &[u8]) -> bool {
    PANICKED.store(false, Ordering::SeqCst);
    let result = panic::catch_unwind(|| body(input));
    result.is_err() || PANICKED.load(Ordering::SeqCst)
}

fn save_crash(dir: &Path, name: &str, input: &[u8]) -> PathBuf {
    let dir = dir.join("artifacts").join(name);
    let _ = fs::create_dir_all(&dir);
    let n = fs::read_dir(&dir).map_or(0, |d| d.count());
    let path = dir.join(format!("crash-{n}"));
    let _ = fs::write(&path, input);
    path
}

fn fuzz(root: &Path, name: &str, body: fn(&[u8]), secs: u64, seed: u64) -> ExitCode {
    let mut corpus: Vec<Vec<u8>> = fs::read_dir(root.join("corpus").join(name))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| fs::read(e.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    // Panics are counted by the hook (some are caught inside the targets'
    // code, e.g. the pipeline's decoder guard) and reported once.
    panic::set_hook(Box::new(|info| {
        if !PANICKED.swap(true, Ordering::SeqCst) {
            eprintln!("panic: {info}");
        }
    }));
    let mut rng = Rng(seed | 1);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut runs = 0u64;
    let mut input = Vec::new();
    while runs < corpus.len() as u64 || Instant::now() < deadline {
        let k = runs as usize;
        if k < corpus.len() {
            input.clone_from(&corpus[k]);
        } else {
            input.clone_from(&corpus[rng.below(corpus.len())]);
            let other = &corpus[rng.below(corpus.len())];
            mutate(&mut input, other, &mut rng);
        }
        runs += 1;
        if crashes(body, &input) {
            let path = save_crash(root, name, &input);
            eprintln!(
                "{name}: CRASH after {runs} runs; input saved to {}",
                path.display()
            );
            return ExitCode::FAILURE;
        }
    }
    println!(
        "{name}: {runs} runs in {secs} s ({} seeds, rng seed {seed}), no crash",
        corpus.len()
    );
    ExitCode::SUCCESS
}

/// Writes the generated wire seeds: one stream of frames per direction.
fn write_seeds(root: &Path) -> std::io::Result<()> {
    let hello = ToProducer::Hello(Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        role: Role::Consumer(ConsumerHello {
            batch_size: Some(1000),
            drop_last: false,
            join: JoinPolicy::CatchUp,
            label: "train.py".into(),
            on_evict: Default::default(),
            start: Some(Position { epoch: 1, row: 640 }),
            deferred: false,
        }),
    });
    let status = ToProducer::Hello(Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        role: Role::Status,
    });
    let mut to_producer = vec![0u8];
    for m in [&hello, &ToProducer::Released, &status] {
        to_producer.extend(encode(m).map_err(std::io::Error::other)?);
    }
    let mut to_consumer = vec![1u8];
    for m in [
        ToConsumer::Welcome(Welcome {
            version: PROTOCOL_VERSION,
            producer_pid: 4242,
            slot_size: 1 << 20,
            slots: 8,
            window: 8,
            samples_per_epoch: Some(1000),
            batch_size: Some(64),
            consumer_id: 3,
            stream: Default::default(),
            first_epoch_partial: false,
            first_epoch_samples: None,
            resumable: false,
            identity: None,
            mirrors: vec![batchcast::MirrorSpec {
                device: "GPU-00000000-0000-0000-0000-000000000000".into(),
                len: 9 << 20,
                import_info: vec![0; 16],
            }],
        }),
        ToConsumer::EpochStart(EpochStart {
            epoch: 0,
            samples: Some(1000),
            batch_size: 64,
            partial: false,
            first_seq: 0,
            first_row: 0,
        }),
        ToConsumer::EpochEnd {
            epoch: 0,
            samples: 1000,
            end_seq: 16,
        },
        ToConsumer::Boundary(Boundary {
            next_samples: Some(1500),
            trigger: Some(TriggerFired {
                id: "amount=400".into(),
                seq: 1,
                epoch: 1,
                samples: 500,
                arrivals: Some((1.7e9, 1.8e9)),
            }),
        }),
        ToConsumer::Refused("bad label".into()),
        ToConsumer::Shutdown(ShutdownReason::Failed("source failed".into())),
    ] {
        to_consumer.extend(encode(&m).map_err(std::io::Error::other)?);
    }
    let dir = root.join("corpus").join("wire");
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("to-producer"), to_producer)?;
    fs::write(dir.join("to-consumer"), to_consumer)?;
    let dir = root.join("corpus").join("rebatch");
    fs::create_dir_all(&dir)?;
    // Bytes the rebatch target reads as batch size, drop_last, epochs and
    // sizes: a few shapes (small, large consumer batches; zero-row batches).
    fs::write(dir.join("small"), [7u8, 0, 0, 1, 20, 64, 0, 64, 0, 13, 0])?;
    fs::write(
        dir.join("large"),
        [0xe8, 0x03, 1, 2, 40, 0x40, 0, 0, 0, 0xff, 0x03, 1, 0],
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match args.as_slice() {
        [cmd] if cmd == "seeds" => match write_seeds(&root) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cannot write the seeds under {}: {e}", root.display());
                ExitCode::FAILURE
            }
        },
        [name, rest @ ..] if target(name).is_some() && rest.len() <= 2 => {
            let secs = rest.first().and_then(|s| s.parse().ok()).unwrap_or(60);
            let seed = rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
            let body = target(name).unwrap_or(batchcast_fuzz::jpeg);
            fuzz(&root, name, body, secs, seed)
        }
        _ => {
            eprintln!(
                "usage: stable-fuzz (jpeg|wire|rebatch) [SECONDS] [SEED] | stable-fuzz seeds"
            );
            ExitCode::from(2)
        }
    }
}
