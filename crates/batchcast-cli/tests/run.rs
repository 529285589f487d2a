//! `batchcast run` end to end, with real processes: plans with collocated
//! workloads (own loaders, then a shared producer), failures, a runner
//! killed with SIGKILL and one stopped with Ctrl-C.

use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

mod common;

use batchcast_proc::procfs::alive;
use batchcast_runs::{keys, LogStream, RunFilter, RunStatus, Store};
use common::{assert_says, Fail, Succeed};

const BIN: &str = env!("CARGO_BIN_EXE_batchcast");

/// A job: says hello, counts its starts in `starts.<name>`, waits for
/// `go` when asked, reads the shared producer when there is one, and exits
/// with the code asked.
const JOB: &str = r#"#!/bin/sh
name="$1"; code="${2:-0}"; wait_go="${3:-}"
echo "hello from $name BATCHCAST_NAME=${BATCHCAST_NAME:-none}"
echo "$$" >> "starts.$name"
if [ -n "$wait_go" ]; then while [ ! -e go ]; do sleep 0.02; done; fi
if [ -n "${BATCHCAST_NAME:-}" ]; then
  "$BATCHCAST_TEST_BIN" consume "$BATCHCAST_NAME" --delay-ms 5 || exit 9
fi
exit "$code"
"#;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("job.sh");
        std::fs::write(&job, JOB).unwrap();
        std::fs::set_permissions(&job, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        Fixture { dir }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn plan(&self, rows: &[&str]) -> PathBuf {
        let mut text = String::from("Experiment,Workload,Name,Data,File,Params\n");
        for r in rows {
            text.push_str(r);
            text.push('\n');
        }
        let p = self.path("plan.csv");
        std::fs::write(&p, text).unwrap();
        p
    }
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg("--store")
            .arg(self.path("runs.sqlite"))
            .args(["--interval", "0.1", "--grace", "2"])
            .args(args)
            .env("BATCHCAST_TEST_BIN", BIN)
            .env("BATCHCAST_DIR", self.path("sockets"))
            .current_dir(self.dir.path());
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
    /// Runs `batchcast run ARGS` and insists that it succeeded.
    fn succeed(&self, args: &[&str]) -> Output {
        self.command(args).succeed()
    }
    /// Runs `batchcast run ARGS`, insists that it failed with status 1, and
    /// returns its stderr.
    fn fail(&self, args: &[&str]) -> String {
        self.command(args).fail()
    }
    fn store(&self) -> Store {
        Store::open_read_only(self.path("runs.sqlite")).unwrap()
    }
    fn status(&self, workload: &str, name: &str) -> RunStatus {
        let runs = self
            .store()
            .runs(&RunFilter {
                workload: Some(workload.into()),
                ..Default::default()
            })
            .unwrap();
        runs.into_iter()
            .find(|r| r.run.name == name)
            .map(|r| r.run.status)
            .unwrap()
    }
    fn starts(&self, name: &str) -> usize {
        std::fs::read_to_string(self.path(&format!("starts.{name}")))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

/// Waits until `cond` holds, failing the test after 60 s.
fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_within(what, Duration::from_secs(60), cond);
}

/// Waits until `cond` holds, failing the test after `within`.
fn wait_within(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn independent_then_shared_workloads_all_finish_and_are_recorded() {
    let f = Fixture::new();
    let serve = "batchcast serve --synthetic --samples 3000 --work-us 200 --consumers 2";
    let plan = f.plan(&[
        "e,own,a,,job.sh,a",
        "e,own,b,,job.sh,b",
        &format!("e,shared,a,{serve},job.sh,sa"),
        &format!("e,shared,b,{serve},job.sh,sb"),
    ]);
    f.succeed(&[plan.to_str().unwrap()]);
    let store = f.store();
    let rows = store.runs(&RunFilter::default()).unwrap();
    assert_eq!(rows.len(), 5, "four jobs and the shared producer");
    for r in &rows {
        assert_eq!(
            r.run.status,
            RunStatus::Finished,
            "{}/{}: {:?}",
            r.workload,
            r.run.name,
            r.run.message
        );
        let (stdout, _) = store.log(r.run.id, LogStream::Stdout, None).unwrap();
        if r.run.name != keys::DATA_RUN {
            let text = String::from_utf8_lossy(&stdout);
            assert_says(&text, "hello from");
            assert_eq!(
                text.contains("BATCHCAST_NAME=none"),
                r.workload == "own",
                "{text}"
            );
            // The process listener sampled it.
            assert!(!store
                .metric(r.run.id, keys::PROC_CPU_SECONDS, None, 10)
                .unwrap()
                .is_empty());
        }
        // Without NVML, the GPU listener says so once.
        let events = store.events(r.run.id).unwrap();
        assert!(events.len() <= 1, "{events:?}");
    }
    // The shared workload's consumers were seen by the batchcast listener.
    let shared: Vec<_> = rows
        .iter()
        .filter(|r| r.workload == "shared" && r.run.name != keys::DATA_RUN)
        .collect();
    assert!(
        shared.iter().any(|r| !store
            .metric(r.run.id, keys::BATCHCAST_SAMPLES, None, 10)
            .unwrap()
            .is_empty()),
        "batchcast metrics for the shared workload"
    );
    // Status was written back into the plan.
    let text = std::fs::read_to_string(&plan).unwrap();
    assert_eq!(text.matches("FINISHED").count(), 4, "{text}");
    // `runs list` and `runs show` read it back.
    let list = Command::new(BIN)
        .args(["runs", "list", "--store"])
        .arg(f.path("runs.sqlite"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert_eq!(text.matches("FINISHED").count(), 5, "{text}");
    let id = rows
        .iter()
        .find(|r| r.workload == "shared" && r.run.name == "a")
        .unwrap()
        .run
        .id;
    let show = Command::new(BIN)
        .args(["runs", "show", &id.to_string(), "--store"])
        .arg(f.path("runs.sqlite"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert_says(&text, "e/shared/a");
    assert_says(&text, "hello from sa");
    assert_says(&text, keys::BATCHCAST_SAMPLES);
    // A second run of the same plan runs nothing.
    f.succeed(&[plan.to_str().unwrap()]);
    assert_eq!((f.starts("a"), f.starts("sa")), (1, 1));
}

#[test]
fn a_failed_job_is_rerun_only_when_asked() {
    let f = Fixture::new();
    let plan = f.plan(&["e,w,ok,,job.sh,ok", "e,w,bad,,job.sh,bad 3"]);
    f.fail(&[plan.to_str().unwrap()]);
    assert_eq!(f.status("w", "bad"), RunStatus::Failed);
    assert_eq!(f.status("w", "ok"), RunStatus::Finished);
    let bad = f
        .store()
        .runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .find(|r| r.run.name == "bad")
        .unwrap();
    assert_eq!(bad.run.exit_code, Some(3));
    // The plan's Status column says FAILED now; clear it so the store decides.
    f.plan(&["e,w,ok,,job.sh,ok", "e,w,bad,,job.sh,bad 3"]);
    f.run(&[plan.to_str().unwrap()]);
    assert_eq!(
        (f.starts("ok"), f.starts("bad")),
        (1, 1),
        "FAILED is not rerun by default"
    );
    f.run(&[plan.to_str().unwrap(), "--rerun-failed"]);
    assert_eq!(
        (f.starts("ok"), f.starts("bad")),
        (1, 2),
        "--rerun-failed reruns it, FINISHED still skipped"
    );
}

/// Waits for `job` to die (its runner's watcher kills its group); within 5 s.
fn dies_with_its_runner(job: i32) {
    let died = Instant::now();
    wait_until("the job to die with its runner", || !alive(job));
    assert!(
        died.elapsed() < Duration::from_secs(5),
        "{:?}",
        died.elapsed()
    );
}

fn start_waiting(f: &Fixture) -> (Child, i32) {
    let plan = f.plan(&[
        "e,first,done,,job.sh,done",
        "e,second,wait,,job.sh,wait 0 go",
    ]);
    let runner = f.command(&[plan.to_str().unwrap()]).spawn().unwrap();
    wait_until("the waiting job to start", || f.starts("wait") == 1);
    let pid = std::fs::read_to_string(f.path("starts.wait"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (runner, pid)
}

#[test]
fn a_runner_killed_with_sigkill_is_repaired_by_the_next_one() {
    let f = Fixture::new();
    let (mut runner, job) = start_waiting(&f);
    wait_until("RUNNING recorded", || {
        f.status("second", "wait") == RunStatus::Running
    });
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(runner.id() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    runner.wait().unwrap();
    // Its job dies with it (its watcher kills the job's group).
    dies_with_its_runner(job);
    assert_eq!(
        f.status("second", "wait"),
        RunStatus::Running,
        "left RUNNING by the dead runner"
    );

    std::fs::write(f.path("go"), "").unwrap();
    let plan = f.path("plan.csv");
    let out = f.succeed(&[plan.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_says(&err, "1 left RUNNING by a dead runner marked KILLED");
    assert_eq!(f.status("second", "wait"), RunStatus::Finished);
    assert_eq!(
        (f.starts("done"), f.starts("wait")),
        (1, 2),
        "only the unfinished row ran again"
    );
}

/// A job whose first act is to SIGKILL its runner still dies with it: the
/// runner's watcher is in place before any of the job's own code runs.
#[test]
fn a_job_that_kills_its_runner_at_once_dies_with_it() {
    let f = Fixture::new();
    let killer = f.path("killer.sh");
    std::fs::write(
        &killer,
        "#!/bin/sh\necho \"$$\" > killer.pid\nkill -s KILL \"$PPID\"\nwhile :; do sleep 0.02; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&killer, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plan = f.plan(&["e,w,killer,,killer.sh,"]);
    let mut runner = f.command(&[plan.to_str().unwrap()]).spawn().unwrap();
    runner.wait().unwrap();
    wait_until("the job to write its pid", || {
        std::fs::read_to_string(f.path("killer.pid")).is_ok_and(|s| s.ends_with('\n'))
    });
    let job: i32 = std::fs::read_to_string(f.path("killer.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    dies_with_its_runner(job);
}

#[test]
fn ctrl_c_stops_the_jobs_and_records_them_killed() {
    let f = Fixture::new();
    let (mut runner, job) = start_waiting(&f);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(runner.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = runner.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(!alive(job), "the job was stopped with its runner");
    assert_eq!(f.status("second", "wait"), RunStatus::Killed);
    let row = f
        .store()
        .runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .find(|r| r.run.name == "wait")
        .unwrap();
    assert_says(&row.run.message.unwrap(), "stopped by the runner");
}

/// Ctrl-C while one job of a workload has finished and another runs: the
/// finished one stays FINISHED (in the store and in the plan), so the next
/// run does not run it again; only the running one is KILLED.
#[test]
fn ctrl_c_records_a_job_that_had_finished_as_finished() {
    let f = Fixture::new();
    let plan = f.plan(&["e,w,done,,job.sh,done", "e,w,wait,,job.sh,wait 0 go"]);
    let mut runner = f.command(&[plan.to_str().unwrap()]).spawn().unwrap();
    wait_until("both jobs to start", || {
        f.starts("done") == 1 && f.starts("wait") == 1
    });
    let done: i32 = std::fs::read_to_string(f.path("starts.done"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until("the finished job to end", || !alive(done));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(runner.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    assert_eq!(runner.wait().unwrap().code(), Some(130));
    assert_eq!(f.status("w", "done"), RunStatus::Finished);
    assert_eq!(f.status("w", "wait"), RunStatus::Killed);
    let text = std::fs::read_to_string(&plan).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains(",done,") && l.contains("FINISHED")),
        "{text}"
    );
    std::fs::write(f.path("go"), "").unwrap();
    f.succeed(&[plan.to_str().unwrap()]);
    assert_eq!((f.starts("done"), f.starts("wait")), (1, 2));
}

#[test]
fn a_bad_plan_is_refused_before_anything_starts() {
    let f = Fixture::new();
    let plan = f.plan(&["e,w,a,,job.sh,a", "e,w,b,,missing.py,b"]);
    let err = f.fail(&[plan.to_str().unwrap()]);
    assert_says(&err, "plan.csv, row 2");
    assert_says(&err, "missing.py does not exist");
    assert_eq!(f.starts("a"), 0);
    assert!(
        !f.path("runs.sqlite").exists(),
        "nothing started, no store made"
    );
}

/// A command that exists nowhere, in a later workload's File or Data, is
/// refused at load, before the earlier workloads run.
#[test]
fn a_command_found_nowhere_is_refused_before_anything_starts() {
    let f = Fixture::new();
    for (row, problem) in [
        (
            "e,w2,b,,no-such-trainer-cmd,b",
            "\"no-such-trainer-cmd\" is neither a file",
        ),
        (
            "e,w2,b,no-such-producer --x,job.sh,b",
            "Data command \"no-such-producer\"",
        ),
    ] {
        let plan = f.plan(&["e,w1,a,,job.sh,a", row]);
        let err = f.fail(&[plan.to_str().unwrap()]);
        assert_says(&err, "plan.csv, row 2");
        assert_says(&err, problem);
        assert_says(&err, "PATH");
        assert_eq!(f.starts("a"), 0, "{err}");
        assert!(!f.path("runs.sqlite").exists());
    }
}

#[test]
fn one_command_runs_without_a_plan() {
    let f = Fixture::new();
    f.succeed(&[
        "--experiment",
        "solo",
        "--name",
        "one",
        "--",
        "./job.sh",
        "one",
    ]);
    assert_eq!(f.status("default", "one"), RunStatus::Finished);
    let row = f.store().runs(&RunFilter::default()).unwrap().remove(0);
    assert_eq!(row.experiment, "solo");
    assert_eq!(row.run.command, vec!["./job.sh", "one"]);
}

/// `--log-cap MIB` bounds what a run keeps of each stream: the first and
/// last half of it, with a note of what was dropped between them.
#[test]
fn log_cap_keeps_the_head_and_tail_of_a_long_output() {
    let f = Fixture::new();
    f.succeed(&[
        "--log-cap",
        "1",
        "--name",
        "long",
        "--",
        "sh",
        "-c",
        "echo first; yes 0123456789abcdef | head -c 8388608; echo; echo last",
    ]);
    let store = f.store();
    let row = store.runs(&RunFilter::default()).unwrap().remove(0);
    let (log, _) = store.log(row.run.id, LogStream::Stdout, None).unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(log.len() < (1 << 20) + 1024, "{} bytes kept", log.len());
    assert!(text.starts_with("first\n") && text.ends_with("\nlast\n"));
    assert_says(&text, "bytes of stdout dropped here");
}

/// The runner stops a workload's producer with SIGTERM; one still waiting
/// for its consumers (`--consumers N`) must end then, not at SIGKILL.
#[test]
fn a_producer_waiting_for_its_consumers_ends_on_sigterm() {
    let f = Fixture::new();
    let mut serve = Command::new(BIN)
        .args("serve --name waiting --synthetic --consumers 2".split_whitespace())
        .env("BATCHCAST_DIR", f.path("sockets"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the socket", || f.path("sockets/waiting.sock").exists());
    let pid = rustix::process::Pid::from_raw(serve.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let mut status = None;
    let ended = || {
        status = serve.try_wait().unwrap();
        status.is_some()
    };
    wait_within(
        "serve to end on SIGTERM while waiting for consumers",
        Duration::from_secs(5),
        ended,
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

/// The triggers a shared producer fires are events of its run, in order,
/// and its own log is what it printed (no JSON lines added).
#[test]
fn a_shared_producers_triggers_are_events_of_its_run() {
    let f = Fixture::new();
    let serve = "batchcast serve --synthetic --samples 300 --epochs 3 --trigger every-epoch";
    let plan = f.plan(&[&format!("e,grow,a,{serve},job.sh,a")]);
    f.succeed(&[plan.to_str().unwrap()]);
    let store = f.store();
    let rows = store.runs(&RunFilter::default()).unwrap();
    let data = rows
        .iter()
        .find(|r| r.run.name == keys::DATA_RUN)
        .expect("the producer's run");
    let serve_events = common::events_from(&store, data.run.id, "serve");
    assert_eq!(
        serve_events,
        vec![
            "trigger every-epoch fired (#1) before epoch 1: 0 samples arrived since the last",
            "trigger every-epoch fired (#2) before epoch 2: 0 samples arrived since the last",
        ]
    );
    let (stdout, _) = store.log(data.run.id, LogStream::Stdout, None).unwrap();
    assert!(
        !String::from_utf8_lossy(&stdout).contains("\"event\""),
        "{}",
        String::from_utf8_lossy(&stdout)
    );
}
