//! The runner with real processes and a real store file, on made-up GPUs:
//! each job watched with its own row, and nothing it started left running
//! (nor any run left RUNNING) when it returns on an error.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use batchcast_proc::procfs::{alive, pids};
use batchcast_runs::gpu::FakeGpus;
use batchcast_runs::plan::Plan;
use batchcast_runs::runner::{host_name, process_start, run_plan, Outcome, RunError, RunOptions};
use batchcast_runs::{keys, RunFilter, RunRow, RunStatus, Store};

struct Fixture {
    dir: tempfile::TempDir,
    gpus: Arc<FakeGpus>,
    progress: Arc<Mutex<Vec<String>>>,
    log_cap: u64,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            gpus: Arc::new(FakeGpus::plain(2).with_fields(vec![("power_w".into(), 100.0)])),
            progress: Arc::default(),
            log_cap: batchcast_runs::DEFAULT_LOG_CAP,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// An executable file `name` holding `text`.
    fn script(&self, name: &str, text: &str) {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }

    fn plan(&self, text: &str) -> Plan {
        let p = self.path("plan.csv");
        std::fs::write(&p, text).unwrap();
        Plan::load(&p).unwrap()
    }

    fn run(&self, plan: &Plan) -> Result<Outcome, RunError> {
        let progress = self.progress.clone();
        let mut opts = RunOptions {
            store: self.path("runs.sqlite"),
            interval: Duration::from_millis(50),
            rerun_failed: false,
            gpus: self.gpus.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            exe: PathBuf::from("batchcast"),
            python: "python3".into(),
            grace: Duration::from_secs(2),
            log_cap: self.log_cap,
            report_every: batchcast_runs::runner::REPORT_EVERY,
            progress: Box::new(move |line: &str| progress.lock().unwrap().push(line.to_string())),
        };
        run_plan(plan, &mut opts)
    }

    fn row(&self, name: &str) -> RunRow {
        Store::open_read_only(self.path("runs.sqlite"))
            .unwrap()
            .runs(&RunFilter::default())
            .unwrap()
            .into_iter()
            .find(|r| r.run.name == name)
            .unwrap()
    }
}

/// Asserts that `row` ended `status` with a message that says `says`.
fn assert_ended(row: &RunRow, status: RunStatus, says: &str) {
    assert_eq!(row.run.status, status, "{row:?}");
    let message = row.run.message.as_deref().unwrap_or("");
    assert!(
        message.contains(says),
        "{says:?} not in {message:?}: {row:?}"
    );
}

/// Live processes whose command line names a file under `dir`.
fn running_in(dir: &Path) -> Vec<i32> {
    let dir = dir.to_string_lossy().into_owned();
    pids()
        .into_iter()
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&dir))
                && alive(pid)
        })
        .collect()
}

/// A row whose job cannot start (its interpreter does not exist) must not
/// shift the rows after it: the next job's GPU listener samples its own
/// GPU, not the failed row's.
#[test]
fn a_job_that_cannot_start_leaves_the_next_watched_with_its_own_row() {
    let f = Fixture::new();
    f.script("nostart.sh", "#!/nonexistent/interpreter\n");
    f.script("job.sh", "#!/bin/sh\nsleep 0.5\n");
    let plan = f.plan(
        "Experiment,Workload,Name,Devices,Listeners,File\n\
         e,w,a,0,gpu,nostart.sh\n\
         e,w,b,1,gpu,job.sh\n",
    );
    let out = f.run(&plan).unwrap();
    assert_eq!((out.finished, out.failed), (1, 1), "{out:?}");
    assert_ended(&f.row("a"), RunStatus::Failed, "cannot start");
    let b = f.row("b");
    assert_eq!(b.run.status, RunStatus::Finished);
    let store = Store::open_read_only(f.path("runs.sqlite")).unwrap();
    let metrics = store.metric_keys(b.run.id).unwrap();
    assert!(metrics.contains(&keys::gpu(1, "power_w")), "{metrics:?}");
    assert!(
        !metrics.contains(&keys::gpu(0, "power_w")),
        "b watched on a's GPU: {metrics:?}"
    );
}

/// The store refuses a write after the first job started (here a trigger
/// stands in for a full disk): the runner returns its error, and stops
/// what it started first: both jobs, the MPS daemon, and no run is left
/// RUNNING.
#[test]
fn a_store_error_after_jobs_started_leaves_nothing_running() {
    let f = Fixture::new();
    f.script(
        "job.sh",
        "#!/bin/sh\necho started > \"started.$1\"\nsleep 30\n",
    );
    let plan = f.plan(
        "Experiment,Workload,Name,Devices,Collocation,File,Params\n\
         e,w,a,0,MPS,job.sh,a\n\
         e,w,b,1,MPS,job.sh,b\n",
    );
    drop(Store::open(f.path("runs.sqlite")).unwrap());
    rusqlite::Connection::open(f.path("runs.sqlite"))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE UPDATE OF pid ON runs
             WHEN NEW.name = 'b' AND NEW.pid IS NOT NULL
             BEGIN SELECT RAISE(ABORT, 'disk full (test)'); END;",
        )
        .unwrap();
    let begun = Instant::now();
    let err = f
        .run(&plan)
        .expect_err("the store error is returned")
        .to_string();
    assert!(err.contains("disk full (test)"), "{err}");
    assert!(f.row("a").run.pid.is_some(), "job a was started");
    let left = running_in(f.dir.path());
    for &p in &left {
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_raw(p).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert!(left.is_empty(), "jobs left running: {left:?}");
    assert!(
        begun.elapsed() < Duration::from_secs(20),
        "{:?}",
        begun.elapsed()
    );
    for name in ["a", "b"] {
        assert_ended(&f.row(name), RunStatus::Killed, "disk full (test)");
    }
    let mps = f.gpus.mps_state();
    assert!(!mps.running && mps.stops == 1, "{mps:?}");
}

/// A Data command that cannot start (its interpreter is missing), or that
/// exits before its producer serves: the workload's `data` run is FAILED
/// with the reason (and what the command last wrote), its jobs' runs are
/// FAILED, none left RUNNING.
#[test]
fn a_data_command_that_does_not_serve_leaves_no_run_running() {
    let cases = [
        ("#!/nonexistent/interpreter\n", vec!["cannot start"]),
        (
            "#!/bin/sh\necho 'no dataset at /data/x' >&2\nexit 3\n",
            vec!["is not serving: it exited", "no dataset at /data/x"],
        ),
    ];
    for (script, wanted) in cases {
        let f = Fixture::new();
        f.script("data.sh", script);
        f.script("job.sh", "#!/bin/sh\nexit 0\n");
        let plan = f.plan(
            "Experiment,Workload,Name,Data,File\n\
             e,w,a,./data.sh --serve,job.sh\n",
        );
        let out = f.run(&plan).unwrap();
        assert_eq!(out.failed, 1, "{script:?}: {out:?}");
        for says in wanted {
            assert_ended(&f.row(keys::DATA_RUN), RunStatus::Failed, says);
        }
        assert_ended(&f.row("a"), RunStatus::Failed, "Data did not start");
    }
}

/// A sleeping process in a group of its own, standing in for a job.
fn sleeper() -> std::process::Child {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("sleep")
        .arg("60")
        .process_group(0)
        .spawn()
        .unwrap()
}

/// A runner killed with SIGKILL left run `a`'s job running (its watcher
/// killed too). The next runner finds it by its recorded pid and start time
/// and stops it before starting the row again, so no second copy runs
/// beside it; run `b`'s recorded pid now belongs to another process (a
/// different start time), which is left alone.
#[test]
fn a_job_left_running_by_a_dead_runner_is_stopped_by_the_next_one() {
    let f = Fixture::new();
    f.script("job.sh", "#!/bin/sh\necho again\n");
    let plan = f.plan(
        "Experiment,Workload,Name,File\n\
         e,w,a,job.sh\n",
    );
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = i64::from(dead.id());
    dead.wait().unwrap();
    let mut orphan = sleeper();
    let mut stranger = sleeper();
    let (orphan_pid, stranger_pid) = (i64::from(orphan.id()), i64::from(stranger.id()));
    {
        let mut store = Store::open(f.path("runs.sqlite")).unwrap();
        let e = store.experiment("e").unwrap();
        let w = store.workload(e, "w", None, 0).unwrap();
        let env = serde_json::json!({});
        for (name, pid, start) in [
            ("a", orphan_pid, process_start(orphan_pid)),
            (
                "b",
                stranger_pid,
                process_start(stranger_pid).map(|s| s + 1),
            ),
        ] {
            let new = batchcast_runs::NewRun {
                name: name.into(),
                command: vec!["job.sh".into()],
                collocation: "-".into(),
                host: host_name(),
                ..Default::default()
            };
            let (id, _) = store.add_run(w, &new).unwrap();
            assert!(store.claim_run(id, dead_pid, 1, &env).unwrap());
            store.set_pid(id, pid, start).unwrap();
        }
    }
    let out = f.run(&plan).unwrap();
    let orphan_gone = orphan.try_wait().unwrap().is_some();
    let stranger_alive = stranger.try_wait().unwrap().is_none();
    let _ = orphan.kill();
    let _ = stranger.kill();
    let _ = (orphan.wait(), stranger.wait());
    assert!(
        orphan_gone,
        "the dead runner's job still runs beside its second copy"
    );
    assert!(
        stranger_alive,
        "a process that reused a recorded pid was stopped"
    );
    assert_eq!((out.finished, out.repaired), (1, 2), "{out:?}");
    assert_eq!(f.row("a").run.status, RunStatus::Finished);
    assert_eq!(f.row("b").run.status, RunStatus::Killed);
    let progress = f.progress.lock().unwrap().join("\n");
    assert!(
        progress.contains(&format!(
            "stopped run 1 (a, pid {orphan_pid}), left running by runner pid {dead_pid} that died"
        )),
        "{progress}"
    );
}

/// A job that leaves a detached child (`setsid`) holding its stdout: the
/// run ends when the job's own process ends, FINISHED with what the job
/// wrote, not when the child lets go of the pipe.
#[test]
fn a_job_that_leaves_a_detached_child_holding_stdout_ends_with_its_process() {
    let f = Fixture::new();
    // The job ends only once the child is in a session of its own (it says
    // so with a file), so that the end of the job's group cannot take it.
    f.script(
        "daemon.sh",
        "#!/bin/sh\ntouch \"$(pwd)/detached\"\nexec sleep 60\n",
    );
    f.script(
        "job.sh",
        "#!/bin/sh\nsetsid \"$(pwd)/daemon.sh\" &\n\
         while [ ! -e \"$(pwd)/detached\" ]; do sleep 0.01; done\necho job done\n",
    );
    let plan = f.plan(
        "Experiment,Workload,Name,File\n\
         e,w,a,job.sh\n",
    );
    let begun = Instant::now();
    let out = f.run(&plan);
    let took = begun.elapsed();
    let left = running_in(f.dir.path());
    for &p in &left {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(p).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    let out = out.unwrap();
    assert!(took < Duration::from_secs(10), "the run took {took:?}");
    assert_eq!(out.finished, 1, "{out:?}");
    let row = f.row("a");
    assert_eq!(row.run.status, RunStatus::Finished, "{row:?}");
    let store = Store::open_read_only(f.path("runs.sqlite")).unwrap();
    let (log, _) = store
        .log(row.run.id, batchcast_runs::LogStream::Stdout, None)
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log), "job done\n");
    let events: Vec<String> = store
        .events(row.run.id)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e.contains("stdout after the job ended was not recorded")),
        "{events:?}"
    );
}

/// Each job is given a figures file in a private directory of its own; what
/// it writes there is recorded as `figure/<name>` metrics of its run, a
/// failed run's too, and a bad file becomes an event of a run that still
/// ends as its job did.
#[test]
fn a_jobs_figures_are_recorded_whatever_its_status() {
    let f = Fixture::new();
    f.script(
        "job.sh",
        "#!/bin/sh\n\
         mode=$(stat -c %a \"$(dirname \"$BATCHCAST_FIGURES\")\")\n\
         basename \"$(dirname \"$BATCHCAST_FIGURES\")\" > \"dir.$1\"\n\
         case $1 in\n\
         good) printf '{\"samples_per_s\": 1234.5, \"dir_mode\": %s}' \"$mode\" > \"$BATCHCAST_FIGURES\" ;;\n\
         failed) echo '{\"epochs\": 2}' > \"$BATCHCAST_FIGURES\"; exit 3 ;;\n\
         bad) echo '{\"model\": \"resnet\"}' > \"$BATCHCAST_FIGURES\" ;;\n\
         esac\n",
    );
    let plan = f.plan(
        "Experiment,Workload,Name,File,Params\n\
         e,w,good,job.sh,good\n\
         e,w,failed,job.sh,failed\n\
         e,w,bad,job.sh,bad\n\
         e,w,none,job.sh,none\n",
    );
    let out = f.run(&plan).unwrap();
    assert_eq!((out.finished, out.failed), (3, 1), "{out:?}");
    let store = Store::open_read_only(f.path("runs.sqlite")).unwrap();
    let figure = |run: &str, name: &str| -> Vec<f64> {
        store
            .metric(f.row(run).run.id, &keys::figure(name), None, 10)
            .unwrap()
            .iter()
            .map(|p| p.value)
            .collect()
    };
    assert_eq!(figure("good", "samples_per_s"), vec![1234.5]);
    assert_eq!(figure("good", "dir_mode"), vec![700.0]);
    // The CPU each job used, as the kernel counted it at its end.
    let cpu = store
        .metric(
            f.row("failed").run.id,
            keys::PROC_EXIT_CPU_SECONDS,
            None,
            10,
        )
        .unwrap();
    assert!(cpu.len() == 1 && cpu[0].value >= 0.0, "{cpu:?}");
    assert_eq!(f.row("failed").run.status, RunStatus::Failed);
    assert_eq!(figure("failed", "epochs"), vec![2.0]);
    let bad = f.row("bad");
    assert_eq!(bad.run.status, RunStatus::Finished);
    let figures: Vec<String> = store
        .metric_keys(bad.run.id)
        .unwrap()
        .into_iter()
        .filter(|k| k.starts_with("figure/"))
        .collect();
    assert!(figures.is_empty(), "{figures:?}");
    let events = store.events(bad.run.id).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.contains("not recorded") && e.message.contains("\"model\"")),
        "{events:?}"
    );
    let none = f.row("none");
    assert_eq!(none.run.status, RunStatus::Finished);
    assert!(store.events(none.run.id).unwrap().is_empty());
    // Every run had its own directory, and none is left behind.
    let dirs: std::collections::HashSet<String> = ["good", "failed", "bad", "none"]
        .iter()
        .map(|n| std::fs::read_to_string(f.path(&format!("dir.{n}"))).unwrap())
        .collect();
    assert_eq!(dirs.len(), 4, "{dirs:?}");
    for d in dirs {
        assert!(!std::env::temp_dir().join(d.trim()).exists(), "{d} left");
    }
}
