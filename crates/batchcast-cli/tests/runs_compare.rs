//! `batchcast runs` (compare, export, plot, list) on stores that are
//! missing, foreign, read-only or real.

mod common;

use common::{assert_says, batchcast, Fail, Succeed};

use std::path::{Path, PathBuf};

use batchcast_runs::{MetricPoint, NewRun, RunId, Store, WorkloadId};

/// Opens a new store at `dir/runs.sqlite` with experiment `exp` and its
/// workload `workload` (launched by `launcher`); returns its path, the store
/// and the workload.
fn new_store(dir: &Path, workload: &str, launcher: Option<&str>) -> (PathBuf, Store, WorkloadId) {
    let path = dir.join("runs.sqlite");
    let store = Store::open(&path).unwrap();
    let e = store.experiment("exp").unwrap();
    let w = store.workload(e, workload, launcher, 0).unwrap();
    (path, store, w)
}

/// Adds run `name` to workload `w`, started now (claimed by a runner);
/// returns it and its start time.
fn started_run(store: &mut Store, w: WorkloadId, name: &str) -> (RunId, i64) {
    let new = NewRun {
        name: name.into(),
        ..Default::default()
    };
    let (r, _) = store.add_run(w, &new).unwrap();
    store.claim_run(r, 1, 1, &serde_json::json!({})).unwrap();
    (r, store.run(r).unwrap().run.start_ms.unwrap())
}

/// Records `n` values of `key` for run `r`, one every `every_ms` from
/// `start`, the i-th being `value(i)`.
fn record(
    store: &mut Store,
    r: RunId,
    key: &str,
    (start, every_ms): (i64, i64),
    n: i64,
    value: impl Fn(i64) -> f64,
) {
    let points: Vec<_> = (0..n)
        .map(|i| MetricPoint {
            run_id: r,
            key: key.into(),
            step: i,
            ts_ms: start + every_ms * i,
            value: value(i),
        })
        .collect();
    store.insert_metrics(&points).unwrap();
}

/// A store at `dir/runs.sqlite` with one started run, `a`, of three
/// `loss` points (0, 1, 2); returns its path and the run.
fn one_run_store(dir: &Path) -> (PathBuf, RunId) {
    let (path, mut store, w) = new_store(dir, "w", None);
    let (r, start) = started_run(&mut store, w, "a");
    record(&mut store, r, "loss", (start, 500), 3, |i| i as f64);
    (path, r)
}

#[test]
fn a_missing_or_foreign_store_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sqlite");
    let err = batchcast()
        .args(["runs", "compare", "--store"])
        .arg(&missing)
        .fail();
    assert_says(&err, "no run store at");
    assert_says(&err, "batchcast run");
    assert!(!missing.exists());

    let foreign = dir.path().join("notes.txt");
    std::fs::write(&foreign, "x".repeat(4096)).unwrap();
    let out = batchcast()
        .args(["runs", "compare", "--store"])
        .arg(&foreign)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_says(&err, "not a batchcast run store");
}

#[test]
fn compare_prints_the_collocation_table() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut store, w) = new_store(dir.path(), "shared", Some("batchcast serve"));
    let (r, start) = started_run(&mut store, w, "a");
    let wait = batchcast_runs::keys::BATCHCAST_DATA_WAIT_SHARE;
    record(&mut store, r, wait, (start, 1), 1, |_| 0.25);
    drop(store);
    let out = batchcast()
        .args(["runs", "compare", "--store"])
        .arg(&path)
        .succeed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_says(&text, "exp/shared");
    assert_says(&text, "25.0%");
    let out = batchcast()
        .args(["runs", "compare", "--json", "--store"])
        .arg(&path)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["workloads"][0]["data_wait_share"], 0.25);
}

#[test]
fn export_writes_every_point_as_csv_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut store, w) = new_store(dir.path(), "w", None);
    let (r, start) = started_run(&mut store, w, "a,b");
    record(&mut store, r, "loss", (start, 500), 3, |i| {
        1.0 / (i + 1) as f64
    });
    drop(store);
    let out = batchcast()
        .args(["runs", "export", "--csv", "-", "--store"])
        .arg(&path)
        .succeed();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "run_id,experiment,workload,run,key,step,ts_ms,elapsed_s,value"
    );
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[2].starts_with(&format!("{r},exp,w,\"a,b\",loss,1,")),
        "quoted run name: {}",
        lines[2]
    );
    assert!(lines[2].ends_with(",0.500,0.5"), "{}", lines[2]);
    let none = batchcast()
        .args(["runs", "export", "--store"])
        .arg(&path)
        .output()
        .unwrap();
    assert_says(&String::from_utf8_lossy(&none.stderr), "--csv FILE");
}

/// An export that cannot make its file says which file and why, once.
#[test]
fn an_export_that_cannot_write_says_why_once() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = one_run_store(dir.path());
    // Under a regular file (the store): nothing can be made there.
    for (flag, target) in [
        ("--csv", path.join("out.csv")),
        ("--mlflow", path.join("mlruns")),
    ] {
        let err = batchcast()
            .args(["runs", "export", flag])
            .arg(&target)
            .arg("--store")
            .arg(&path)
            .fail();
        assert!(
            err.starts_with("error: cannot write the export: cannot create "),
            "{err}"
        );
        assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
    }
}

/// An export that fails (run 99 does not exist) leaves the file it was to
/// replace as it was, and no temporary file beside it.
#[test]
fn a_failed_csv_export_leaves_the_earlier_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (path, r) = one_run_store(dir.path());
    let results = dir.path().join("results.csv");
    std::fs::write(&results, "yesterday's results\n").unwrap();
    let err = batchcast()
        .args(["runs", "export", "99", "--csv"])
        .arg(&results)
        .arg("--store")
        .arg(&path)
        .fail();
    assert_says(&err, "run 99 not found");
    assert_eq!(
        std::fs::read_to_string(&results).unwrap(),
        "yesterday's results\n"
    );
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("runs.sqlite"))
        .collect();
    files.sort();
    assert_eq!(files, ["results.csv"]);

    batchcast()
        .args(["runs", "export", &r.to_string(), "--csv"])
        .arg(&results)
        .arg("--store")
        .arg(&path)
        .succeed();
    let text = std::fs::read_to_string(&results).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
}

/// TensorBoard-style names beside their parent (`loss`, `loss/val`) and a
/// name MLflow refuses beside the one it would become (`a:b`, `a_b`): an
/// MLflow export writes each series to a file of its own, with all its
/// points, and says which were renamed.
#[test]
fn an_mlflow_export_keeps_every_series_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut store, w) = new_store(dir.path(), "w", None);
    let (r, start) = started_run(&mut store, w, "a");
    let series = [("loss", 1), ("loss/val", 2), ("a_b", 3), ("a:b", 4)];
    for (key, n) in series {
        record(&mut store, r, key, (start, 10), n, |_| n as f64);
    }
    drop(store);
    let export = dir.path().join("mlruns");
    let out = batchcast()
        .args(["runs", "export", "--mlflow"])
        .arg(&export)
        .arg("--store")
        .arg(&path)
        .succeed();
    let err = String::from_utf8_lossy(&out.stderr);
    let exp = std::fs::read_dir(&export)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap() != "0")
        .unwrap();
    let run = std::fs::read_dir(&exp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let metrics = run.join("metrics");
    let read = |name: &str| {
        std::fs::read_to_string(metrics.join(name)).unwrap_or_else(|e| panic!("{name}: {e}; {err}"))
    };
    // Each file holds one series: as many lines as its points, its value.
    let mut seen = Vec::new();
    for name in ["loss/val", "a_b", "loss_1", "a_b_1"] {
        let text = read(name);
        let values: Vec<&str> = text.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
        assert!(values.windows(2).all(|v| v[0] == v[1]), "{name}: {text}");
        seen.push((values[0].to_string(), values.len()));
    }
    assert_eq!(
        seen,
        [
            ("2".into(), 2),
            ("3".into(), 3),
            ("1".into(), 1),
            ("4".into(), 4)
        ]
    );
    assert_says(&err, "\"loss\" exported as \"loss_1\"");
    assert_says(&err, "\"a:b\" exported as \"a_b_1\"");
}

#[test]
fn plot_draws_each_run_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut store, w) = new_store(dir.path(), "shared", None);
    let mut ids = Vec::new();
    for name in ["trainer-1", "trainer-2"] {
        let (r, start) = started_run(&mut store, w, name);
        let rate = |i| 1000.0 + i as f64;
        record(
            &mut store,
            r,
            "batchcast/samples_per_s",
            (start, 1000),
            50,
            rate,
        );
        ids.push(r.to_string());
    }
    drop(store);
    // Plots both runs' rates into `chart`.
    let plot_both = |chart: &Path| {
        batchcast()
            .args(["runs", "plot", &ids[0], &ids[1]])
            .args(["--metric", "batchcast/samples_per_s", "-o"])
            .arg(chart)
            .arg("--store")
            .arg(&path)
            .succeed()
    };
    let svg = dir.path().join("chart.svg");
    plot_both(&svg);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("shared/trainer-1") && text.contains("shared/trainer-2"),
        "legend names the runs"
    );
    assert!(
        text.contains("batchcast/samples_per_s (per second)"),
        "the axis says the unit"
    );
    assert_says(&text, "elapsed time since the run started (s)");
    // The runs' lines (and their legend marks) are the 2-pixel polylines;
    // the grid's are thinner.
    let thick = text
        .lines()
        .filter(|l| l.contains("<polyline") && l.contains("stroke-width=\"2\""))
        .count();
    assert!(thick >= 2, "a line per run: {thick}");
    let bad = batchcast()
        .args(["runs", "plot", &ids[0], "--metric", "nope", "-o"])
        .arg(&svg)
        .arg("--store")
        .arg(&path)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("\"nope\""));
    // PNG: the same chart at twice the size, its caption drawn with a
    // system font (dark pixels in the caption's band at the top).
    let png_path = dir.path().join("chart.png");
    plot_both(&png_path);
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (1800, 1040));
    let channels = info.line_size / info.width as usize;
    let caption_band = &pixels[..info.line_size * 80];
    let dark = caption_band
        .chunks(channels)
        .filter(|px| px[..3].iter().all(|&c| c < 100))
        .count();
    assert!(dark > 200, "the caption is drawn: {dark} dark pixels");

    let jpg = batchcast()
        .args([
            "runs", "plot", &ids[0], "--metric", "x", "-o", "a.jpg", "--store",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_says(&String::from_utf8_lossy(&jpg.stderr), ".svg or .png");
}

/// Runs `batchcast ARGS` in `dir` as a user who cannot write there: as root
/// (whom no mode stops), `nobody`, from a copy of the binary in `dir` (the
/// build tree, and `/tmp` where it is 0700, may be out of that user's reach).
fn batchcast_outside(dir: &Path, args: &[&str]) -> std::process::Output {
    if rustix::process::geteuid().is_root() {
        let exe = dir.join("batchcast");
        if !exe.exists() {
            // Copied by `cp`, in a process of its own: a write descriptor
            // opened here could be inherited by a child another test thread
            // is forking, and executing the copy would then fail with
            // ETXTBSY.
            let copied = std::process::Command::new("cp")
                .arg(env!("CARGO_BIN_EXE_batchcast"))
                .arg(&exe)
                .status()
                .unwrap();
            assert!(copied.success(), "cp of the binary failed");
        }
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
    } else {
        batchcast().args(args).current_dir(dir).output().unwrap()
    }
}

/// What `batchcast ARGS`, run as in [`batchcast_outside`], printed; fails
/// the test with its stderr if it did not succeed.
fn read_outside(dir: &Path, args: &[&str]) -> String {
    let out = batchcast_outside(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A store in a directory its reader cannot write (a copy, another user's
/// results): list, show and export read it. With commits still in its
/// `-wal`, the reader is told why it cannot, and what to do.
#[test]
fn a_store_in_a_directory_the_reader_cannot_write_is_read() {
    use std::os::unix::fs::PermissionsExt;
    // In /var/tmp (1777 by convention), which `nobody` can reach.
    let dir = tempfile::Builder::new()
        .prefix("batchcast-ro-")
        .tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let (path, mut store, w) = new_store(&ro, "w", None);
    let (r, start) = started_run(&mut store, w, "copied");
    record(&mut store, r, "loss", (start, 10), 3, |i| i as f64);
    drop(store);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let store = path.to_str().unwrap();

    let list = read_outside(dir.path(), &["runs", "list", "--store", store]);
    assert_says(&list, "copied");
    read_outside(
        dir.path(),
        &["runs", "show", &r.to_string(), "--store", store],
    );
    let csv = read_outside(
        dir.path(),
        &["runs", "export", "--csv", "-", "--store", store],
    );
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert_eq!(
        std::fs::read_dir(&ro).unwrap().count(),
        1,
        "nothing written beside it"
    );

    // Commits left in a -wal file cannot be read without a -shm: said so.
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(ro.join("runs.sqlite-wal"), vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = batchcast_outside(dir.path(), &["runs", "list", "--store", store]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_says(&err, "-wal");
    assert_says(&err, ".backup");
}
