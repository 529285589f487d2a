//! `batchcast serve --replay`: a 60-row timestamped trace over 3 time
//! steps (20, 10 and 30 rows, by class) replayed into a real producer
//! process; two consumers (threads here) read it. Each epoch holds what
//! the replay clock has passed, the `amount=25` trigger fires where the
//! arrivals reach 25 (`time=20s` where the trace's clock passes 20 s),
//! and bad traces are refused with the line at fault.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use common::{assert_says, jpeg_dataset, per_label, read_to_end, Env, Fail, Seen};

/// Side of the stored images (`--decode-only --store-size`).
const SIDE: &str = "8";

/// 6 classes of 10 JPEGs and `trace.csv` next to them: classes 0 and 1
/// at `times[0]`, class 2 at `times[1]`, classes 3 to 5 at `times[2]`,
/// the rows written newest first (the replay sorts them).
fn trace(env: &Env, times: [&str; 3]) -> PathBuf {
    let root = jpeg_dataset(&env.path().join("data"), 6, 10, (24, 32));
    let mut csv = String::from("path,label,timestamp\n");
    for class in (0..6).rev() {
        let folder = format!("class_{class:03}");
        let mut files: Vec<_> = std::fs::read_dir(root.join(&folder))
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files.len(), 10);
        let time = times[[0, 0, 1, 2, 2, 2][class]];
        for f in files {
            writeln!(csv, "{folder}/{f},{class},{time}").unwrap();
        }
    }
    let path = root.join("trace.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

/// Serves `csv` for 4 epochs to two consumers; returns what the first saw
/// (the second saw the same) and the producer's `finished` summary.
fn replay(env: &Env, csv: &Path, trigger: &str, clock: &str) -> (Seen, serde_json::Value) {
    let line = format!(
        "serve --name replay --trigger {trigger} --decode-only --store-size {SIDE} --batch-size 8 \
         --consumers 2 --epochs 4 --workers 2 --json {clock}"
    );
    let mut args: Vec<&str> = line.split_whitespace().collect();
    args.extend(["--replay", csv.to_str().unwrap()]);
    let (mut producer, listening) = env.listening(&args);
    assert_eq!(listening["samples_per_epoch"], 20, "{listening}");
    assert_eq!(listening["replay"], csv.to_str().unwrap(), "{listening}");
    let seen: Vec<Seen> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| s.spawn(|| read_to_end("replay", env.path().to_owned(), |_, _, _| {})))
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert!(producer.finish().success(), "{}", producer.stderr_text());
    assert_eq!(seen[0], seen[1], "consumers differ");
    let grew: Vec<_> = producer
        .events("grew")
        .iter()
        .map(|g| (g["epoch"].clone(), g["added"].clone()))
        .collect();
    assert_eq!(grew, [(1.into(), 10.into()), (2.into(), 30.into())]);
    let finished = producer.events("finished").pop().unwrap();
    (seen.into_iter().next().unwrap(), finished)
}

/// Replays a trace whose three steps are at `times`, with `trigger` and
/// the clock options `clock`: each epoch holds what the clock has passed,
/// and the trigger fires once, before epoch 2, for the 40 rows that arrived
/// at the second and third steps.
fn replays_the_trace(times: [&str; 3], trigger: &str, clock: &str) {
    let env = Env::new();
    let csv = trace(&env, times);
    let (seen, finished) = replay(&env, &csv, trigger, clock);
    let arrivals: (f64, f64) = (times[1].parse().unwrap(), times[2].parse().unwrap());
    assert_eq!(
        seen.events,
        [
            "start 0 Some(20)".to_string(),
            "end 0 20".into(),
            "start 1 Some(30)".into(),
            format!("trigger {trigger} #1 epoch 2 samples 40"),
            "end 1 30".into(),
            "start 2 Some(60)".into(),
            "end 2 60".into(),
            "start 3 Some(60)".into(),
            "end 3 60".into(),
        ]
    );
    assert_eq!(seen.arrivals, [Some(arrivals)]);
    let per: Vec<_> = seen.labels.iter().map(|l| per_label(l, 6)).collect();
    assert_eq!(
        per,
        [
            vec![10, 10, 0, 0, 0, 0],
            vec![10, 10, 10, 0, 0, 0],
            vec![10; 6],
            vec![10; 6],
        ]
    );
    assert_eq!(
        finished["summary"]["decoded_per_epoch"],
        serde_json::json!([20, 30, 60, 60])
    );
}

#[test]
fn replay_per_epoch_grows_each_epoch_as_the_timestamps_say() {
    // 12 s of the trace per epoch: epoch 1 at 1012, epoch 2 at 1024.
    replays_the_trace(
        ["1000", "1010.5", "1020"],
        "amount=25",
        "--replay-per-epoch 12",
    );
}

/// `time=20s` counts the trace's time: the clock reads 1012, 1024 and
/// 1036 at the three boundaries, so it fires once, before epoch 2 (the
/// run itself lasts about a second of wall time).
#[test]
fn a_time_trigger_counts_the_replay_clock() {
    replays_the_trace(
        ["1000", "1010.5", "1020"],
        "time=20s",
        "--replay-per-epoch 12",
    );
}

#[test]
fn replay_by_default_moves_one_time_step_per_epoch() {
    replays_the_trace(["1700000000", "1700003600", "1800000000"], "amount=25", "");
}

#[test]
fn replay_refuses_bad_traces_with_the_line_and_other_sources() {
    let env = Env::new();
    let csv = trace(&env, ["1", "2", "3"]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let serve = |path: &Path, extra: &[&str]| {
        let mut args = vec!["serve", "--name", "bad", "--replay", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        env.cmd(&args)
    };
    let bad = csv.with_file_name("bad.csv");
    for (line, row, why) in [
        (4, "class_000/missing.jpg,0,1", "is not a file"),
        (4, "class_000/x.jpg,zero,1", "not a class index"),
        (4, "class_000/x.jpg,0,tomorrow", "not seconds"),
        (4, "class_000/x.jpg,0", "3 fields"),
    ] {
        let mut lines: Vec<&str> = text.lines().collect();
        lines.insert(3, row);
        std::fs::write(&bad, lines.join("\n")).unwrap();
        let err = serve(&bad, &[]).fail();
        assert!(err.contains(&format!("bad.csv:{line}: ")), "{row}: {err}");
        assert!(err.contains(why), "{row}: {err}");
    }
    std::fs::write(&bad, text.replacen("path,label,timestamp", "path,label", 1)).unwrap();
    let err = serve(&bad, &[]).fail();
    assert_says(&err, "bad.csv:1: ");
    assert_says(&err, "path,label,timestamp");
    let data = csv.parent().unwrap().to_str().unwrap();
    for extra in [&["--data", data][..], &["--watch"], &["--synthetic"]] {
        let err = serve(&csv, extra).fail_with(2);
        assert!(err.contains("cannot be used with"), "{extra:?}: {err}");
    }
    let err = serve(&csv, &["--replay-per-epoch", "0"]).fail();
    assert_says(&err, "--replay-per-epoch must be a positive number");
}

/// examples/replay: the plan's two policies run on one small drifting
/// trace under `batchcast run`, and `runs compare` shows both.
#[test]
fn the_replay_example_plan_compares_two_policies() {
    let bin = env!("CARGO_BIN_EXE_batchcast");
    let env = Env::new();
    let dir = env.path().join("example");
    std::fs::create_dir(&dir).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/replay");
    // The plan's Python trainer is swapped for its stand-in without
    // Python (trainer.sh: `batchcast consume`).
    let plan = std::fs::read_to_string(example.join("plan.yaml")).unwrap();
    assert_eq!(plan.matches("file: trainer.py").count(), 2, "{plan}");
    std::fs::write(
        dir.join("plan.yaml"),
        plan.replace("trainer.py", "trainer.sh"),
    )
    .unwrap();
    std::fs::copy(example.join("trainer.sh"), dir.join("trainer.sh")).unwrap();
    let config = batchcast_pipeline::GenerateConfig {
        classes: 4,
        images_per_class: 20,
        long_side: (24, 32),
        ..batchcast_pipeline::GenerateConfig::default()
    };
    let drift = batchcast_pipeline::DriftConfig {
        steps: 3,
        ..batchcast_pipeline::DriftConfig::default()
    };
    batchcast_pipeline::generate_drifting_trace(&dir.join("data"), &config, &drift, &|_, _| {})
        .unwrap();
    let store = env.path().join("runs.sqlite");
    let run = |line: &str| {
        let out = std::process::Command::new(bin)
            .args(line.split_whitespace())
            .arg("--store")
            .arg(&store)
            .env("BATCHCAST_BIN", bin)
            .env("BATCHCAST_DIR", env.path())
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{line}: {text}{err}");
        text
    };
    run("run plan.yaml");
    let compare = run("runs compare --experiment replay-policies --json");
    for workload in ["amount-new-data", "every-epoch-freshness"] {
        assert!(compare.contains(workload), "{workload}: {compare}");
    }
    // Each policy's producer took in the trace's two later steps; only
    // every-epoch fired (80 samples never reach amount=300).
    let store = batchcast_runs::Store::open_read_only(&store).unwrap();
    let rows = store.runs(&batchcast_runs::RunFilter::default()).unwrap();
    assert_eq!(rows.len(), 4, "two trainers and two producers");
    for row in &rows {
        let (err, _) = store
            .log(row.run.id, batchcast_runs::LogStream::Stderr, None)
            .unwrap();
        assert_eq!(
            row.run.status,
            batchcast_runs::RunStatus::Finished,
            "{}/{}: {}",
            row.workload,
            row.run.name,
            String::from_utf8_lossy(&err)
        );
        if row.run.name != batchcast_runs::keys::DATA_RUN {
            continue;
        }
        let events = common::events_from(&store, row.run.id, "serve");
        let grew = events.iter().filter(|m| m.contains("new samples")).count();
        let fired = events.iter().filter(|m| m.starts_with("trigger")).count();
        let want = if row.workload == "every-epoch-freshness" {
            4
        } else {
            0
        };
        assert_eq!((grew, fired), (2, want), "{}: {events:?}", row.workload);
    }
}

/// `serve --replay` of the 20/10/30-row trace for 4 epochs in batches of
/// 4, with `amount=25` and a fast-writing state file.
fn durable_replay(env: &Env, csv: &Path) -> common::Proc {
    let line = format!(
        "serve --name again --trigger amount=25 --decode-only --store-size {SIDE} --batch-size 4 \
         --consumers 2 --epochs 4 --window 2 --max-lag 1batches --workers 1 \
         --state-interval 0.02 --json"
    );
    let mut args: Vec<&str> = line.split_whitespace().collect();
    args.extend(["--replay", csv.to_str().unwrap()]);
    let mut p = env.spawn(&args);
    p.expect("listening");
    p
}

/// A consumer of the producer's batch size and a slower one of 3 rows
/// (its batches span the producer's), printing each batch's hash.
fn hashing_consumers(env: &Env) -> Vec<common::Proc> {
    [("5", "4"), ("20", "3")]
        .iter()
        .map(|(delay, batch)| env.hashing_consumer("again", delay, batch))
        .collect()
}

/// What a consumer printed: each batch (epoch, index, rows, hash) and
/// each trigger, in order.
fn stream(c: &mut common::Proc) -> Vec<String> {
    assert!(c.finish().success(), "{}", c.stderr_text());
    c.seen
        .iter()
        .filter_map(|(_, v)| match v["event"].as_str() {
            Some("batch") => Some(format!(
                "batch {} {} {} {}",
                v["epoch"], v["index"], v["rows"], v["hash"]
            )),
            Some("trigger") => Some(format!(
                "trigger #{} epoch {} samples {}",
                v["seq"], v["epoch"], v["samples"]
            )),
            _ => None,
        })
        .collect()
}

/// A replayed stream SIGKILLed in epoch 1 (the trace's second step) and
/// in epoch 2 (its third), restarted each time, delivers what an
/// uninterrupted one does: the resumed epoch holds the step the clock had
/// reached, and the trigger fires where it would have, over the arrivals
/// counted before the restart.
#[test]
fn a_restarted_replay_resumes_its_clock_and_its_trigger() {
    let env = Env::new();
    let csv = trace(&env, ["1000", "1010", "1020"]);
    let mut producer = durable_replay(&env, &csv);
    let want: Vec<Vec<String>> = hashing_consumers(&env).iter_mut().map(stream).collect();
    assert!(producer.finish().success(), "{}", producer.stderr_text());
    let triggers: Vec<&String> = want[0].iter().filter(|l| l.contains("trigger")).collect();
    assert_eq!(triggers, ["trigger #1 epoch 2 samples 40"]);
    assert_eq!(want[0].len(), 5 + 8 + 15 + 15 + 1);

    let env = Env::new();
    let mut producer = durable_replay(&env, &csv);
    let mut cs = hashing_consumers(&env);
    let mut resumed_in = Vec::new();
    for (epoch, index) in [(1, 6), (2, 10)] {
        cs[0].expect_where("batch", |v| {
            v["epoch"].as_u64() == Some(epoch) && v["index"].as_u64() >= Some(index)
        });
        producer.kill9();
        producer.finish();
        producer = durable_replay(&env, &csv);
        let listening = producer.events("listening");
        // The resume point is the slowest consumer's, as last written:
        // this epoch, or the end of the one before.
        let resumed = listening[0]["resumed"]["epoch"].as_u64();
        let Some(at) = resumed.filter(|r| *r + 1 >= epoch && *r <= epoch) else {
            panic!("resumed in epoch {epoch} or the one before: {listening:?}");
        };
        let size = [20, 30, 60][at as usize];
        assert_eq!(listening[0]["samples_per_epoch"], size, "{listening:?}");
        resumed_in.push(at);
    }
    eprintln!("resumed in epochs {resumed_in:?}");
    assert!(resumed_in.iter().any(|&e| e > 0), "{resumed_in:?}");
    let got: Vec<Vec<String>> = cs.iter_mut().map(stream).collect();
    assert!(producer.finish().success(), "{}", producer.stderr_text());
    for (i, (got, want)) in got.iter().zip(&want).enumerate() {
        let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
        assert!(
            got == want,
            "consumer {i}: {} lines, want {}; first difference at {first_diff:?}",
            got.len(),
            want.len()
        );
    }
}
