"""The start barrier of jobs run together (batchcast._barrier), with real
processes: none passes before the last has arrived, all pass then, and one
that never arrives makes the others fail with a message, not hang."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchcast._barrier import BarrierError, arrive, arrived, is_open, make_barrier

ROOT = Path(__file__).resolve().parents[2]

# A job: arrives, then prints when it passed (time.time(), as a number).
JOB = """
import sys, time
from batchcast._barrier import arrive
arrive(sys.argv[1], float(sys.argv[2]))
print(time.time(), flush=True)
"""


def _job(spec: str, timeout: float = 30.0) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.Popen([sys.executable, "-c", JOB, spec, str(timeout)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_no_job_passes_before_the_last_arrives(tmp_path):
    spec = make_barrier(str(tmp_path / "b"), 3)
    early = [_job(spec), _job(spec)]
    # Both wait: they have arrived and none has passed (the processes are blocked, not done).
    deadline = time.monotonic() + 30
    while arrived(spec) < 2:
        assert time.monotonic() < deadline, "the first two jobs never arrived"
        assert all(p.poll() is None for p in early)
        time.sleep(0.01)
    assert not is_open(spec)
    assert all(p.poll() is None for p in early)
    opened = time.time()
    last = _job(spec)
    passed = []
    for p in early + [last]:
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        passed.append(float(out))
    assert is_open(spec)
    assert min(passed) >= opened
    assert max(passed) - min(passed) < 5.0


def test_a_job_that_never_arrives_fails_the_others_with_a_message(tmp_path):
    spec = make_barrier(str(tmp_path / "b"), 2)
    p = _job(spec, timeout=0.5)
    _, err = p.communicate(timeout=30)
    assert p.returncode != 0
    assert "only 1 of 2 jobs reached the start barrier" in err


def test_a_barrier_of_one_opens_at_once(tmp_path):
    spec = make_barrier(str(tmp_path / "b"), 1)
    arrive(spec, 0.1)
    assert is_open(spec) and arrived(spec) == 1


def test_a_bad_spec_is_refused():
    with pytest.raises(BarrierError, match="is not DIR:N"):
        arrive("nowhere", 1.0)
    with pytest.raises(ValueError):
        make_barrier("/tmp/x", 0)
