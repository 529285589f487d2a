"""The real `mlflow` client logs into the batchcast run store through the
MLflow-compatible endpoint that `batchcast run` gives its jobs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading

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
        for _ in range(4):
            k, v = server.stdout.readline().strip().split("=", 1)
            lines[k] = v
        env.update({k: lines[k] for k in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_TOKEN")})
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
    import urllib.error
    import urllib.request

    server = subprocess.Popen(
        [batchcast_bin, "runs", "mlflow-serve", "--store", str(tmp_path / "s.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = dict(server.stdout.readline().strip().split("=", 1) for _ in range(4))
        url = lines["MLFLOW_TRACKING_URI"]
        auth = {"Authorization": "Bearer " + lines["MLFLOW_TRACKING_TOKEN"]}

        def call(path, body=None, method="POST"):
            req = urllib.request.Request(url + path, data=body, method=method, headers=auth)
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


def _serve(batchcast_bin, store, *extra):
    """`runs mlflow-serve` and the lines it printed."""
    server = subprocess.Popen(
        [batchcast_bin, "runs", "mlflow-serve", "--store", str(store), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    # A server that prints fewer lines (no secret) is killed, not waited for.
    killer = threading.Timer(30, server.kill)
    killer.start()
    try:
        lines = dict(server.stdout.readline().strip().split("=", 1) for _ in range(4))
    finally:
        killer.cancel()
    return server, lines


def _stop(server):
    server.stdin.close()
    server.wait(timeout=30)
    server.stdout.close()


def _raw(url: str, head: str, body: bytes = b"") -> tuple[int, str]:
    """One HTTP request written by hand (so Host and Origin are exactly as
    an attacker writes them); status and body."""
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(head.encode() + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data[9:12])
    return status, data.split(b"\r\n\r\n", 1)[1].decode()


def test_nobody_without_the_jobs_secret_writes_the_store(tmp_path, batchcast_bin):
    """Another local user, a web page's cross-site POST, a DNS-rebound
    page, and one job logging into another's run: all refused, and none of
    them leaves a run, a param or a point in the store."""
    store = tmp_path / "runs.sqlite"
    a, la = _serve(batchcast_bin, store, "--name", "a")
    try:
        url, run_id, token = la["MLFLOW_TRACKING_URI"], la["MLFLOW_RUN_ID"], la["MLFLOW_TRACKING_TOKEN"]
        assert len(token) == 32
        port = url.rsplit(":", 1)[1]
        metric = json.dumps({"run_id": run_id, "key": "evil", "value": 1, "step": 0, "timestamp": 0}).encode()
        create = json.dumps({"experiment_id": "0"}).encode()
        good_host = f"Host: 127.0.0.1:{port}\r\n"
        # No secret: what any other user on the machine can send.
        for path, body in (("runs/log-metric", metric), ("runs/create", create), ("experiments/create", b'{"name": "x"}')):
            status, answer = _raw(url, f"POST /api/2.0/mlflow/{path} HTTP/1.1\r\n{good_host}Content-Type: application/json\r\n", body)
            assert status == 401 and "MLFLOW_TRACKING_TOKEN" in answer, answer
        wrong = "0" * 32
        status, _ = _raw(url, f"POST /api/2.0/mlflow/runs/log-metric HTTP/1.1\r\n{good_host}Authorization: Bearer {wrong}\r\n", metric)
        assert status == 401
        # A web page: a "simple" cross-site POST (text/plain, no preflight).
        status, answer = _raw(
            url,
            f"POST /api/2.0/mlflow/runs/log-metric HTTP/1.1\r\n{good_host}Origin: https://evil.example\r\nContent-Type: text/plain\r\n",
            metric,
        )
        assert status == 403, answer
        # DNS rebinding: the page's own name in Host, strict parse included.
        for host in ("evil.example", f"127.0.0.1:{port}@evil.example", "127.0.0.1:evil.example"):
            status, answer = _raw(
                url, f"POST /api/2.0/mlflow/runs/log-metric HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n", metric
            )
            assert status == 403 and "not this machine" in answer, (host, answer)

        # A second job with its own secret reaches its own run, not a's.
        b, lb = _serve(batchcast_bin, store, "--name", "b")
        try:
            # b's endpoint does not know a's secret, nor a's endpoint b's.
            status, _ = _raw(url, f"POST /api/2.0/mlflow/runs/log-metric HTTP/1.1\r\n{good_host}Authorization: Bearer {lb['MLFLOW_TRACKING_TOKEN']}\r\n", metric)
            assert status == 401
        finally:
            _stop(b)

        # The real mlflow client without the secret is refused, with it is not.
        script = "import mlflow\nwith mlflow.start_run():\n    mlflow.log_metric('loss', 0.25, step=1)\nprint('logged')\n"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env.update(MLFLOW_TRACKING_URI=url, MLFLOW_RUN_ID=run_id)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and "logged" not in out.stdout
        env["MLFLOW_TRACKING_TOKEN"] = token
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    finally:
        _stop(a)
    db = sqlite3.connect(store)
    assert db.execute("SELECT key, value FROM metrics").fetchall() == [("loss", 0.25)]
    assert sorted(n for (n,) in db.execute("SELECT name FROM runs")) == ["a", "b"]


def test_one_job_cannot_log_into_another_jobs_run(tmp_path, batchcast_bin):
    """Two jobs of one workload under `batchcast run`: each job's secret
    reaches only its own run (and runs it creates)."""
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """
            import json, os, sys, urllib.request, urllib.error
            import mlflow
            me, mine = sys.argv[1], os.environ["MLFLOW_RUN_ID"]
            mlflow.log_metric("loss", 1.0, step=0)
            # A run of its own making is its own too.
            child = mlflow.MlflowClient().create_run(mlflow.get_experiment_by_name(os.environ["MLFLOW_EXPERIMENT_NAME"]).experiment_id)
            mlflow.MlflowClient().log_metric(child.info.run_id, "child", 2.0)
            # The other job's run (ids are sequential, so easy to guess).
            other = format(int(mine, 16) + (1 if me == "a" else -1), "032x")
            req = urllib.request.Request(
                os.environ["MLFLOW_TRACKING_URI"] + "/api/2.0/mlflow/runs/log-metric",
                data=json.dumps({"run_id": other, "key": "stolen", "value": 1, "step": 0, "timestamp": 0}).encode(),
                headers={"Authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"], "Content-Type": "application/json"},
            )
            try:
                urllib.request.urlopen(req, timeout=10)
                print("WROTE INTO", other)
            except urllib.error.HTTPError as e:
                print("refused", e.code)
            """
        )
    )
    (tmp_path / "plan.csv").write_text("Experiment,Workload,Name,File,Params\ne,w,a,train.py,a\ne,w,b,train.py,b\n")
    store = tmp_path / "runs.sqlite"
    env = dict(os.environ, BATCHCAST_PYTHON=sys.executable)
    out = subprocess.run(
        [batchcast_bin, "run", "--store", str(store), "--interval", "0.2", str(tmp_path / "plan.csv")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    db = sqlite3.connect(store)
    stdout = b"".join(bytes(d) for (d,) in db.execute("SELECT data FROM logs WHERE stream = 'stdout' ORDER BY run_id, seq"))
    assert stdout.count(b"refused 403") == 2, stdout
    assert db.execute("SELECT count(*) FROM metrics WHERE key = 'stolen'").fetchone() == (0,)
    rows = dict(db.execute("SELECT name, id FROM runs"))
    for name in ("a", "b"):
        assert db.execute("SELECT value FROM metrics WHERE run_id = ? AND key = 'loss'", (rows[name],)).fetchall() == [(1.0,)]
    assert db.execute("SELECT count(*) FROM metrics WHERE key = 'child'").fetchone() == (2,)
