//! The main job and the image path, end to end, at a tiny size.

mod common;
#[path = "../../batchcast-pipeline/tests/integration/forge.rs"]
mod forge;

use batchcast_serve::TooFewConsumers;
use common::{
    assert_full_epoch, assert_says, ends_after, jpeg_dataset, serve_data, Env, Fail, Succeed,
};
use forge::set_jpeg_size;

fn tiny_dataset(dir: &std::path::Path, classes: usize, per_class: usize) -> std::path::PathBuf {
    jpeg_dataset(&dir.join("data"), classes, per_class, (64, 96))
}

/// `batchcast demo` with two trainers of 1 ms steps on `images` generated
/// images of 32 px in batches of `batch_size`, the dataset cached in
/// `cache`, the runs recorded in `store`.
fn demo(
    env: &Env,
    images: &str,
    batch_size: &str,
    cache: &std::path::Path,
    store: &std::path::Path,
) -> std::process::Command {
    let mut cmd = env.cmd(&format!(
        "demo --trainers 2 --images {images} --batch-size {batch_size} --image-size 32 --step-ms 1"
    ));
    cmd.arg("--cache-dir").arg(cache).arg("--store").arg(store);
    cmd
}

/// `batchcast demo --json` runs both modes on a dataset it generates and
/// reports every figure; the arithmetic of the speedup is right.
#[test]
fn demo_runs_both_modes_and_reports_every_figure() {
    let env = Env::new();
    let cache_root = tempfile::tempdir().unwrap();
    let cache = cache_root.path().join("cache");
    let store = cache_root
        .path()
        .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"runs-\xff.db"));
    let out = demo(&env, "40", "8", &cache, &store)
        .arg("--json")
        .succeed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // A store path that is not UTF-8 is reported lossily.
    assert_eq!(v["store"], store.to_string_lossy().as_ref(), "{v}");
    for mode in ["independent", "shared"] {
        let run = &v[mode];
        assert_eq!(run["trainers"].as_array().unwrap().len(), 2, "{v}");
        for t in run["trainers"].as_array().unwrap() {
            assert_eq!(t["samples"], 40);
            let share = t["data_wait_share"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&share));
        }
        assert!(run["aggregate_samples_per_sec"].as_f64().unwrap() > 0.0);
        assert!(run["cpu_secs_per_1000_samples"].as_f64().unwrap() > 0.0);
    }
    let ratio = v["shared"]["aggregate_samples_per_sec"].as_f64().unwrap()
        / v["independent"]["aggregate_samples_per_sec"]
            .as_f64()
            .unwrap();
    assert!((v["speedup"].as_f64().unwrap() - ratio).abs() < 1e-9);
    // The dataset was written once into the cache and is reused.
    assert!(cache.join("demo-jpeg-40").is_dir());
    assert!(env.leftovers().is_empty());
}

/// `batchcast demo` is a plan the runner runs: its two workloads land in
/// the run store it names on its last line, every run FINISHED with the
/// trainers' own figures, and `batchcast runs` reads them back.
#[test]
fn demo_records_both_workloads_in_the_store_it_names() {
    use batchcast_runs::{keys, RunFilter, RunStatus, Store};
    let env = Env::new();
    let files = tempfile::tempdir().unwrap();
    let cache = files.path().join("cache");
    let store = files.path().join("demo runs.db");
    let out = demo(&env, "60", "16", &cache, &store).succeed();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "recorded in {}; open it with: batchcast ui --store '{}'",
            store.display(),
            store.display()
        ),
        "{text}"
    );
    let db = Store::open_read_only(&store).unwrap();
    let runs = db.runs(&RunFilter::default()).unwrap();
    for workload in ["independent", "shared"] {
        let trainers: Vec<_> = runs
            .iter()
            .filter(|r| r.workload == workload && r.run.name != keys::DATA_RUN)
            .collect();
        assert_eq!(trainers.len(), 2, "{runs:?}");
        for r in trainers {
            assert_eq!(r.run.status, RunStatus::Finished, "{r:?}");
            let samples = db.last_metric(r.run.id, &keys::figure("samples")).unwrap();
            assert_eq!(samples, Some(60.0), "{r:?}");
            for figure in ["seconds", "wait_secs"] {
                let v = db.last_metric(r.run.id, &keys::figure(figure)).unwrap();
                assert!(v.is_some_and(|v| v >= 0.0), "{figure} of {r:?}");
            }
        }
    }
    let data: Vec<_> = runs
        .iter()
        .filter(|r| r.run.name == keys::DATA_RUN)
        .collect();
    assert_eq!(data.len(), 1, "{runs:?}");
    assert_eq!(data[0].workload, "shared");
    assert_eq!(data[0].run.status, RunStatus::Finished, "{:?}", data[0]);
    let store_arg = store.to_str().unwrap();
    let list = env.cmd(&["runs", "list", "--store", store_arg]).succeed();
    let list = String::from_utf8_lossy(&list.stdout);
    assert_eq!(list.matches("FINISHED").count(), 5, "{list}");
    let compare = env
        .cmd(&["runs", "compare", "--json", "--store", store_arg])
        .succeed();
    let v: serde_json::Value = serde_json::from_slice(&compare.stdout).unwrap();
    let text = v.to_string();
    assert!(
        text.contains("independent") && text.contains("shared"),
        "{v}"
    );
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// Ctrl-C stops the demo: its trainers are stopped (none left alive), their
/// runs recorded KILLED, and the demo says so and fails.
#[test]
fn an_interrupted_demo_stops_its_trainers_and_records_them_killed() {
    use batchcast_runs::{RunFilter, RunStatus, Store};
    let env = Env::new();
    let files = tempfile::tempdir().unwrap();
    let store = files.path().join("runs.db");
    let mut args: Vec<&str> = "demo --synthetic --samples 100000 --step-ms 50 --trainers 2"
        .split_whitespace()
        .collect();
    args.extend(["--store", store.to_str().unwrap()]);
    let mut demo = env.spawn(&args);
    // No signal says the trainers started: the store does, once it holds
    // their pids.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let pids = loop {
        let running: Vec<i64> = Store::open_read_only(&store)
            .and_then(|db| db.runs(&RunFilter::default()))
            .map(|runs| runs.iter().filter_map(|r| r.run.pid).collect())
            .unwrap_or_default();
        if running.len() == 2 {
            break running;
        }
        assert!(std::time::Instant::now() < deadline, "no trainers started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    demo.signal(libc::SIGINT);
    let status = demo.finish();
    assert_eq!(status.code(), Some(1), "{}", demo.stderr_text());
    assert_says(&demo.stderr_text(), "the demo was stopped");
    for pid in pids {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        assert!(!alive, "trainer {pid} left running");
    }
    let db = Store::open_read_only(&store).unwrap();
    let runs = db.runs(&RunFilter::default()).unwrap();
    assert_eq!(runs.len(), 2, "the shared workload never started: {runs:?}");
    for r in runs {
        assert_eq!(r.run.status, RunStatus::Killed, "{r:?}");
    }
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// `batchcast serve --data` serves an ImageFolder: every image once per
/// epoch, with exact len, to consumers of different batch sizes.
/// A demo whose trainers fail says which run failed, shows the end of its
/// stderr (the cause) and how to see all of its output.
#[test]
fn a_failed_demo_shows_the_trainers_error() {
    let env = Env::new();
    let dir = tempfile::tempdir().unwrap();
    let err = env
        .cmd("demo --trainers 1 --images 10 --step-ms=-1")
        .arg("--cache-dir")
        .arg(dir.path())
        .fail();
    assert_says(&err, "the independent demo's trainer-1 ended FAILED");
    assert_says(
        &err,
        "; its stderr:\n    error: --step-ms -1 is no step time",
    );
    assert_says(&err, "batchcast runs show ");
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

#[test]
fn serve_data_delivers_every_image_once_per_epoch() {
    let env = Env::new();
    let data = tiny_dataset(env.path(), 3, 7); // 21 images
    let data = data.to_str().unwrap();
    let mut args = serve_data("img", data, "2");
    args.extend(["--epochs", "2", "--workers", "2"]);
    let (mut producer, _) = env.listening(&args);
    let mut consumers: Vec<_> = ["5", "4"]
        .iter()
        .map(|bs| env.spawn(&format!("consume img --batch-size {bs}")))
        .collect();
    for c in &mut consumers {
        let ends = ends_after(c, 2);
        for end in &ends {
            assert_eq!(end["samples"], 21, "{end}");
            assert_eq!(end["batches"], end["expected_batches"], "{end}");
            // Labels are class indices 0..3 (the "ids" the consumer reads).
            assert!(end["first_id"].as_i64().unwrap() < 3);
        }
    }
    assert!(producer.finish().success());
}

/// A corrupt JPEG is skipped with a warning naming it; the epoch is one
/// sample shorter and nothing stops. A missing dataset is a clear error.
#[test]
fn serve_data_skips_a_corrupt_file_and_names_it() {
    let env = Env::new();
    let data = tiny_dataset(env.path(), 2, 5); // 10 images
    let victim = std::fs::read_dir(data.join("class_001"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&victim, b"\xff\xd8\xff garbage, not a JPEG").unwrap();
    let data_s = data.to_str().unwrap();
    let mut producer = env.spawn(&serve_data("bad", data_s, "1"));
    producer.expect("listening");
    let mut c = env.spawn("consume bad");
    assert!(c.finish().success());
    assert_eq!(c.events("epoch_end")[0]["samples"], 9);
    assert!(producer.finish().success());
    let err = producer.stderr_text();
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "the warning names the file: {err}");

    let err = env
        .cmd("serve --name x --data /nonexistent/imagenet")
        .fail();
    assert_says(&err, "/nonexistent/imagenet");
}

/// What a finished `serve` process cost, from wait4(2).
struct Cost {
    stderr: String,
    max_rss_mib: f64,
    cpu_secs: f64,
}

/// Runs `serve ARGS` (which must wait for one consumer) with one
/// `consume`, checks the consumer saw `samples` samples, and measures the
/// producer's peak memory and CPU time.
// The child is reaped by wait4 (for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn serve_and_measure(env: &Env, args: &[&str], samples: u64) -> Cost {
    use std::io::{BufRead, BufReader, Read};
    let mut child = env.cmd(args).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("\"listening\"") {
            break;
        }
    }
    let mut c = env.spawn(&["consume", args[2]]);
    assert!(c.finish().success());
    assert_eq!(c.events("epoch_end")[0]["samples"], samples);
    lines.for_each(drop); // to EOF: the producer is exiting
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes it and the status.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with valid out-pointers. `child` is
    // not waited on again (std's Child does nothing on drop).
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Cost {
        stderr: err.join().unwrap(),
        max_rss_mib: usage.ru_maxrss as f64 / 1024.0,
        cpu_secs: secs(usage.ru_utime) + secs(usage.ru_stime),
    }
}

/// Issue 10, fault 6: "Lets a 655-byte JPEG cost 1.3 GiB". A file whose
/// header declares 30000x30000 pixels, with the scan data of a tiny image,
/// in a dataset served by `serve --data`: it is skipped from its header, at
/// once, with a message naming it, the size and the option; the producer's
/// peak memory stays that of serving 16x16 crops (it was 1,292 MiB, and
/// 5-9 s before the skip). Raising `--max-pixels` past it still refuses it
/// cheaply: the file is far too small for the size it declares.
#[test]
fn a_655_byte_jpeg_does_not_cost_1_3_gib() {
    let env = Env::new();
    let data = tiny_dataset(env.path(), 2, 4); // 8 images
    let class = data.join("class_000");
    let donor = std::fs::read_dir(&class).unwrap().next().unwrap().unwrap();
    let mut bomb = std::fs::read(donor.path()).unwrap();
    set_jpeg_size(&mut bomb, 30000, 30000);
    std::fs::write(class.join("bomb.jpg"), &bomb).unwrap();
    let data = data.to_str().unwrap();
    for (max_pixels, why) in [("89478485", "--max-pixels"), ("1000000000", "truncated")] {
        let mut args = serve_data("bomb", data, "1");
        args.extend(["--workers", "2", "--max-pixels", max_pixels]);
        let cost = serve_and_measure(&env, &args, 8);
        let err = &cost.stderr;
        assert!(err.contains("bomb.jpg"), "names the file: {err}");
        assert!(err.contains("30000x30000"), "names the size: {err}");
        assert!(err.contains(why), "says what to do: {err}");
        assert!(
            cost.max_rss_mib < 200.0,
            "peak memory {:.0} MiB for a {}-byte file",
            cost.max_rss_mib,
            bomb.len()
        );
        // A work bound, not a speed figure: decoding the declared size took
        // 2.6 CPU s in a release build, 35 in the debug build tests use.
        assert!(cost.cpu_secs < 5.0, "{:.1} CPU s", cost.cpu_secs);
    }
}

/// `batchcast bench --json` measures every (size, consumers) cell with real
/// consumer processes and reports the growth ratios it prints.
#[test]
fn bench_reports_every_cell_and_the_ratios() {
    let env = Env::new();
    let out = env
        .cmd("bench --batches 30 --sizes-mb 1 --consumers 1,2 --repeat 1 --json")
        .succeed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{v}");
    for c in cells {
        assert!(c["batches_per_sec"].as_f64().unwrap() > 0.0, "{v}");
        assert!(c["producer_cpu_written_us"].as_f64().unwrap() > 0.0, "{v}");
    }
    let growth = v["producer_cpu_growth_written_by_size"].as_array().unwrap();
    assert_eq!(growth.len(), 1, "{v}");
    // Nothing is left behind in the socket directory.
    assert_eq!(env.leftovers(), Vec::<std::path::PathBuf>::new());
}

/// `batchcast bench --copy-on-write` measures consumers that map the arena
/// private and writable, as Python consumers do by default.
#[test]
fn bench_measures_copy_on_write_consumers() {
    let env = Env::new();
    let args = "bench --batches 30 --sizes-mb 1 --consumers 1 --repeat 1 --json --copy-on-write";
    let out = env.cmd(&args.split(' ').collect::<Vec<_>>()).succeed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["copy_on_write"], true, "{v}");
    assert!(
        v["cells"][0]["batches_per_sec"].as_f64().unwrap() > 0.0,
        "{v}"
    );
}

/// Runs `batchcast ARGS` with a stdout whose reader is already gone (as in
/// `batchcast status | true`); returns its exit code and stderr.
fn run_with_closed_stdout(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    drop(reader); // closed before the command can write a byte
    let out = env
        .cmd(args)
        .stdout(std::process::Stdio::from(writer))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Regression: `batchcast status | true` panicked ("failed printing to
/// stdout: Broken pipe", exit 101). A closed stdout ends a command quietly
/// with 0, text or JSON.
#[test]
fn a_closed_stdout_ends_status_quietly() {
    let env = Env::new();
    for args in [&["status"][..], &["status", "--json"]] {
        assert_quiet_with_closed_stdout(&env, args);
    }
}

/// Runs `args` with stdout closed; it must exit 0 with no panic and no
/// "Broken pipe" in its stderr.
fn assert_quiet_with_closed_stdout(env: &Env, args: &[&str]) {
    let (code, stderr) = run_with_closed_stdout(env, args);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{args:?}: {stderr}"
    );
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
}

/// A consumer whose stdout is closed (`batchcast consume NAME | true`)
/// stops quietly at its first line, attached to a live producer.
#[test]
fn a_closed_stdout_ends_consume_quietly() {
    let env = Env::new();
    let _producer = env.producer("piped", &[]);
    assert_quiet_with_closed_stdout(&env, &["consume", "piped"]);
}

/// `serve --epochs 0` serves for as long as a consumer reads, as Python's
/// `run()` without `epochs=` does: a consumer looping 3 epochs gets all 3
/// whole (the default `--epochs 1` ends its second loop with "finished"),
/// and once it has left the producer finishes after --idle-timeout.
#[test]
fn serve_epochs_0_serves_until_no_consumer_is_left() {
    let env = Env::new();
    // The consumer waits for the producer, so that it attaches well within
    // the idle timeout however slow the machine is to start a process.
    let mut c = env.spawn("consume untilidle --verify --epochs 3 --connect-timeout 60");
    let mut p = env.producer(
        "untilidle",
        "--epochs 0 --idle-timeout 3 --samples 64 --batch-size 16",
    );
    let ends = ends_after(&mut c, 3);
    for (epoch, end) in ends.iter().enumerate() {
        assert_eq!(end["epoch"], epoch as u64, "{end}");
        assert_full_epoch(end, 0, 63);
    }
    let finished = p.expect("finished");
    assert_eq!(finished["summary"]["idle"], true, "{finished}");
    assert!(
        finished["summary"]["epochs"].as_u64().unwrap() >= 3,
        "{finished}"
    );
    assert!(p.finish().success(), "{}", p.stderr_text());
}

/// Too few consumers before the first epoch: `batchcast serve` prints the
/// one message of the wait (`TooFewConsumers`, which Python's `Producer`
/// raises too), with the figures of the wait: one of the workload's two
/// trainers (BATCHCAST_CONSUMERS) attached; none of `--consumers 2`.
#[test]
fn serve_with_too_few_consumers_prints_the_one_message_with_its_figures() {
    let env = Env::new();
    // The trainer that did start waits for the producer, so that it
    // attaches as soon as serve listens; serve's wait for the trainers
    // starts then too, so the idle timeout is the time a loaded machine
    // gets to start a consumer process's connection: 10 s, not a few.
    let mut trainer = env.spawn("consume few --connect-timeout 60");
    let mut serve = env.cmd("serve --name few --synthetic --json --idle-timeout 10");
    serve.env("BATCHCAST_CONSUMERS", "2");
    let mut serve = common::Proc::start(serve);
    assert_eq!(serve.finish().code(), Some(1));
    // The trainer is told why the stream ended.
    assert!(!trainer.finish().success());
    let runner = TooFewConsumers {
        attached: 1,
        wanted: 2,
        secs: 10.0,
        from_runner: true,
    };
    let stderr = serve.stderr_text();
    assert_says(&stderr, &format!("error: {runner}\n"));

    let asked = TooFewConsumers {
        attached: 0,
        wanted: 2,
        secs: 0.3,
        from_runner: false,
    };
    let stderr = env
        .cmd("serve --name two --synthetic --consumers 2")
        .args(["--idle-timeout", "0.3"])
        .fail();
    assert_says(&stderr, &format!("error: {asked}\n"));
}

/// `batchcast stalls` run with a Python that lacks batchcast says which
/// Python and how to fix it, instead of the child's bare
/// `ModuleNotFoundError`, and starts nothing.
#[test]
fn stalls_names_a_python_without_batchcast_and_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    // A Python that cannot see any installed package (-I -S).
    let py = env.path().join("python-bare");
    std::fs::write(&py, "#!/bin/sh\nexec python3 -I -S \"$@\"\n").unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let marker = env.path().join("ran");
    let script = format!("open({:?}, 'w').close()", marker.to_str().unwrap());
    let out = env
        .cmd(&["stalls", "--", py.to_str().unwrap(), "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for needle in [
        "python-bare",
        "cannot import",
        "pip install batchcast",
        "BATCHCAST_PYTHON",
    ] {
        assert_says(&stderr, needle);
    }
    assert!(!stderr.contains("Traceback"), "{stderr}");
    assert!(!marker.exists(), "the training script ran");
}
