//! Durable epochs: a `batchcast serve` producer SIGKILLed mid-run and
//! restarted under the same name resumes its stream, and its consumers,
//! which wait for it, deliver exactly what an uninterrupted run delivers.
//! A restart that cannot resume (another seed, a damaged state file) is
//! refused, and the waiting consumers are told why.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{assert_says, jpeg_dataset, Env, Fail, Proc, UNTIL_KILLED};
use serde_json::Value;

/// Consumers' per-batch delays in ms and batch sizes: a fast, a middling
/// and a slow one of the producer's batch size, and one of 7 rows (its
/// batches span producer batches: it holds pieces across a restart).
const CONSUMERS: [(&str, &str); 4] = [("0", "4"), ("2", "4"), ("5", "4"), ("1", "7")];

/// `serve` over `data` for the four consumers, seed 7, 2 epochs.
fn serve(env: &Env, name: &str, data: &Path, seed: &str) -> Proc {
    let data = data.to_str().unwrap();
    let mut args = common::serve_data(name, data, "4");
    args.extend(["--seed", seed, "--epochs", "2", "--window", "4"]);
    args.extend(["--workers", "1", "--state-interval", "0.02"]);
    env.listening(&args).0
}

/// The four consumers; with `events`, each appends its run events to
/// `events/N.jsonl`, as under `batchcast run`.
fn consumers(env: &Env, name: &str, events: Option<&Path>) -> Vec<Proc> {
    CONSUMERS
        .iter()
        .enumerate()
        .map(|(i, (delay, batch))| {
            let mut cmd = env.hashing_consumer_cmd(name, delay, batch);
            if let Some(dir) = events {
                cmd.env(batchcast::EVENTS_ENV, dir.join(format!("{i}.jsonl")));
            }
            Proc::start(cmd)
        })
        .collect()
}

/// (epoch, index, rows, hash) of every batch a consumer printed.
fn log(c: &Proc) -> Vec<(u64, u64, u64, String)> {
    c.events("batch")
        .iter()
        .map(|v| {
            (
                v["epoch"].as_u64().unwrap(),
                v["index"].as_u64().unwrap(),
                v["rows"].as_u64().unwrap(),
                v["hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn finished_cleanly(c: &mut Proc) {
    let status = c.finish();
    let fin = c.events("finished");
    assert!(
        status.success() && fin.len() == 1,
        "{status:?}: {:?}\n{}",
        c.seen.iter().rev().take(3).collect::<Vec<_>>(),
        c.stderr_text()
    );
}

/// Waits until consumer `c` prints a batch at or past (epoch, index).
fn reaches(c: &mut Proc, epoch: u64, index: u64) {
    c.expect_where("batch", |v: &Value| {
        let e = v["epoch"].as_u64().unwrap();
        e > epoch || (e == epoch && v["index"].as_u64().unwrap() >= index)
    });
}

/// A producer over two classes of `per_class` images, SIGKILLed once the
/// fastest of its consumers reached batch `at`: the dataset (and the
/// directory that holds it) and the consumers, now waiting.
fn killed_mid_epoch(
    env: &Env,
    name: &str,
    per_class: usize,
    at: u64,
) -> (tempfile::TempDir, PathBuf, Vec<Proc>) {
    let dir = tempfile::tempdir().unwrap();
    let data = jpeg_dataset(dir.path(), 2, per_class, (20, 40));
    let mut producer = serve(env, name, &data, "7");
    let mut cs = consumers(env, name, None);
    reaches(&mut cs[0], 0, at);
    producer.kill9();
    producer.finish();
    (dir, data, cs)
}

#[test]
fn a_producer_killed_three_times_and_restarted_delivers_what_an_uninterrupted_run_does() {
    let data_dir = tempfile::tempdir().unwrap();
    // 900 images in batches of 4: 225 batches per epoch.
    let data = jpeg_dataset(data_dir.path(), 3, 300, (20, 40));

    let env = Env::new();
    let mut producer = serve(&env, "ref", &data, "7");
    let mut reference = consumers(&env, "ref", None);
    for c in &mut reference {
        finished_cleanly(c);
    }
    assert!(producer.finish().success());
    let want: Vec<_> = reference.iter().map(log).collect();
    assert_eq!(want[0].len(), 450, "two epochs of 225 batches");
    assert_eq!(want[3].len(), 2 * 900usize.div_ceil(7));
    for w in &want[1..3] {
        assert_eq!(
            *w, want[0],
            "consumers of one producer see the same batches"
        );
    }

    let env = Env::new();
    let mut producer = serve(&env, "durable", &data, "7");
    let events = tempfile::tempdir().unwrap();
    let mut cs = consumers(&env, "durable", Some(events.path()));
    let mut restarts = Vec::new();
    for (epoch, index) in [(0, 100), (1, 0), (1, 125)] {
        // The fastest consumer's progress says when: about batch 100, at the
        // epoch boundary (the slower ones still in the first epoch's tail),
        // then about batch 350.
        reaches(&mut cs[0], epoch, index);
        producer.kill9();
        producer.finish();
        let t0 = Instant::now();
        producer = serve(&env, "durable", &data, "7");
        let listening = producer.events("listening");
        let resumed = &listening[0]["resumed"];
        assert!(resumed.is_object(), "the restart resumed: {listening:?}");
        restarts.push((t0, resumed.clone()));
    }
    for c in &mut cs {
        finished_cleanly(c);
        assert!(
            c.stderr_text().contains("waiting up to"),
            "the consumer said it waits"
        );
    }
    assert!(producer.finish().success());
    for i in 0..cs.len() {
        // Each reattachment is an event of the consumer's run.
        let text = std::fs::read_to_string(events.path().join(format!("{i}.jsonl"))).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "consumer {i}: {text}");
        for l in &lines {
            assert_eq!(l["event"], "reattached", "{l}");
            assert!(l["waited_secs"].as_f64().unwrap() >= 0.0, "{l}");
        }
    }
    for (i, (c, want)) in cs.iter().zip(&want).enumerate() {
        let got = log(c);
        let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
        assert!(
            got == *want,
            "consumer {i} {:?}: {} batches, want {}; first difference at {first_diff:?}",
            CONSUMERS[i],
            got.len(),
            want.len()
        );
    }
    // The stream finished: nothing is left to resume.
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    // Measured: from the restart's spawn to the next batch reaching the
    // fastest consumer (the line's time is when the test read it).
    for (t0, resumed) in restarts {
        let first = cs[0]
            .seen
            .iter()
            .find(|(t, v)| *t > t0 && v["event"] == "batch")
            .map(|(t, _)| t.duration_since(t0));
        eprintln!("resumed at {resumed}; restart to first batch: {first:?}");
    }
}

#[test]
fn a_restart_with_another_seed_is_refused_and_the_waiting_consumers_are_told() {
    let env = Env::new();
    let (_dir, data, mut cs) = killed_mid_epoch(&env, "seeds", 100, 10);

    let data_str = data.to_str().unwrap();
    let mut args = common::serve_data("seeds", data_str, "3");
    args.extend(["--seed", "8", "--epochs", "2"]);
    let err = env.cmd(&args).fail();
    assert_says(&err, "seed: then 7, now 8");
    assert!(!err.contains("dataset:"), "only the seed differs: {err}");
    assert_says(&err, "--fresh");
    for c in &mut cs {
        let e = c.expect("error");
        assert_eq!(e["kind"], "refused", "{e}");
        assert!(e["message"]
            .as_str()
            .unwrap()
            .contains("seed: then 7, now 8"));
        assert_eq!(c.finish().code(), Some(4));
    }
    // --fresh starts afresh.
    args.push("--fresh");
    args.push("--no-wait");
    let (mut p, listening) = env.listening(&args);
    assert!(listening.get("resumed").is_none(), "{listening}");
    p.signal(libc::SIGINT);
    p.finish();
}

#[test]
fn a_damaged_state_file_is_refused_and_kept() {
    let env = Env::new();
    let (_dir, data, mut cs) = killed_mid_epoch(&env, "damaged", 50, 5);
    for c in &mut cs {
        c.kill9();
        c.finish();
    }
    let state = env.path().join("damaged.state");
    let text = std::fs::read_to_string(&state).unwrap();
    let damaged = text.replacen("row ", "row 9", 1);
    std::fs::write(&state, &damaged).unwrap();
    let data_str = data.to_str().unwrap();
    let args = common::serve_data("damaged", data_str, "3");
    let err = env.cmd(&args).fail();
    assert_says(&err, "corrupt");
    assert_says(&err, "--fresh");
    assert_eq!(std::fs::read_to_string(&state).unwrap(), damaged, "kept");
}

#[test]
fn consumers_give_up_after_the_reconnect_timeout_saying_how_long_they_waited() {
    let env = Env::new();
    let mut producer = env.producer("late", UNTIL_KILLED);
    let mut c = env.spawn("consume late --each --reconnect-timeout 1");
    c.expect("batch");
    producer.kill9();
    let killed_at = Instant::now();
    let e = c.expect("error");
    let took = killed_at.elapsed();
    assert_eq!(e["kind"], "producer_gone", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert_says(msg, "within 1 s");
    assert_says(msg, "batchcast serve --name late");
    assert_eq!(c.finish().code(), Some(3));
    assert!(took.as_secs_f64() >= 0.9, "waited {took:?}");
    assert!(took.as_secs_f64() < 10.0, "waited {took:?}");
    assert_says(&c.stderr_text(), "waiting up to 1 s");
}
