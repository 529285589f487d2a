"""The start barrier of jobs run together (batchcast._barrier), with real
processes: none passes before the last has arrived, all pass then; one that
never arrives, or ends (SIGKILL) before the barrier opens, makes the others
fail with a message, not hang, and so does it for a job that arrives later."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchcast._barrier import BarrierError, arrive, arrived, is_open, join, make_barrier

ROOT = Path(__file__).resolve().parents[2]

# A job: arrives, then prints when it passed (time.time(), as a number).
# With "setup" it first joins, says so, and sets up until its stdin closes;
# with "fork" it also forks a child that outlives it (a DataLoader worker)
# and prints the child's pid.
JOB = """
import os, sys, time
from batchcast._barrier import arrive, join
if sys.argv[3] != "arrive":
    join(sys.argv[1])
    if sys.argv[3] == "fork":
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        print(child, flush=True)
    print("joined", flush=True)
    sys.stdin.read()
arrive(sys.argv[1], float(sys.argv[2]))
print(time.time(), flush=True)
"""


def _job(spec: str, timeout: float = 30.0, how: str = "arrive") -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.Popen([sys.executable, "-c", JOB, spec, str(timeout), how], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _until_arrived(spec: str, n: int) -> None:
    deadline = time.monotonic() + 30
    while arrived(spec) < n:
        assert time.monotonic() < deadline, f"{n} jobs never arrived"
        time.sleep(0.01)


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


def test_a_job_that_arrives_after_another_timed_out_fails_at_once(tmp_path):
    # The first job gave up; the barrier must not open for the second alone.
    spec = make_barrier(str(tmp_path / "b"), 2)
    with pytest.raises(BarrierError, match="only 1 of 2 jobs"):
        arrive(spec, 0.2)
    late = _job(spec, timeout=60.0)
    _, err = late.communicate(timeout=30)
    assert late.returncode != 0
    assert "only 1 of 2 jobs reached the start barrier" in err
    assert not is_open(spec)


@pytest.mark.parametrize("how", ["setup", "fork"])
def test_a_job_killed_while_it_sets_up_fails_the_waiting_ones_at_once(tmp_path, how):
    spec = make_barrier(str(tmp_path / "b"), 3)
    setting_up = _job(spec, timeout=60.0, how=how)
    child = int(setting_up.stdout.readline()) if how == "fork" else None
    try:
        assert setting_up.stdout.readline().strip() == "joined"
        waiting = [_job(spec, timeout=60.0), _job(spec, timeout=60.0)]
        _until_arrived(spec, 2)
        killed = time.monotonic()
        setting_up.send_signal(signal.SIGKILL)
        for p in waiting:
            _, err = p.communicate(timeout=30)
            assert p.returncode != 0
            assert f"a job (pid {setting_up.pid}) ended before the start barrier" in err
        assert time.monotonic() - killed < 20  # not the 60 s timeout
        assert not is_open(spec)
        late = _job(spec, timeout=60.0)
        _, err = late.communicate(timeout=30)
        assert late.returncode != 0 and "ended before the start barrier" in err
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        setting_up.kill()
        setting_up.communicate()


def test_a_waiting_job_killed_fails_the_other_waiting_one(tmp_path):
    spec = make_barrier(str(tmp_path / "b"), 3)
    first, second = _job(spec, timeout=60.0), _job(spec, timeout=60.0)
    _until_arrived(spec, 2)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    _, err = second.communicate(timeout=30)
    assert second.returncode != 0
    assert f"a job (pid {first.pid}) ended before the start barrier" in err


def test_many_jobs_arriving_together_all_pass_and_leave_no_fifo(tmp_path):
    where = tmp_path / "b"
    spec = make_barrier(str(where), 6)
    jobs = [_job(spec) for _ in range(6)]
    for p in jobs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert is_open(spec) and arrived(spec) == 6
    assert not [n for n in os.listdir(where) if n.startswith(("wait-", "new-"))]


def test_threads_of_one_process_arrive_as_one_job(tmp_path):
    import threading

    spec = make_barrier(str(tmp_path / "b"), 2)
    errors: list[BaseException] = []

    def arrive_here() -> None:
        try:
            arrive(spec, 30.0)
        except BaseException as e:  # the test reports it
            errors.append(e)

    threads = [threading.Thread(target=arrive_here) for _ in range(3)]
    for t in threads:
        t.start()
    _until_arrived(spec, 1)
    other = _job(spec)
    _, err = other.communicate(timeout=30)
    assert other.returncode == 0, err
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert errors == [] and arrived(spec) == 2


def test_a_directory_others_can_open_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    with pytest.raises(BarrierError, match="no one else can open"):
        make_barrier(str(shared), 2)
    with pytest.raises(BarrierError, match="no one else can open"):
        arrive(f"{shared}:2", 1.0)
    spec = make_barrier(str(tmp_path / "b"), 2)
    join(spec)
    where = spec.rpartition(":")[0]
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o700
    for name in os.listdir(where):
        assert stat.S_IMODE(os.lstat(os.path.join(where, name)).st_mode) & 0o077 == 0


def test_a_used_directory_is_no_fresh_barrier(tmp_path):
    spec = make_barrier(str(tmp_path / "b"), 1)
    arrive(spec, 1.0)
    with pytest.raises(BarrierError, match="not empty"):
        make_barrier(str(tmp_path / "b"), 1)
