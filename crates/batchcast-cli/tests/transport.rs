//! Multi-process tests of the shared-memory transport: real producer and
//! consumer processes, killed with SIGKILL where the test says so.

mod common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{
    assert_every_epoch_full_of, assert_full_epoch, assert_says, ends_after, Env, Fail, UNTIL_KILLED,
};

/// Three consumers with batch sizes that are neither multiples nor divisors
/// of the producer's see every sample of every epoch exactly once, in order,
/// with an exact `len`, and the directory is empty after the run.
#[test]
fn consumers_with_different_batch_sizes_see_every_sample_once() {
    let env = Env::new();
    let shm_before = shm_listing();
    let mut producer = env.producer(
        "sizes",
        "--samples 1000 --batch-size 64 --epochs 3 --window 4 --consumers 5",
    );
    let mut consumers: Vec<_> = [
        "--batch-size 32",
        "--batch-size 48",
        "--batch-size 100",
        "",
        "--batch-size 48 --drop-last",
    ]
    .into_iter()
    .map(|extra| env.spawn(&format!("consume sizes --verify {extra}")))
    .collect();
    for c in &mut consumers {
        let ends = ends_after(c, 3);
        for (e, end) in ends.iter().enumerate() {
            assert_eq!(end["epoch"], e as u64);
            if end["expected_batches"] == 20 {
                assert_full_epoch(end, 0, 959); // drop_last: 20 x 48
            } else {
                assert_full_epoch(end, 0, 999);
            }
        }
        assert_eq!(c.events("finished")[0]["reason"], "Finished");
    }
    assert!(producer.finish().success());
    // Batch size 64 matches the producer's: every batch is a view.
    assert_eq!(consumers[3].events("epoch_end")[0]["zero_copy_batches"], 16);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    assert_eq!(shm_listing(), shm_before, "something was left in /dev/shm");
}

/// A consumer batch needs more producer batches than the window holds
/// (1000 rows against batches of 64 and a window of 8, 512 rows): it is
/// copied together as they arrive, so it never waits for slots it holds
/// itself. Every epoch exact, the short tail (4500 = 4 x 1000 + 500)
/// included, alone and beside a consumer of batch 7. (The re-batcher used to
/// hold a lease per pending producer batch: every consumer stopped, and the
/// harness's deadline turned the hang into a failure.)
#[test]
fn fault3_consumer_batch_larger_than_window() {
    for sizes in [&["1000"][..], &["1000", "7"][..]] {
        let env = Env::new();
        let args = format!(
            "--samples 4500 --batch-size 64 --window 8 --epochs 3 --consumers {}",
            sizes.len()
        );
        let mut producer = env.producer("big", &args);
        let mut procs: Vec<_> = sizes
            .iter()
            .map(|bs| env.spawn(&format!("consume big --verify --batch-size {bs}")))
            .collect();
        for (c, bs) in procs.iter_mut().zip(sizes) {
            assert!(c.finish().success(), "batch size {bs}");
            let ends = c.events("epoch_end");
            assert_eq!(ends.len(), 3, "batch size {bs}: {ends:?}");
            for (e, end) in ends.iter().enumerate() {
                assert_eq!(end["epoch"], e as u64);
                assert_full_epoch(end, 0, 4499);
            }
            let expected: u64 = 4500u64.div_ceil(bs.parse().unwrap());
            assert_eq!(ends[0]["expected_batches"], expected);
            assert_eq!(c.events("finished")[0]["reason"], "Finished");
        }
        assert!(producer.finish().success());
    }
}

/// A consumer SIGKILLed while it holds every slot of the window: the
/// producer reclaims its leases at once and the others finish.
/// (TensorSocket 0.0.5 stalls everyone for 10 s on a dead consumer.)
#[test]
fn consumer_sigkilled_mid_epoch_does_not_stall_the_others() {
    let env = Env::new();
    let mut producer = env.producer(
        "kill-consumer",
        "--samples 2000 --batch-size 50 --epochs 2 --window 4 --consumers 3",
    );
    // The victim is slow, so it soon holds the whole window.
    let mut victim = env.spawn("consume kill-consumer --each --delay-ms 1000");
    let mut others: Vec<_> = (0..2)
        .map(|_| env.spawn("consume kill-consumer --verify"))
        .collect();
    victim.expect_where("batch", |v| v["index"] == 1);
    let killed_at = Instant::now();
    victim.kill9();
    for c in &mut others {
        assert_every_epoch_full_of(c, 2, 2000);
    }
    // 80 batches remained; had the dead consumer's leases been kept, the
    // producer would have blocked for good.
    assert!(killed_at.elapsed() < Duration::from_secs(30));
    assert!(producer.finish().success());
    assert!(env.leftovers().is_empty());
}

/// A producer SIGKILLed mid-run that keeps no state (so that no restart
/// can resume its stream): every consumer's next read fails with "producer
/// gone", promptly, and none hangs.
#[test]
fn producer_sigkilled_every_consumer_errors_promptly() {
    let env = Env::new();
    let args = format!("{UNTIL_KILLED} --no-state --window 4");
    let mut producer = env.producer("kill-producer", &args);
    let mut consumers: Vec<_> = (0..3)
        .map(|_| env.spawn("consume kill-producer --each --delay-ms 5"))
        .collect();
    for c in &mut consumers {
        c.expect("batch");
    }
    let killed_at = Instant::now();
    producer.kill9();
    for c in &mut consumers {
        let err = c.expect("error");
        assert_eq!(err["kind"], "producer_gone", "{err}");
        assert_says(err["message"].as_str().unwrap(), "kill-producer");
        assert_eq!(c.finish().code(), Some(3));
    }
    let took = killed_at.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "consumers took {took:?} to notice"
    );
}

/// `catch-up`: a consumer joining while the current epoch's first batch is
/// still retained gets that epoch whole, replayed, and the first consumer
/// is not held back.
#[test]
fn late_joiner_catch_up_replays_the_retained_epoch() {
    let env = Env::new();
    // 10 batches per epoch, a window of 16: an epoch's start stays retained
    // while the slow first consumer holds the window.
    let mut producer = env.producer(
        "catch-up",
        "--samples 100 --batch-size 10 --epochs 3 --window 16",
    );
    let mut first = env.spawn("consume catch-up --each --delay-ms 30 --verify");
    first.expect_where("batch", |v| v["index"] == 2);
    let mut late = env.spawn("consume catch-up --verify --join catch-up");
    assert!(late.finish().success());
    let start = &late.events("epoch_start")[0];
    assert_eq!(start["partial"], false, "{start}");
    for end in late.events("epoch_end") {
        assert_full_epoch(&end, 0, 99);
    }
    assert!(first.finish().success());
    assert_eq!(first.events("epoch_end").len(), 3);
    for end in first.events("epoch_end") {
        assert_full_epoch(&end, 0, 99);
    }
    assert!(producer.finish().success());
}

/// `catch-up` when the epoch's start is no longer retained, and
/// `next-epoch` always: the newcomer waits and sees only whole epochs.
#[test]
fn late_joiner_waits_for_the_next_epoch_when_it_must() {
    for join in ["catch-up", "next-epoch"] {
        let env = Env::new();
        let mut producer = env.producer(
            "next",
            "--samples 200 --batch-size 10 --epochs 3 --window 2",
        );
        let mut first = env.spawn("consume next --each --delay-ms 20");
        // With a window of 2 the producer is at most a few batches past
        // batch 5 of epoch 0: mid-epoch, its start overwritten.
        first.expect_where("batch", |v| v["epoch"] == 0 && v["index"] == 5);
        let mut late = env.spawn(&["consume", "next", "--verify", "--join", join]);
        assert!(late.finish().success());
        let starts = late.events("epoch_start");
        assert_eq!(starts[0]["partial"], false, "{join}");
        assert!(
            starts[0]["epoch"].as_u64().unwrap() >= 1,
            "{join}: {starts:?}"
        );
        for end in late.events("epoch_end") {
            assert_full_epoch(&end, 0, 199);
        }
        assert!(first.finish().success());
        assert!(producer.finish().success());
    }
}

/// `now`: the newcomer starts mid-epoch with a partial first epoch whose
/// length it knew exactly, then whole epochs.
#[test]
fn late_joiner_now_gets_a_partial_first_epoch_with_exact_len() {
    let env = Env::new();
    let mut producer = env.producer("now", "--samples 200 --batch-size 10 --epochs 2 --window 2");
    let mut first = env.spawn("consume now --each --delay-ms 20");
    first.expect_where("batch", |v| v["epoch"] == 0 && v["index"] == 5);
    let mut late = env.spawn("consume now --verify --join now --batch-size 7");
    assert!(late.finish().success());
    let starts = late.events("epoch_start");
    let ends = late.events("epoch_end");
    assert_eq!(starts[0]["partial"], true);
    assert_eq!(starts[0]["epoch"], 0);
    let partial = &ends[0];
    let first_id = partial["first_id"].as_i64().unwrap();
    assert!(first_id > 0 && first_id % 10 == 0, "{partial}");
    assert_full_epoch(partial, first_id, 199);
    assert_full_epoch(&ends[1], 0, 199);
    assert!(first.finish().success());
    assert!(producer.finish().success());
}

/// The fast consumer runs ahead of the slow one inside the window.
/// (TensorSocket 0.0.5 runs every consumer at the slowest one's pace.)
#[test]
fn tensorsocket_fault_lockstep_fast_consumer_is_not_held_back() {
    let env = Env::new();
    // An epoch of 6 batches fits in the window of 8; both consumers are
    // attached before the first batch.
    let mut producer = env.producer(
        "pace",
        "--samples 60 --batch-size 10 --epochs 1 --window 8 --consumers 2",
    );
    let mut slow = env.spawn("consume pace --each --delay-ms 300");
    let mut fast = env.spawn("consume pace --verify");
    let end = fast.expect("epoch_end");
    assert_full_epoch(&end, 0, 59);
    // The slow one has not got far: 300 ms per batch.
    slow.pump();
    let slow_batches = slow.events("batch").len();
    assert!(
        slow_batches <= 3,
        "slow consumer read {slow_batches} batches meanwhile"
    );
    assert!(fast.finish().success());
    assert!(slow.finish().success());
    assert!(producer.finish().success());
}

/// Garbage, an oversized length and a truncated frame close only the
/// connection that sent them.
#[test]
fn garbage_on_the_socket_closes_only_that_connection() {
    let env = Env::new();
    let mut producer = env.producer(
        "garbage",
        "--samples 500 --batch-size 10 --epochs 2 --window 4",
    );
    let mut good = env.spawn("consume garbage --each --delay-ms 10 --verify");
    good.expect("batch");
    let sock = env.path().join("garbage.sock");
    let payloads: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        u32::MAX.to_le_bytes().to_vec(),
        {
            let mut v = 100u32.to_le_bytes().to_vec();
            v.extend([0u8; 10]); // truncated
            v
        },
        {
            let mut v = 8u32.to_le_bytes().to_vec();
            v.extend([0xff; 8]); // undecodable
            v
        },
    ];
    for bytes in payloads {
        let mut s = UnixStream::connect(&sock).unwrap();
        let _ = s.write_all(&bytes);
        if bytes.len() > 8 {
            continue; // dropped mid-frame
        }
        // The producer closes the connection: reading sees EOF.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        let n = std::io::Read::read(&mut s, &mut buf).unwrap_or(0);
        assert!(n == 0 || n < 64, "expected the connection to close");
    }
    // The stream goes on for the good consumer and for a new one.
    let mut newcomer = env.spawn("consume garbage --verify --join next-epoch");
    assert!(newcomer.finish().success());
    assert!(good.finish().success());
    for end in good.events("epoch_end") {
        assert_full_epoch(&end, 0, 499);
    }
    assert!(producer.finish().success());
}

/// A second live producer of the same name is refused, naming the first.
#[test]
fn second_producer_with_the_same_name_is_refused() {
    let env = Env::new();
    let first = env.producer("dup", "--samples 100 --epochs 1");
    let mut second = env.spawn("serve --name dup --synthetic");
    let status = second.finish();
    assert_eq!(status.code(), Some(1));
    let err = second.stderr_text();
    assert_says(&err, "already running");
    assert_says(&err, &format!("pid {}", first.pid()));
}

/// A producer killed with SIGKILL leaves a stale socket; `status` removes
/// it, and the next producer of that name takes the name.
#[test]
fn restart_after_a_killed_producer_reuses_the_name() {
    let env = Env::new();
    let mut first = env.producer("again", "--samples 100 --epochs 1");
    first.kill9();
    assert!(env.path().join("again.sock").exists());
    let out = env.cmd("status").output().unwrap();
    assert_says(
        &String::from_utf8_lossy(&out.stdout),
        "no producer is running",
    );
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    let mut second = env.producer("again", "--samples 100 --batch-size 10 --epochs 1");
    let mut c = env.spawn("consume again --verify");
    assert!(c.finish().success());
    assert_full_epoch(&c.events("epoch_end")[0], 0, 99);
    assert!(second.finish().success());
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// `status` shows the producer and each consumer with its pid.
#[test]
fn status_shows_live_figures_per_consumer() {
    let env = Env::new();
    let mut producer = env.producer(
        "stat",
        "--samples 1000 --batch-size 10 --epochs 1 --window 4",
    );
    let mut c = env.spawn("consume stat --each --delay-ms 20 --batch-size 5");
    c.expect_where("batch", |v| v["index"] == 3);
    let out = env.cmd("status --json").output().unwrap();
    assert!(out.status.success());
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &reports[0];
    assert_eq!(r["name"], "stat");
    assert_eq!(r["pid"], producer.pid());
    assert!(r["published"].as_u64().unwrap() >= 2);
    let cons = &r["consumers"][0];
    assert_eq!(cons["pid"], c.pid());
    assert_eq!(cons["batch_size"], 5);
    assert_eq!(cons["state"], "following");
    // The stream's description: the first batch's arrays, batch size, epoch size.
    assert!(r["stream"]["first_batch"]["leaves"].as_array().is_some());
    assert_eq!(r["batch_size"], 10);
    assert_eq!(r["samples_per_epoch"], 1000);
    let text = env.cmd("status stat").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert_says(&text, "delivered");
    assert_says(&text, "stream: ");
    assert_says(&text, "batch size 10, 1000 samples per epoch");
    c.kill9();
    producer.kill9();
}

/// Mistakes a user can make get a message that says what to do.
#[test]
fn user_errors_name_the_problem_and_the_fix() {
    let env = Env::new();
    let out = env.cmd("consume nosuch").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_says(&text, "no producer named");
    assert_says(&text, "nosuch.sock");

    let out = env.cmd("consume bad/name").output().unwrap();
    assert_says(
        &String::from_utf8_lossy(&out.stdout),
        "invalid producer name",
    );

    let out = env.cmd("consume x --batch-size 0").output().unwrap();
    assert_says(
        &String::from_utf8_lossy(&out.stdout),
        "batch_size must be at least 1",
    );

    // An arena larger than this machine's memory: refused before serving.
    let err = env
        .cmd("serve --name huge --synthetic --slot-size 1000000000000 --window 8")
        .fail();
    assert_says(&err, "cannot reserve");
    assert_says(&err, "--window");

    // A batch larger than a fixed slot names both sizes and the option.
    let mut p =
        env.spawn("serve --name small --synthetic --slot-size 4096 --batch-size 64 --no-wait");
    assert_eq!(p.finish().code(), Some(1));
    let err = p.stderr_text();
    assert_says(&err, "does not fit in a slot of 4096 bytes");
    assert_says(&err, "--slot-size");

    let out = env.cmd("serve --name x").output().unwrap();
    assert_says(&String::from_utf8_lossy(&out.stderr), "--data PATH");
}

/// SIGINT stops the producer cleanly: consumers see a clean end.
#[test]
fn interrupted_producer_ends_cleanly_for_consumers() {
    let env = Env::new();
    let args = format!("{UNTIL_KILLED} --window 2");
    let mut producer = env.producer("int", &args);
    let mut c = env.spawn("consume int --each --delay-ms 5");
    c.expect_where("batch", |v| v["index"] == 3);
    producer.signal(libc::SIGINT);
    c.expect_where("finished", |v| v["reason"] == "Interrupted");
    assert!(c.finish().success());
    assert!(producer.finish().success());
    assert!(env.leftovers().is_empty());
}

fn shm_listing() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("batchcast"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
