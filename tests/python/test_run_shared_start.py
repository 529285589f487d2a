"""Every trainer of a shared workload sees the same epochs: `batchcast run`
tells the workload's Data command how many trainers it has
(BATCHCAST_CONSUMERS), and `batchcast.Producer` and `batchcast serve` wait
for that many before the first batch, whatever the producer's script says.
Without it, the first trainer to attach drains both epochs of a plain
`Producer(loader).run(epochs=2)` before a slower-starting one has begun,
and that one fails with ProducerNotFound."""

from __future__ import annotations

import os
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import batchcast

PRODUCER = textwrap.dedent(
    """
    import os
    import numpy as np
    import batchcast
    batches = [np.arange(i * 8, (i + 1) * 8, dtype=np.int64) for i in range(12)]
    # What a user writes: nothing about how many trainers there are.
    batchcast.Producer(batches, os.environ["BATCHCAST_NAME"]).run(epochs=2)
    """
)

TRAINER = textwrap.dedent(
    """
    import sys, time
    import batchcast
    who, delay = sys.argv[1], float(sys.argv[2])
    time.sleep(delay)  # a trainer that takes its time to start (imports, a model)
    consumer = batchcast.Consumer(connect_timeout=30, format="numpy")
    seen = [sum(len(b) for b in consumer) for _ in range(2)]
    print("SEEN", who, seen, flush=True)
    """
)

JOB = textwrap.dedent(
    """\
    #!/bin/sh
    sleep "$2"
    exec "$BATCHCAST_BIN" consume "$BATCHCAST_NAME" --connect-timeout 30 --epochs 2
    """
)


def run_quick_and_late(batchcast_bin: str, work: Path, data: str, trainer: str) -> None:
    """Runs, and insists that it succeeds, a plan of one workload: Data
    command `data` and two trainers of `trainer`, `quick` starting at once
    and `late` 3 s after it."""
    plan = (
        "Experiment,Workload,Name,Data,File,Params\n"
        f"e,w,quick,{data},{trainer},quick 0\n"
        f"e,w,late,{data},{trainer},late 3\n"
    )
    (work / "plan.csv").write_text(plan)
    env = dict(os.environ, BATCHCAST_PYTHON=sys.executable, BATCHCAST_BIN=batchcast_bin, BATCHCAST_DIR=str(work))
    out = subprocess.run(
        [batchcast_bin, "run", "--store", str(work / "runs.sqlite"), "--interval", "0.2", "plan.csv"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr + stdout_of(work, "late")


def stdout_of(work: Path, name: str) -> str:
    db = sqlite3.connect(work / "runs.sqlite")
    (run,) = db.execute("SELECT id FROM runs WHERE name = ?", (name,)).fetchone()
    return b"".join(
        bytes(d) for (d,) in db.execute("SELECT data FROM logs WHERE run_id = ? AND stream = 'stdout' ORDER BY seq", (run,))
    ).decode()


def test_a_plain_python_producer_serves_both_epochs_to_every_trainer(tmp_path, batchcast_bin):
    (tmp_path / "producer.py").write_text(PRODUCER)
    (tmp_path / "train.py").write_text(TRAINER)
    run_quick_and_late(batchcast_bin, tmp_path, "producer.py", "train.py")
    for name in ("quick", "late"):
        assert f"SEEN {name} [96, 96]" in stdout_of(tmp_path, name)


def test_batchcast_serve_waits_for_the_workloads_trainers(tmp_path, batchcast_bin):
    (tmp_path / "job.sh").write_text(JOB)
    (tmp_path / "job.sh").chmod(0o755)
    run_quick_and_late(batchcast_bin, tmp_path, "batchcast serve --synthetic --samples 640 --epochs 2", "job.sh")
    for name in ("quick", "late"):
        events = [json.loads(line) for line in stdout_of(tmp_path, name).splitlines() if line.startswith("{")]
        starts = [e for e in events if e["event"] == "epoch_start"]
        assert [e["samples"] for e in events if e["event"] == "epoch_end"] == [640, 640], events
        assert [e["partial"] for e in starts] == [False, False], events


def test_too_few_trainers_fail_the_producer_with_a_message_that_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHCAST_CONSUMERS", "2")
    producer = batchcast.Producer([np.arange(2), np.arange(2)], f"few-{os.getpid()}", dir=tmp_path, idle_timeout=0.5)
    with pytest.raises(batchcast.NoConsumers, match=r"0 of the workload's 2 trainers .*BATCHCAST_CONSUMERS=2"):
        producer.run(epochs=1)


def test_a_malformed_count_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHCAST_CONSUMERS", "two")
    with pytest.raises(batchcast.InvalidArgument, match="BATCHCAST_CONSUMERS='two'"):
        batchcast.Producer([np.arange(2)], f"bad-{os.getpid()}", dir=tmp_path)


def test_python_and_batchcast_serve_wait_for_trainers_with_one_message(tmp_path, monkeypatch, batchcast_bin):
    """The wait for the first consumers is one function: a Python producer
    raises the message `batchcast serve` prints, with the wait's figures."""
    monkeypatch.setenv("BATCHCAST_CONSUMERS", "2")
    env = dict(os.environ, BATCHCAST_DIR=str(tmp_path))
    producer = batchcast.Producer([np.arange(2)], "few", dir=tmp_path, idle_timeout=0.5)
    # One of the workload's two trainers starts (a real process) and attaches.
    trainer = subprocess.Popen(
        [batchcast_bin, "consume", "few", "--connect-timeout", "60"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert producer._native.wait_for_consumers(1, 60)
        with pytest.raises(batchcast.NoConsumers) as one:
            producer.run(epochs=1)
    finally:
        trainer.kill()
        trainer.wait()
    hint = (
        "(BATCHCAST_CONSUMERS=2, set by `batchcast run`); see the other runs' output for a trainer that "
        "did not start or connects elsewhere, or raise the idle timeout (--idle-timeout, idle_timeout=) "
        "to wait longer"
    )
    assert str(one.value) == f"only 1 of the workload's 2 trainers attached within 0.5 s {hint}"

    # With none attached, both faces say the same, word for word.
    with pytest.raises(batchcast.NoConsumers) as none:
        batchcast.Producer([np.arange(2)], "none", dir=tmp_path, idle_timeout=0.5).run(epochs=1)
    assert str(none.value) == f"only 0 of the workload's 2 trainers attached within 0.5 s {hint}"
    serve = subprocess.run(
        [batchcast_bin, "serve", "--name", "none", "--synthetic", "--idle-timeout", "0.5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert serve.returncode == 1, serve.stderr
    assert f"error: {none.value}\n" in serve.stderr
