"""A script's own values reach its run: through batchcast's two-line API
(`batchcast.log_metrics`), and out again as an MLflow file store that the
real mlflow package reads (`batchcast runs export --mlflow`)."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import warnings

import pytest

import batchcast

THREADED_SCRIPT = textwrap.dedent(
    """
    import sys, threading
    import batchcast

    batchcast.log_params({"lr": 0.1, "model": "resnet"})

    def train(worker):
        for step in range(50):
            batchcast.log_metrics({f"loss/{worker}": 1.0 / (step + 1), "tick": step}, step=step)

    threads = [threading.Thread(target=train, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batchcast.log_metric("odd", float("nan"), step=1)
    batchcast.log_metric("samples", 12800)
    print("done")
    """
)


def run_plan(batchcast_bin, tmp_path, plan: str, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "plan.csv").write_text(plan)
    env = dict(os.environ, BATCHCAST_PYTHON=sys.executable)
    return subprocess.run(
        [batchcast_bin, "run", "--store", str(tmp_path / "runs.sqlite"), "--interval", "0.2", *extra, str(tmp_path / "plan.csv")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_log_metrics_from_four_threads_lands_every_value_in_the_run(tmp_path, batchcast_bin):
    (tmp_path / "train.py").write_text(THREADED_SCRIPT)
    out = run_plan(batchcast_bin, tmp_path, "Experiment,Workload,Name,File\ne,w,r,train.py\n")
    assert out.returncode == 0, out.stderr
    db = sqlite3.connect(tmp_path / "runs.sqlite")
    (run,) = db.execute("SELECT id FROM runs WHERE name = 'r'").fetchone()
    for worker in range(4):
        points = db.execute(
            "SELECT step, value FROM metrics WHERE run_id = ? AND key = ? ORDER BY step", (run, f"loss/{worker}")
        ).fetchall()
        assert points == [(s, pytest.approx(1.0 / (s + 1))) for s in range(50)]
    assert db.execute("SELECT count(*) FROM metrics WHERE run_id = ? AND key = 'tick'", (run,)).fetchone() == (200,)
    # NaN is not stored as a point (SQLite has no NaN), but the run says so once.
    assert db.execute("SELECT count(*) FROM metrics WHERE run_id = ? AND key = 'odd'", (run,)).fetchone() == (0,)
    events = [m for (m,) in db.execute("SELECT message FROM events WHERE run_id = ?", (run,))]
    assert any('"odd" was NaN at step 1' in m for m in events), events
    assert db.execute("SELECT value FROM metrics WHERE run_id = ? AND key = 'samples'", (run,)).fetchall() == [(12800.0,)]
    params = dict(db.execute("SELECT key, value FROM params WHERE run_id = ?", (run,)))
    assert params == {"lr": "0.1", "model": "resnet"}


def test_outside_batchcast_run_the_api_records_nothing_and_warns_once(monkeypatch):
    monkeypatch.delenv("BATCHCAST_RUN_ID", raising=False)
    monkeypatch.setattr(batchcast._metrics, "_warned", batchcast._metrics.threading.Event())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batchcast.log_metric("loss", 1.0)
        batchcast.log_params({"lr": 0.1})
    assert len(caught) == 1
    assert "batchcast run" in str(caught[0].message)


def test_bad_values_are_refused_before_anything_is_sent(monkeypatch):
    monkeypatch.delenv("BATCHCAST_RUN_ID", raising=False)
    with pytest.raises(TypeError, match="'loss'.*not a number"):
        batchcast.log_metrics({"loss": "high"})
    with pytest.raises(TypeError, match="step must be an int"):
        batchcast.log_metric("loss", 1.0, step=1.5)
    with pytest.raises(ValueError, match="not a name"):
        batchcast.log_metrics({"": 1.0})
    with pytest.raises(TypeError, match="dict"):
        batchcast.log_metrics([("loss", 1.0)])


LOOP_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import batchcast
    n = int(sys.argv[1])
    t = time.monotonic()
    for step in range(n):
        batchcast.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    print(f"LOOP {time.monotonic() - t:.3f}", flush=True)
    """
)


def run_logging(port: int, n: int) -> tuple[subprocess.CompletedProcess, float]:
    """LOOP_SCRIPT as a job whose runner is at `port`; the result, and the
    seconds the training loop spent in n calls."""
    env = dict(
        os.environ,
        BATCHCAST_RUN_ID="1",
        MLFLOW_RUN_ID="0" * 31 + "1",
        MLFLOW_TRACKING_URI=f"http://127.0.0.1:{port}",
        MLFLOW_TRACKING_TOKEN="0" * 32,
    )
    out = subprocess.run([sys.executable, "-c", LOOP_SCRIPT, str(n)], env=env, capture_output=True, text=True, timeout=120)
    loop = float(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("LOOP ")))
    return out, loop


def test_a_runner_that_is_gone_costs_the_loop_nothing_and_is_reported_once_at_the_end():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, loop = run_logging(port, 50)
    assert out.returncode == 0, out.stderr
    assert loop < 1.0
    assert out.stderr.count("batchcast.log_metrics:") == 1, out.stderr
    assert "50 value(s) were not recorded" in out.stderr and "cannot reach the batchcast runner" in out.stderr, out.stderr


def test_a_stalled_runner_never_stalls_the_training_loop():
    """The runner's endpoint accepts connections and never answers (a
    runner stopped with SIGSTOP): the loop's calls return at once, the job
    ends within the exit wait, and says what was lost."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        t = time.monotonic()
        out, loop = run_logging(s.getsockname()[1], 3000)
        took = time.monotonic() - t
    assert out.returncode == 0, out.stderr
    assert loop < 2.0, loop
    assert took < 40, took
    assert out.stderr.count("batchcast.log_metrics:") == 1, out.stderr
    assert "3000 value(s) were not recorded" in out.stderr, out.stderr


EXPORT_SCRIPT = textwrap.dedent(
    """
    import sys
    import batchcast
    lr = float(sys.argv[sys.argv.index("--lr") + 1])
    for step in range(4):
        batchcast.log_metric("loss", lr * (4 - step), step=step)
    print("trained with", lr)
    sys.exit(1 if lr > 1 else 0)
    """
)

READ_BACK = textwrap.dedent(
    """
    import json, sys
    import mlflow
    from mlflow.tracking import MlflowClient
    mlflow.set_tracking_uri("file://" + sys.argv[1])
    runs = mlflow.search_runs(experiment_names=["e"], output_format="list")
    client = MlflowClient()
    out = []
    for r in runs:
        history = client.get_metric_history(r.info.run_id, "loss")
        local = client.download_artifacts(r.info.run_id, "stdout.txt")
        out.append({
            "name": r.info.run_name,
            "status": r.info.status,
            "params": r.data.params,
            "tags": {k: v for k, v in r.data.tags.items() if k.startswith("batchcast.")},
            "loss": sorted((m.step, m.value, m.timestamp) for m in history),
            "metric_keys": sorted(r.data.metrics),
            "stdout": open(local).read(),
        })
    print(json.dumps(out))
    """
)


def read_back(mlflow_dir) -> list:
    out = subprocess.run(
        [sys.executable, "-c", READ_BACK, str(mlflow_dir)],
        env=dict(os.environ, MLFLOW_ALLOW_FILE_STORE="true"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return sorted(json.loads(out.stdout.splitlines()[-1]), key=lambda r: r["name"])


def test_an_export_is_read_back_by_mlflow_with_every_value(tmp_path, batchcast_bin):
    pytest.importorskip("mlflow")
    (tmp_path / "train.py").write_text(EXPORT_SCRIPT)
    out = run_plan(
        batchcast_bin,
        tmp_path,
        "Experiment,Workload,Name,File,Params\ne,w,slow,train.py,--lr 0.1\ne,w,bad,train.py,--lr 2\n",
    )
    assert out.returncode != 0  # one job failed
    store = str(tmp_path / "runs.sqlite")
    target = tmp_path / "mlruns"
    for _ in range(2):  # a second export replaces the runs, it does not copy them
        done = subprocess.run(
            [batchcast_bin, "runs", "export", "--store", store, "--experiment", "e", "--mlflow", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "mlflow ui --backend-store-uri" in done.stderr
    runs = read_back(target)
    assert [r["name"] for r in runs] == ["bad", "slow"]
    assert [r["status"] for r in runs] == ["FAILED", "FINISHED"]
    assert runs[1]["params"] == {"lr": "0.1"}
    assert runs[0]["tags"]["batchcast.exit_code"] == "1"
    assert runs[1]["tags"]["batchcast.workload"] == "w"
    assert "trained with 0.1" in runs[1]["stdout"]
    assert "proc/cpu_percent" in runs[1]["metric_keys"]  # the listeners' metrics travel too

    # Every loss point, as the store's own CSV export has it.
    csv_out = subprocess.run(
        [batchcast_bin, "runs", "export", "--store", store, "--experiment", "e", "--metric", "loss", "--csv", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert csv_out.returncode == 0, csv_out.stderr
    expected = {}
    for row in csv.DictReader(io.StringIO(csv_out.stdout)):
        expected.setdefault(row["run"], []).append((int(row["step"]), float(row["value"]), int(row["ts_ms"])))
    for r in runs:
        assert [tuple(p) for p in r["loss"]] == sorted(expected[r["name"]])
        assert len(r["loss"]) == 4


def test_an_export_refuses_a_directory_that_is_not_an_mlflow_store(tmp_path, batchcast_bin):
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert run_plan(batchcast_bin, tmp_path, "Experiment,Workload,Name,File\ne,w,r,train.py\n").returncode == 0
    target = tmp_path / "photos"
    target.mkdir()
    (target / "holiday.jpg").write_bytes(b"\xff\xd8")
    done = subprocess.run(
        [batchcast_bin, "runs", "export", "--store", str(tmp_path / "runs.sqlite"), "--mlflow", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "neither empty nor an MLflow file store" in done.stderr
    assert sorted(p.name for p in target.iterdir()) == ["holiday.jpg"]
