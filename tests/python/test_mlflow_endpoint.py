"""The real `mlflow` client logs into the batchcast run store through the
MLflow-compatible endpoint that `batchcast run` gives its jobs."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

mlflow = pytest.importorskip("mlflow")

SCRIPT = textwrap.dedent(
    """
    import mlflow
    mlflow.set_experiment("e")  # as with `mlflow run`, it must be the run's experiment
    with mlflow.start_run():
        mlflow.log_param("lr", 0.1)
        mlflow.log_params({"batch_size": 64, "optimizer": "sgd"})
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        mlflow.log_metrics({"acc": 0.5, "samples": 320}, step=5)
        mlflow.set_tag("note", "tags are accepted")
    print("logged")
    """
)


def test_the_real_mlflow_client_logs_params_and_metrics_into_the_store(tmp_path, batchcast_bin):
    store = tmp_path / "runs.sqlite"
    server = subprocess.Popen(
        [batchcast_bin, "runs", "mlflow-serve", "--store", str(store), "--experiment", "e", "--name", "r"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        env = dict(os.environ)
        lines = {}
        for _ in range(3):
            k, v = server.stdout.readline().strip().split("=", 1)
            lines[k] = v
        env.update({k: lines[k] for k in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID")})
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert "logged" in out.stdout
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        server.stdout.close()
    assert server.returncode == 0

    run = int(lines["BATCHCAST_RUN"])
    db = sqlite3.connect(store)
    params = dict(db.execute("SELECT key, value FROM params WHERE run_id = ?", (run,)))
    assert params == {"lr": "0.1", "batch_size": "64", "optimizer": "sgd"}
    loss = db.execute(
        "SELECT step, value FROM metrics WHERE run_id = ? AND key = 'loss' ORDER BY step", (run,)
    ).fetchall()
    assert loss == [(s, 1.0 / (s + 1)) for s in range(5)]
    assert db.execute(
        "SELECT value FROM metrics WHERE run_id = ? AND key = 'samples'", (run,)
    ).fetchall() == [(320.0,)]
    # The run stays the runner's: the script's end_run does not end it early.
    (status,) = db.execute("SELECT status FROM runs WHERE id = ?", (run,)).fetchone()
    assert status == "FINISHED"  # set by mlflow-serve when it stopped


def test_unknown_and_malformed_calls_get_mlflow_style_errors(tmp_path, batchcast_bin):
    import json
    import urllib.error
    import urllib.request

    server = subprocess.Popen(
        [batchcast_bin, "runs", "mlflow-serve", "--store", str(tmp_path / "s.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = server.stdout.readline().strip().split("=", 1)[1]

        def call(path, body=None, method="POST"):
            req = urllib.request.Request(url + path, data=body, method=method)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        assert call("/api/2.0/mlflow/registered-models/create", b"{}")[0] == 404
        code, body = call("/api/2.0/mlflow/runs/log-metric", b"not json")
        assert code == 400 and body["error_code"] == "MALFORMED_REQUEST"
        code, body = call("/api/2.0/mlflow/runs/log-metric", b'{"run_id": "nope", "key": "x", "value": 1}')
        assert code == 404 and "not a run of this batchcast store" in body["message"]
        code, body = call("/api/2.0/mlflow/runs/log-batch", json.dumps({"run_id": "0" * 31 + "1", "metrics": [{}] * 1001}).encode())
        assert code == 400
        code, _ = call("/api/2.0/mlflow/runs/log-metric", b"x" * (5 << 20))
        assert code == 413
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        server.stdout.close()


def test_a_plan_job_logging_with_mlflow_lands_in_its_run(tmp_path, batchcast_bin):
    """Under `batchcast run`, an unchanged MLflow script logs into its run."""
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """
            import sys
            import mlflow
            lr = float(sys.argv[sys.argv.index("--lr") + 1])
            mlflow.log_param("optimizer", "sgd")
            for step in range(3):
                mlflow.log_metric("loss", lr * (3 - step), step=step)
            print("trained with", lr)
            """
        )
    )
    (tmp_path / "plan.csv").write_text(
        "Experiment,Workload,Name,File,Params\n"
        "e,w,slow,train.py,--lr 0.1\n"
        "e,w,fast,train.py,--lr 0.5\n"
    )
    store = tmp_path / "runs.sqlite"
    env = dict(os.environ, BATCHCAST_PYTHON=sys.executable)
    out = subprocess.run(
        [batchcast_bin, "run", "--store", str(store), "--interval", "0.2", str(tmp_path / "plan.csv")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    db = sqlite3.connect(store)
    rows = dict(db.execute("SELECT name, id FROM runs"))
    for name, lr in (("slow", 0.1), ("fast", 0.5)):
        run = rows[name]
        loss = db.execute(
            "SELECT step, value FROM metrics WHERE run_id = ? AND key = 'loss' ORDER BY step", (run,)
        ).fetchall()
        assert loss == [(s, pytest.approx(lr * (3 - s))) for s in range(3)]
        params = dict(db.execute("SELECT key, value FROM params WHERE run_id = ?", (run,)))
        assert params == {"lr": str(lr), "optimizer": "sgd"}
        stdout = b"".join(
            d for (d,) in db.execute("SELECT data FROM logs WHERE run_id = ? AND stream = 'stdout' ORDER BY seq", (run,))
        )
        assert f"trained with {lr}".encode() in stdout
    db.close()
