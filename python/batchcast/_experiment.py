"""Collocated jobs measured together, run by the one runner, ``batchcast run``.

A measurement that compares jobs run side by side (``batchcast stalls
--validate``, the collocated benchmark) describes them as :class:`Job`\\ s;
:func:`run_plan` writes them as a plan, has ``batchcast run`` run it into a
run store, and reads back each run's status, figures (what the job wrote to
``$BATCHCAST_FIGURES``, see :mod:`batchcast._figures`) and the end of its
output. The runner starts, watches, stops and records the processes; the
store keeps the runs for ``batchcast ui --store STORE``.

Jobs of one workload run together; workloads run one after another, in the
order of their first job. Each job runs in the caller's working directory,
with the caller's GPUs visible, and with its own environment on top of the
runner's.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import _native
from ._figures import FIGURES_ENV

__all__ = ["FIGURES_ENV", "ExperimentError", "Job", "Run", "find_binary", "run_plan"]

#: Where the runner writes each figure of a job (``figure/<name>``).
FIGURE_PREFIX = "figure/"
#: The run of a workload's shared producer (the plan's ``data``).
DATA_RUN = "data"
#: CPU seconds of a job's process tree at its end, as the kernel counted them.
EXIT_CPU_SECONDS = "proc/exit_cpu_seconds"
#: CPU seconds of a job's process tree so far, as the process listener samples them.
CPU_SECONDS = "proc/cpu_seconds"
#: Bytes of a run's output kept for an error message.
TAIL_BYTES = 16384
#: Seconds the runner gives a job between SIGTERM and SIGKILL.
GRACE_S = 5.0

# Runs in the job's place: into the caller's directory, the caller's view
# of the GPUs back (the runner hides them from a row without devices),
# then the job's own variables and command.
_LAUNCH = 'cd "$0" || exit 127; unset CUDA_VISIBLE_DEVICES; exec env "$@"'


class ExperimentError(RuntimeError):
    """The runner could not be run, or its runs not read; the message says
    why and what to do."""


@dataclass(frozen=True)
class Job:
    """One run of a plan: ``argv`` with ``env`` on top of the caller's,
    together with the other jobs of its ``workload``; ``data``, when
    given (the same on every job of the workload), is the workload's shared
    producer, started before the jobs, which find it by ``BATCHCAST_NAME``."""

    workload: str
    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    data: Sequence[str] | None = None
    data_env: Mapping[str, str] = field(default_factory=dict)
    #: The runner's listeners for this job (``process``, ``system``,
    #: ``gpu``, ``batchcast``); empty: all of them.
    listeners: Sequence[str] = ()


@dataclass
class Run:
    """A run as the store holds it once the runner is done."""

    id: int
    workload: str
    name: str
    status: str
    #: The job's exit status (None: it did not exit by itself).
    exit_code: int | None
    #: Why the runner failed or stopped it, if it did.
    message: str | None
    figures: dict[str, float]
    #: The end of its stdout and stderr, in the order written.
    output: str
    #: CPU seconds of its process tree: the larger of what the kernel
    #: counted at its end (``proc/exit_cpu_seconds``) and the last sample;
    #: None: not watched.
    cpu_seconds: float | None = None
    #: The samples of the metrics asked for (``series`` of
    #: :func:`run_plan`), by key: (milliseconds since the epoch, value).
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def find_binary(checkout: str | None = None) -> str | None:
    """The ``batchcast`` binary: ``$BATCHCAST_BIN``, the release build of
    ``checkout`` (default: the checkout this package lies in, if it does),
    PATH, then that checkout's debug build (slow: for tests)."""
    if checkout is None:
        here = os.path.dirname(os.path.abspath(__file__))
        checkout = os.path.dirname(os.path.dirname(here))
    target = os.path.join(checkout, "target")
    for cand in (
        os.environ.get("BATCHCAST_BIN"),
        os.path.join(target, "release", "batchcast"),
        shutil.which("batchcast"),
        os.path.join(target, "debug", "batchcast"),
    ):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def default_store() -> str:
    """The store ``batchcast run`` uses when none is named:
    ``$BATCHCAST_STORE``, else ``$XDG_DATA_HOME/batchcast/runs.sqlite``,
    else ``~/.local/share/batchcast/runs.sqlite``."""
    given = os.environ.get("BATCHCAST_STORE")
    if given:
        return given
    data = os.environ.get("XDG_DATA_HOME") or (
        os.path.join(os.environ["HOME"], ".local", "share") if os.environ.get("HOME") else None
    )
    if data is None:
        return os.path.abspath("batchcast-runs.sqlite")
    return os.path.join(data, "batchcast", "runs.sqlite")


def experiment_name(prefix: str) -> str:
    """A name no earlier experiment of the store has: ``prefix`` and the
    time to the millisecond (the runner skips runs a store holds FINISHED)."""
    ms = int(time.time() * 1000)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(ms / 1000))
    return f"{prefix}-{stamp}.{ms % 1000:03d}-{os.getpid()}"


def store_line(store: str) -> str:
    """The line that tells where the runs are and how to see them."""
    return f"runs recorded in {store}; see them with: batchcast ui --store {shlex.quote(store)}"


def _launch(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    assign = [f"{k}={v}" for k, v in env.items()]
    if gpus is not None:
        assign.insert(0, f"CUDA_VISIBLE_DEVICES={gpus}")
    return ["/bin/sh", "-c", _LAUNCH, os.getcwd(), *assign, *argv]


def write_plan(path: str, experiment: str, jobs: Sequence[Job]) -> None:
    """The jobs as a YAML plan (written as JSON, which YAML reads)."""
    runs = []
    for j in jobs:
        argv = _launch(j.argv, j.env)
        row: dict[str, object] = {
            "workload": j.workload,
            "name": j.name,
            "file": argv[0],
            "params": argv[1:],
        }
        if j.data is not None:
            row["data"] = shlex.join(_launch(j.data, j.data_env))
        if j.listeners:
            row["listeners"] = list(j.listeners)
        runs.append(row)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"experiment": experiment, "runs": runs}, f, indent=1)


def run_plan(
    jobs: Sequence[Job],
    experiment: str,
    store: str,
    workdir: str,
    timeout: float,
    binary: str | None = None,
    done: Callable[[], bool] | None = None,
    linger: float = 20.0,
    abort: Callable[[], bool] | None = None,
    interval: float | None = None,
    series: Sequence[str] = (),
) -> list[Run]:
    """Runs the jobs with ``batchcast run`` into ``store`` and returns the
    runs of their workloads in ``experiment`` (the producers' runs too). Past ``timeout``
    seconds the runner is stopped: it stops the jobs and records them
    KILLED, and their runs come back as TIMEOUT. ``done``, when given, says
    whether the jobs have what was measured (their result files, say): the
    jobs get ``linger`` seconds from then to end by themselves, then the
    runner stops them (KILLED, their figures kept). Raises
    :class:`ExperimentError` when the runner cannot be started or ends
    without running the plan. ``abort``, when given, is asked as often:
    once it says True the runner is stopped as at ``timeout``.
    ``interval`` is the listeners' period (seconds; the runner's default
    if None); the runs come back with the samples of every metric whose
    key starts with one of ``series``."""
    exe = binary or find_binary()
    if exe is None:
        raise ExperimentError(
            "no batchcast binary to run the jobs (`batchcast run`): put batchcast on PATH or"
            " set BATCHCAST_BIN to it"
        )
    plan = os.path.join(workdir, "plan.yaml")
    write_plan(plan, experiment, jobs)
    os.makedirs(os.path.dirname(os.path.abspath(store)), exist_ok=True)
    log = os.path.join(workdir, "runner.log")
    argv = [exe, "run", plan, "--store", store, "--grace", str(GRACE_S)]
    if interval is not None:
        argv += ["--interval", str(interval)]
    try:
        runner = _native.Process(argv, None, stdout="log", stderr="log", log=log)
    except OSError as e:
        raise ExperimentError(f"cannot start {exe}: {e.strerror or e}") from e
    try:
        timed_out = not _wait(runner, timeout, done, linger, abort)
    finally:
        runner.stop(GRACE_S * 4)
    try:
        runs = read_runs(store, experiment, series, {j.workload for j in jobs})
    except ExperimentError:
        runs = []
    if not runs:
        raise ExperimentError(
            f"`batchcast run` ended (status {runner.returncode}) without running the plan {plan}:\n"
            f"{_tail_of(log)}"
        )
    if timed_out:
        for r in runs:
            if r.status in ("RUNNING", "KILLED", "PENDING"):
                r.status = "TIMEOUT"
    return runs


def _wait(
    runner: _native.Process,
    timeout: float,
    done: Callable[[], bool] | None,
    linger: float,
    abort: Callable[[], bool] | None = None,
) -> bool:
    """Waits for the runner to end, or for ``linger`` seconds past
    ``done()``; False when ``timeout`` or ``abort()`` came first."""
    start = time.monotonic()
    done_at: float | None = None
    watched = done is not None or abort is not None
    while True:
        now = time.monotonic()
        if done_at is not None and now - done_at >= linger:
            return True
        if now - start >= timeout or (abort is not None and abort()):
            return False
        tick = min(0.2, timeout - (now - start)) if watched else timeout - (now - start)
        if runner.wait(tick) is not None:
            return True
        if done_at is None and done is not None and done():
            done_at = time.monotonic()


def _tail_of(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return "(no output)"


def read_runs(
    store: str,
    experiment: str,
    series: Sequence[str] = (),
    workloads: Collection[str] | None = None,
) -> list[Run]:
    """The runs of ``experiment`` in ``store`` (read-only; of its
    ``workloads`` only, if given), in plan order, with their figures, the
    end of their output, their CPU seconds and the samples of the metrics
    whose keys start with one of ``series``."""
    try:
        db = sqlite3.connect(Path(store).absolute().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise ExperimentError(f"cannot open the run store {store}: {e}") from e
    try:
        rows = db.execute(
            "SELECT r.id, w.name, r.name, r.status, r.exit_code, r.message FROM runs r"
            " JOIN workloads w ON r.workload_id = w.id"
            " JOIN experiments e ON w.experiment_id = e.id"
            " WHERE e.name = ? ORDER BY w.position, r.id",
            (experiment,),
        ).fetchall()
        return [
            Run(
                rid,
                workload,
                name,
                status,
                code,
                why,
                _figures(db, rid),
                _output(db, rid),
                _cpu_seconds(db, rid),
                _series(db, rid, series),
            )
            for rid, workload, name, status, code, why in rows
            if workloads is None or workload in workloads
        ]
    except sqlite3.Error as e:
        raise ExperimentError(f"cannot read the runs of {experiment} in {store}: {e}") from e
    finally:
        db.close()


def _figures(db: sqlite3.Connection, run: int) -> dict[str, float]:
    got: dict[str, float] = {}
    for key, value in db.execute(
        "SELECT key, value FROM metrics WHERE run_id = ? AND key LIKE ? ORDER BY ts_ms, step",
        (run, FIGURE_PREFIX + "%"),
    ):
        got[key[len(FIGURE_PREFIX) :]] = float(value)
    return got


def _cpu_seconds(db: sqlite3.Connection, run: int) -> float | None:
    """As the store's ``run_cpu_seconds``: the larger of the CPU the kernel
    counted at the end and the last sample (which sees orphaned children)."""
    got = []
    for key in (EXIT_CPU_SECONDS, CPU_SECONDS):
        row = db.execute(
            "SELECT value FROM metrics WHERE run_id = ? AND key = ? ORDER BY ts_ms DESC, step DESC"
            " LIMIT 1",
            (run, key),
        ).fetchone()
        if row is not None:
            got.append(float(row[0]))
    return max(got) if got else None


def _series(
    db: sqlite3.Connection, run: int, prefixes: Sequence[str]
) -> dict[str, list[tuple[int, float]]]:
    got: dict[str, list[tuple[int, float]]] = {}
    for prefix in prefixes:
        for key, ts, value in db.execute(
            "SELECT key, ts_ms, value FROM metrics WHERE run_id = ? AND substr(key, 1, ?) = ?"
            " ORDER BY ts_ms, step",
            (run, len(prefix), prefix),
        ):
            got.setdefault(key, []).append((int(ts), float(value)))
    return got


def _output(db: sqlite3.Connection, run: int) -> str:
    """The last :data:`TAIL_BYTES` of the run's stdout and stderr."""
    chunks: list[bytes] = []
    size = 0
    for (data,) in db.execute(
        "SELECT data FROM logs WHERE run_id = ? ORDER BY ts_ms DESC, seq DESC", (run,)
    ):
        chunks.append(bytes(data))
        size += len(data)
        if size >= TAIL_BYTES:
            break
    return b"".join(reversed(chunks))[-TAIL_BYTES:].decode("utf-8", "replace")
