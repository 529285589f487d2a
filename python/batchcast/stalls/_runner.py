"""Runs the script in one mode, in fresh processes, bounded in time.

Each run gets its own result directory; the marked script writes
``marked-PID.json`` when it creates its loader and ``result-RANK.json`` when
it has measured its steps. A run that ends without a result, or outlives its
timeout, is a :class:`StallsError` naming the mode and the script's last
output. The copies of ``--validate`` run as workloads of ``batchcast run``
(:func:`run_planned`), which records them in the run store; their results
are read back from it.
"""

import glob
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from .. import _experiment, _native
from . import _protocol

MAX_RESULT_BYTES = 64 << 20
TAIL_LINES = 15


class StallsError(RuntimeError):
    """A mode could not be measured; the message says why and what to do."""


@dataclass
class Job:
    """One process (tree) of a run: the command, its mode and its files."""

    label: str
    command: Sequence[str]
    mode: str
    out: str
    env: dict[str, str] = field(default_factory=dict)
    ranks: int = 1
    proc: Optional[_native.Process] = None
    log: str = ""
    #: Run on these CPUs only (Linux ``sched_setaffinity``); None: anywhere.
    cpus: Optional[frozenset[int]] = None


def tail(path: str, lines: int = TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no output)"
    return _indent(text, lines)


def make_job(
    label: str,
    command: Sequence[str],
    mode: str,
    base: str,
    settings: dict[str, str],
    ranks: int = 1,
    cpus: Optional[frozenset[int]] = None,
) -> Job:
    out = tempfile.mkdtemp(prefix=f"{label}-", dir=base)
    env = dict(settings)
    env[_protocol.MODE] = mode
    env[_protocol.OUT] = out
    return Job(label, command, mode, out, env=env, ranks=ranks, cpus=cpus)


def can_pin() -> bool:
    """Whether jobs can be held to chosen CPUs here (Linux)."""
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def start(job: Job) -> None:
    """Starts the job in a process group of its own (the one supervisor,
    in Rust), its output in ``output.log``; held to its CPUs before the
    script runs, so that everything it starts (data-loader workers too)
    inherits them."""
    job.log = os.path.join(job.out, "output.log")
    env = dict(os.environ)
    env.update(job.env)
    cpus = sorted(job.cpus) if job.cpus is not None else None
    try:
        job.proc = _native.Process(
            list(job.command), env, stdout="log", stderr="log", log=job.log, cpus=cpus
        )
    except OSError as e:
        why = e.strerror or str(e)
        raise StallsError(f"{job.label}: cannot start {job.command[0]!r}: {why}") from e


def _kill(job: Job) -> None:
    """SIGTERM to the job's group, SIGKILL after 5 s; waits for it."""
    if job.proc is not None:
        job.proc.stop(5.0)


def results_of(job: Job) -> list[dict]:
    found = []
    for path in sorted(glob.glob(os.path.join(job.out, "result-*.json"))):
        if os.path.getsize(path) > MAX_RESULT_BYTES:
            raise StallsError(f"{job.label}: {path} is larger than {MAX_RESULT_BYTES} bytes")
        with open(path) as f:
            found.append(json.load(f))
    return found


def _failure(job: Job, why: str, output: Optional[str] = None) -> StallsError:
    marked = glob.glob(os.path.join(job.out, "marked-*.json"))
    hint = (
        ""
        if marked
        else (
            "\n  the script never created its marked loader: wrap it once with"
            " `loader = batchcast.stalls.mark(loader)`"
        )
    )
    last = tail(job.log) if output is None else _indent(output)
    return StallsError(
        f"mode {job.mode} ({job.label}): {why}{hint}\n  last output of the script:\n{last}"
    )


def _indent(text: str, lines: int = TAIL_LINES) -> str:
    kept = text.splitlines()[-lines:]
    return "\n".join("    " + line for line in kept) if kept else "    (no output)"


def run_all(jobs: list[Job], timeout: float, grace: float = 20.0) -> dict[str, list[dict]]:
    """Starts the jobs together and waits for every result (all ranks);
    processes still alive ``grace`` seconds after their results are stopped."""
    for j in jobs:
        start(j)
    deadline = time.monotonic() + timeout
    done: dict[str, list[dict]] = {}
    done_at: dict[str, float] = {}
    try:
        while True:
            for j in jobs:
                assert j.proc is not None
                if j.label in done:
                    continue
                res = results_of(j)
                if len(res) >= j.ranks:
                    done[j.label] = res
                    done_at[j.label] = time.monotonic()
                elif j.proc.poll() is not None:
                    res = results_of(j)  # written just before it exited
                    if len(res) >= j.ranks:
                        done[j.label] = res
                        continue
                    raise _failure(
                        j,
                        f"the script exited with status {j.proc.returncode} before its measured steps ended",
                    )
            waiting = [j for j in jobs if j.label not in done]
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise _failure(
                    waiting[0],
                    f"no result after {timeout:.0f} s (the timeout; raise it with --timeout)",
                )
            time.sleep(0.05)
        # Let them exit by themselves (the recorder ends the script), then stop.
        end = time.monotonic() + grace
        while time.monotonic() < end and any(
            j.proc is not None and j.proc.poll() is None for j in jobs
        ):
            time.sleep(0.05)
    finally:
        for j in jobs:
            _kill(j)
    return done


@dataclass(frozen=True)
class Store:
    """Where planned runs are recorded: the store file, the experiment (one
    per analysis) their workloads belong to, and the runner."""

    path: str
    experiment: str
    #: The ``batchcast`` binary (None: :func:`_experiment.find_binary`).
    binary: Optional[str] = None


def run_planned(
    jobs: list[Job],
    workload: str,
    store: Store,
    base: str,
    timeout: float,
    producer: Optional[Job] = None,
    linger: float = 20.0,
) -> dict[str, list[dict]]:
    """Runs the jobs together as ``workload`` of ``batchcast run`` (with
    ``producer`` as its shared producer) and returns each job's result as
    the store holds it: the figures its marked loader wrote. Jobs still
    running ``linger`` seconds after the last result are stopped."""
    data = producer.command if producer is not None else None
    planned = [
        _experiment.Job(
            workload,
            j.label,
            j.command,
            j.env,
            data=data,
            data_env=producer.env if producer is not None else {},
        )
        for j in jobs
    ]
    workdir = tempfile.mkdtemp(prefix=f"{workload}-", dir=base)
    try:
        runs = _experiment.run_plan(
            planned,
            store.experiment,
            store.path,
            workdir,
            timeout,
            store.binary,
            done=lambda: all(len(results_of(j)) >= j.ranks for j in jobs),
            linger=linger,
        )
    except _experiment.ExperimentError as e:
        raise StallsError(f"{workload}: {e}") from e
    by_name = {r.name: r for r in runs if r.workload == workload}
    feeder = by_name.get(_experiment.DATA_RUN)
    done: dict[str, list[dict]] = {}
    for j in jobs:
        r = by_name.get(j.label)
        if r is not None and r.figures:  # measured, however it ended
            done[j.label] = [dict(r.figures, mode=j.mode)]
            continue
        ran = r is not None and r.exit_code not in (None, 0)
        if not ran and producer is not None and feeder is not None and feeder.status == "FAILED":
            raise _failure(producer, feeder.message or "the shared producer failed", feeder.output)
        if r is None:
            raise _failure(j, f"`batchcast run` did not run it (see {store.path})", "")
        raise _failure(j, _why_no_result(j, r, store, timeout), r.output)
    return done


def _why_no_result(job: Job, run: _experiment.Run, store: Store, timeout: float) -> str:
    """Why the run of ``job`` holds no result."""
    if run.status == "TIMEOUT":
        return f"no result after {timeout:.0f} s (the timeout; raise it with --timeout)"
    if run.status == "FINISHED" and results_of(job):
        return (
            f"its result is not in the run store {store.path}: the runner"
            f" ({store.binary or _experiment.find_binary()}) did not record the figures the"
            f" script wrote to ${_experiment.FIGURES_ENV} (is it older than this batchcast?)"
        )
    if run.exit_code is not None:
        return f"the script exited with status {run.exit_code} before its measured steps ended"
    return run.message or f"its run is {run.status} without figures"
