//! A stuck consumer (SIGSTOP stands for a debugger, a checkpoint save or a
//! full stdout pipe) and the others: within the lag budget they go on;
//! past it, the producer waits or evicts, as its policy says. Real
//! processes throughout.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{assert_every_epoch_full_of, assert_full_epoch, assert_says, Env, Proc};

/// How long the victim stays stopped: the length of the pause the test is
/// about, not a wait for anything.
const PAUSE: Duration = Duration::from_secs(3);
/// A budget of 8 batches, past which a laggard is evicted after 0.5 s.
const EVICT: &str = "--max-lag 8batches --lag-policy evict --stall-timeout 0.5";

/// Producer `name` (started with `extra`) of 10 epochs of 100 batches, a
/// consumer to stop (`consume NAME --each --verify --delay-ms 2 VICTIM`) and
/// two others that take 10 ms per batch, so they are still running well
/// after the pause; and their environment.
fn start(name: &str, extra: &str, victim: &str) -> (Env, Proc, Proc, Vec<Proc>) {
    let env = Env::new();
    let args =
        format!("--samples 1000 --batch-size 10 --epochs 10 --window 4 --consumers 3 {extra}");
    let producer = env.producer(name, &args);
    let victim = env.spawn(&format!(
        "consume {name} --each --verify --delay-ms 2 {victim}"
    ));
    let others = (0..2)
        .map(|_| env.spawn(&format!("consume {name} --each --verify --delay-ms 10")))
        .collect();
    (env, producer, victim, others)
}

/// Stops `victim` once it has read a few batches; returns when it stopped
/// and when it was continued.
fn pause(victim: &mut Proc, during: impl FnOnce()) -> (Instant, Instant) {
    victim.expect_where("batch", |v| v["index"] == 5);
    victim.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    sleep(PAUSE);
    during();
    let resumed = Instant::now();
    victim.signal(libc::SIGCONT);
    (stopped, resumed)
}

/// The longest time between two batches `p` printed within `from..to`
/// (the ends count as boundaries).
fn longest_gap(p: &mut Proc, from: Instant, to: Instant) -> Duration {
    p.pump();
    let mut times: Vec<Instant> = p
        .seen
        .iter()
        .filter(|(t, v)| v["event"] == "batch" && *t > from && *t < to)
        .map(|(t, _)| *t)
        .collect();
    times.insert(0, from);
    times.push(to);
    times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

fn assert_every_epoch_full(p: &mut Proc, epochs: usize) {
    assert_every_epoch_full_of(p, epochs, 1000);
}

/// Producer `name` (started with `extra`), a consumer stopped for
/// [`PAUSE`] and two others: each other's longest gap between batches
/// while it was stopped, once all three have read every epoch, exact.
fn gaps_while_one_pauses(name: &str, extra: &str) -> Vec<Duration> {
    let (_env, mut producer, mut victim, mut others) = start(name, extra, "");
    let (stopped, resumed) = pause(&mut victim, || {});
    let gaps = others
        .iter_mut()
        .map(|o| longest_gap(o, stopped, resumed))
        .collect();
    assert_every_epoch_full(&mut victim, 10);
    for o in &mut others {
        assert_every_epoch_full(o, 10);
    }
    assert!(producer.finish().success());
    gaps
}

/// Issue 10, fault 4: a consumer paused for 3 s while within the lag budget
/// (the default) costs the others nothing, and still gets every sample
/// exactly once when it resumes.
#[test]
fn fault4_sigstopped_consumer_does_not_stall_others() {
    for gap in gaps_while_one_pauses("stuck", "") {
        assert!(
            gap < Duration::from_secs(1),
            "a running consumer stalled {gap:?}"
        );
    }
}

/// Past the budget, `wait` holds the others back while the laggard is
/// stopped, and everyone resumes, exact, when it continues.
#[test]
fn fault4_past_the_budget_wait_holds_the_others_then_resumes() {
    for gap in gaps_while_one_pauses("wait", "--max-lag 8batches") {
        assert!(
            gap > PAUSE / 2,
            "the others were not held back: longest gap {gap:?}"
        );
    }
}

/// Past the budget, `evict` lets the others go on after the stall timeout;
/// `batchcast status` shows the eviction, and the laggard's next read
/// fails with a message that names the budget and the ways out.
#[test]
fn fault4_past_the_budget_evict_frees_the_others_and_the_laggard_fell_behind() {
    let (env, mut producer, mut victim, mut others) = start("evict", EVICT, "");
    let mut status = None;
    let (stopped, resumed) = pause(&mut victim, || {
        let out = env.cmd("status evict --json").output().unwrap();
        status = Some(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap());
    });
    for o in &mut others {
        let gap = longest_gap(o, stopped, resumed);
        assert!(gap < Duration::from_millis(1500), "others stalled {gap:?}");
    }
    let status = status.unwrap();
    let report = &status[0];
    assert_eq!(report["lag_slots"], 8, "{report}");
    assert_eq!(report["lag_policy"], "evict", "{report}");
    assert_eq!(report["evictions"], 1, "{report}");
    let consumers = report["consumers"].as_array().unwrap();
    let evicted: Vec<_> = consumers
        .iter()
        .filter(|c| c["state"] == "evicted")
        .collect();
    assert_eq!(evicted.len(), 1, "{report}");
    assert_eq!(evicted[0]["pid"], victim.pid(), "{report}");
    let err = victim.expect("error");
    assert_eq!(err["kind"], "fell_behind", "{err}");
    let msg = err["message"].as_str().unwrap();
    for needle in ["behind", "8 batches", "max_lag", "wait", "rejoin"] {
        assert_says(msg, needle);
    }
    assert_eq!(victim.finish().code(), Some(5));
    for o in &mut others {
        assert_every_epoch_full(o, 10);
    }
    assert!(producer.finish().success());
}

/// With `on_evict=rejoin` the evicted laggard's epoch ends short, with a
/// warning, and it then reads whole, exact epochs from the next one on.
#[test]
fn fault4_evicted_consumer_that_asked_to_rejoin_reads_exact_epochs_after() {
    let (_env, mut producer, mut victim, mut others) = start("rejoin", EVICT, "--on-evict rejoin");
    pause(&mut victim, || {});
    assert!(victim.finish().success());
    // Every epoch it was evicted from ends short (while stopped it may be
    // evicted again from each epoch it rejoins); once it runs again it
    // catches up and reads whole epochs to the end.
    let ends = victim.events("epoch_end");
    let short = ends
        .iter()
        .take_while(|e| e["batches"].as_u64() < e["expected_batches"].as_u64())
        .count();
    assert!(short >= 1, "no epoch ended short: {ends:?}");
    assert_eq!(ends[0]["epoch"], 0, "{ends:?}");
    let rest = &ends[short..];
    assert!(
        !rest.is_empty(),
        "no whole epoch after the rejoin: {ends:?}"
    );
    let first = rest[0]["epoch"].as_u64().unwrap();
    for (k, end) in rest.iter().enumerate() {
        assert_eq!(end["epoch"], first + k as u64, "{end}");
        assert_full_epoch(end, 0, 999);
    }
    assert_eq!(rest.last().unwrap()["epoch"], 9);
    assert_says(&victim.stderr_text(), "rejoins at the next epoch");
    for o in &mut others {
        assert_every_epoch_full(o, 10);
    }
    assert!(producer.finish().success());
}

/// Batches per epoch and the window of the pacing tests below: 200 samples
/// in batches of 10, a window of 4.
const PACED_EPOCH: u64 = 20;
const PACED_WINDOW: u64 = 4;

/// A producer serving epochs for as long as anyone reads (its loader far
/// faster than any trainer), for `trainers` trainers.
fn paced_producer(env: &Env, name: &str, trainers: usize, max_lag: Option<&str>) -> Proc {
    let mut args = format!(
        "--samples 200 --batch-size 10 --epochs 0 --idle-timeout 0.5 --window 4 --consumers {trainers}"
    );
    if let Some(budget) = max_lag {
        args.push_str(&format!(" --max-lag {budget}"));
    }
    env.producer(name, &args)
}

/// Trainers stepping every `delays_ms` read 2 epochs each and leave: the
/// producer serves at most a window beyond what they took (its third epoch
/// begun, never a fourth), and each reads its 2 epochs whole. A consumer
/// that sees its epoch end while the next one has begun takes that epoch's
/// first batch (it reads lazily, one batch ahead of the loop): that batch is
/// the one beyond 2 epochs that the fastest may have begun to read.
fn two_epochs_each(name: &str, delays_ms: &[u64], max_lag: Option<&str>) {
    let env = Env::new();
    let mut producer = paced_producer(&env, name, delays_ms.len(), max_lag);
    let mut trainers: Vec<Proc> = delays_ms
        .iter()
        .map(|ms| {
            env.spawn(&format!(
                "consume {name} --epochs 2 --verify --delay-ms {ms}"
            ))
        })
        .collect();
    for t in &mut trainers {
        assert_every_epoch_full_of(t, 2, 200);
    }
    // Nobody is attached now: the producer's idle timeout ends it.
    let finished = producer.expect("finished");
    assert!(producer.finish().success(), "{}", producer.stderr_text());
    let served = finished["summary"]["batches"].as_u64().unwrap();
    assert!(
        served <= 2 * PACED_EPOCH + 1 + PACED_WINDOW,
        "{served} batches served ({:.1} epochs) for trainers that read 2 epochs of \
         {PACED_EPOCH}: more than a window of {PACED_WINDOW} ahead of the fastest",
        served as f64 / PACED_EPOCH as f64
    );
}

/// Issue 25: two trainers of slightly different speed (0.10 and 0.15 s a
/// step) do not let a fast loader fill the default lag budget (a gigabyte)
/// with dozens of epochs nobody reads.
#[test]
fn issue25_two_trainers_of_two_speeds_are_served_at_most_a_window_past_what_they_read() {
    two_epochs_each("paced2", &[100, 150], None);
}

/// Issue 25: the same with four trainers of four speeds and a budget of
/// 4 GiB.
#[test]
fn issue25_four_trainers_of_four_speeds_are_served_at_most_a_window_past_what_they_read() {
    two_epochs_each("paced4", &[100, 115, 130, 150], Some("4GiB"));
}
