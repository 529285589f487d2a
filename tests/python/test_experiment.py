"""Collocated jobs run by the one runner (`batchcast._experiment`): the plan
it writes runs under `batchcast run`, and each run's status, figures and
output come back from the store; a job past the timeout is stopped."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

from batchcast import _experiment, _figures

FIGURES_JOB = textwrap.dedent(
    """
    import os, sys
    from batchcast._figures import write_figures
    print("cwd", os.getcwd(), "gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
    write_figures({"rate": float(sys.argv[1]), "who": "not a number", "ok": True, "nan": float("nan"),
                   "mode": int(os.environ["JOB_MODE"])})
    """
)


def _script(tmp_path, text, name):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_write_figures_keeps_finite_numbers_and_does_nothing_outside_a_run(tmp_path, monkeypatch):
    monkeypatch.delenv(_figures.FIGURES_ENV, raising=False)
    assert _figures.write_figures({"a": 1.0}) is False
    target = tmp_path / "figures.json"
    monkeypatch.setenv(_figures.FIGURES_ENV, str(target))
    assert _figures.write_figures({"a": 1, "b": 2.5, "c": "x", "d": True, "e": float("inf"), "f": [1]})
    assert json.loads(target.read_text()) == {"a": 1.0, "b": 2.5}
    assert target.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["figures.json"]  # no temporary file left


def test_jobs_run_under_batchcast_run_and_come_back_with_their_figures(tmp_path, batchcast_bin, monkeypatch):
    job = _script(tmp_path, FIGURES_JOB, "job.py")
    crash = _script(tmp_path, "import sys\nprint('crashing on purpose', flush=True)\nsys.exit(3)\n", "crash.py")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    store = str(tmp_path / "runs.sqlite")
    jobs = [
        _experiment.Job("pair", "a", [sys.executable, job, "10"], {"JOB_MODE": "1"}),
        _experiment.Job("pair", "b", [sys.executable, job, "20"], {"JOB_MODE": "2"}),
        _experiment.Job("alone", "c", [sys.executable, crash]),
    ]
    name = _experiment.experiment_name("test")
    runs = _experiment.run_plan(jobs, name, store, str(tmp_path), timeout=120, binary=batchcast_bin)
    got = {(r.workload, r.name): r for r in runs}
    assert set(got) == {("pair", "a"), ("pair", "b"), ("alone", "c")}
    a, b, c = got["pair", "a"], got["pair", "b"], got["alone", "c"]
    assert (a.status, a.exit_code, a.figures) == ("FINISHED", 0, {"rate": 10.0, "mode": 1.0})
    assert (b.status, b.figures) == ("FINISHED", {"rate": 20.0, "mode": 2.0})
    # In the caller's directory, with the caller's GPUs (a row without devices hides them).
    assert f"cwd {work} gpus 7" in a.output
    assert (c.status, c.exit_code, c.figures) == ("FAILED", 3, {})
    assert "crashing on purpose" in c.output
    # A second experiment in the same store runs again (names are unique).
    again = _experiment.experiment_name("test")
    assert again != name
    assert len(_experiment.run_plan(jobs[:1], again, store, str(tmp_path), 120, batchcast_bin)) == 1
    assert "batchcast ui --store" in _experiment.store_line(store)


def test_a_job_past_the_timeout_is_stopped_and_named(tmp_path, batchcast_bin):
    pidfile = tmp_path / "pid"
    hang = _script(
        tmp_path,
        f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\nprint('hanging', flush=True)\n"
        "time.sleep(600)\n",
        "hang.py",
    )
    started = time.monotonic()
    runs = _experiment.run_plan(
        [_experiment.Job("w", "h", [sys.executable, hang])],
        _experiment.experiment_name("test"),
        str(tmp_path / "runs.sqlite"),
        str(tmp_path),
        timeout=5,
        binary=batchcast_bin,
    )
    assert time.monotonic() - started < 60
    (run,) = runs
    assert run.status == "TIMEOUT" and run.figures == {}
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_no_binary_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(_experiment, "find_binary", lambda: None)
    job = [_experiment.Job("w", "x", ["true"])]
    with pytest.raises(_experiment.ExperimentError, match="BATCHCAST_BIN"):
        _experiment.run_plan(job, "e", str(tmp_path / "s.sqlite"), str(tmp_path), 5)
    with pytest.raises(_experiment.ExperimentError, match="cannot start"):
        _experiment.run_plan(job, "e", str(tmp_path / "s.sqlite"), str(tmp_path), 5, str(tmp_path / "missing"))


def _aborted(tmp_path, batchcast_bin, script, flag, **kw):
    """The runs of one job running `script`, aborted once `flag` exists."""
    return _experiment.run_plan(
        [_experiment.Job("w", "job", [sys.executable, script], listeners=["process"])],
        _experiment.experiment_name("test"),
        str(tmp_path / "runs.sqlite"),
        str(tmp_path),
        timeout=120,
        binary=batchcast_bin,
        abort=flag.exists,
        **kw,
    )


def test_an_abort_stops_the_jobs_and_the_runs_come_back_with_cpu_and_samples(tmp_path, batchcast_bin):
    """`abort` stops the runner as the timeout does; a run comes back with
    its CPU seconds and the samples of the metrics asked for, recorded by
    the listeners its job names."""
    flag = tmp_path / "stop-now"
    busy = _script(
        tmp_path,
        "import time\nwhile time.process_time() < 0.4:\n    pass\n"
        f"open({str(flag)!r}, 'w').close()\ntime.sleep(600)\n",
        "busy.py",
    )
    started = time.monotonic()
    runs = _aborted(tmp_path, batchcast_bin, busy, flag, interval=0.1, series=["proc/cpu"])
    assert time.monotonic() - started < 60
    (run,) = runs
    assert run.status == "TIMEOUT"
    assert run.cpu_seconds is not None and run.cpu_seconds >= 0.4
    cpu = run.series["proc/cpu_seconds"]
    assert len(cpu) >= 3 and [ts for ts, _ in cpu] == sorted(ts for ts, _ in cpu)
    assert set(run.series) <= {"proc/cpu_seconds", "proc/cpu_percent"}


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_an_abort_leaves_no_process_of_a_job_that_ignores_sigterm(tmp_path, batchcast_bin):
    """The abort path stops every process group: a job and its child that
    both ignore SIGTERM are killed after the grace, before run_plan returns."""
    pids = tmp_path / "pids"
    stubborn = _script(
        tmp_path,
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time;"
        " signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        f"with open({str(pids)!r} + '.tmp', 'w') as f:\n"
        "    f.write(f'{os.getpid()} {child.pid}')\n"
        f"os.replace({str(pids)!r} + '.tmp', {str(pids)!r})\n"
        "time.sleep(600)\n",
        "stubborn.py",
    )
    try:
        runs = _aborted(tmp_path, batchcast_bin, stubborn, pids)
        (run,) = runs
        assert run.status == "TIMEOUT"
        job, child = (int(p) for p in pids.read_text().split())
        assert not _alive(job) and not _alive(child)
    finally:
        if pids.exists():
            for p in pids.read_text().split():
                if _alive(int(p)):
                    os.kill(int(p), 9)
