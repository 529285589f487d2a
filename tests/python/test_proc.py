"""batchcast._native.Process and the /proc sampler, from Python: the one
supervisor and sampler (crates/batchcast-proc) the stalls modes and the
collocated benchmark use."""

import os
import signal
import sys
import time

import pytest

from batchcast import _native


def test_a_process_group_is_stopped_with_grace_then_killed(tmp_path):
    # The leader ignores SIGTERM and starts a grandchild that ignores it too.
    script = ("import signal, subprocess, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)']); "
              "print(p.pid, flush=True); p.wait()")
    proc = _native.Process([sys.executable, "-c", script], stdout="pipe")
    with os.fdopen(proc.take_stdout(), "rb") as out:
        grandchild = int(out.readline())
    assert proc.poll() is None
    t0 = time.monotonic()
    assert proc.stop(0.3) is True
    assert time.monotonic() - t0 >= 0.3
    assert proc.returncode == -signal.SIGKILL
    assert grandchild not in _native.descendants(os.getpid())


def test_output_goes_to_a_log_and_its_tail_is_kept(tmp_path):
    log = tmp_path / "out.log"
    proc = _native.Process(["/bin/sh", "-c", "echo one; echo two >&2; exit 3"], stdout="log",
                           stderr="log", log=str(log))
    assert proc.wait(30) == 3
    assert sorted(log.read_text().split()) == ["one", "two"]
    capture = _native.Process(["/bin/sh", "-c", "seq 1 100000 >&2"], stderr="capture", tail_bytes=64)
    assert capture.wait(30) == 0
    assert capture.tail(2) == "99999\n100000"
    cpu, rss = capture.usage()
    assert cpu >= 0.0 and rss > 0


def test_a_program_that_does_not_exist_is_an_oserror_naming_it():
    with pytest.raises(OSError) as e:
        _native.Process(["/nonexistent/program"])
    assert e.value.strerror == "No such file or directory"
    assert "/nonexistent/program" in str(e.value)
    with pytest.raises(ValueError):
        _native.Process([])
    with pytest.raises(ValueError):
        _native.Process(["true"], stdout="elsewhere")


def test_the_tree_cpu_counts_reaped_and_live_children():
    before = _native.tree_cpu_seconds()
    proc = _native.Process([sys.executable, "-c", "sum(range(3_000_000))"])
    assert proc.wait(60) == 0
    assert _native.tree_cpu_seconds() - before >= proc.usage()[0] * 0.9
    assert _native.machine_busy_seconds() > 0
    table = _native.proc_table()
    assert table[os.getpid()][0] == os.getppid()
