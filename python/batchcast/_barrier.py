"""A start barrier for the jobs of one workload of ``batchcast run``.

Jobs measured together (the collocated benchmark's trainers) set up at
their own pace and must start their measured part at one instant. The
runner starts them together; this barrier holds each job until all of
them have arrived, in a directory every job is given (``DIR:N``):

- a job makes its own FIFO ``wait-<pid>`` and opens it for reading and
  writing (so it never reads end-of-file), then, under an exclusive
  ``flock`` of ``lock``, adds itself to the count in ``count``;
- the job that makes the count N writes one byte into every other job's
  FIFO (all of them exist: each was opened before its count) and goes on;
- the others block in ``read`` until that byte arrives (or the deadline,
  when a job died before arriving).

No polling, no process in the middle: the plan runs with ``batchcast run``
alone. Whoever watches the jobs sees the barrier open by the file ``open``.
"""

from __future__ import annotations

import fcntl
import os
import select
import time

__all__ = ["BarrierError", "arrive", "arrived", "is_open", "make_barrier"]

#: Bytes of the ``count`` file read at most (it holds one decimal number).
_COUNT_BYTES = 32


class BarrierError(RuntimeError):
    """The barrier did not open: a job did not arrive in time."""


def make_barrier(where: str, jobs: int) -> str:
    """A fresh barrier for ``jobs`` jobs in the empty directory ``where``;
    returns the spec (``DIR:N``) the jobs pass to :func:`arrive`."""
    if jobs < 1:
        raise ValueError(f"a barrier needs at least one job, not {jobs}")
    os.makedirs(where, mode=0o700, exist_ok=True)
    return f"{where}:{jobs}"


def _parse(spec: str) -> tuple[str, int]:
    where, _, count = spec.rpartition(":")
    if not where or not count.isdigit() or int(count) < 1:
        raise BarrierError(f"barrier {spec!r} is not DIR:N (N >= 1)")
    return where, int(count)


def is_open(spec: str) -> bool:
    """Whether every job of the barrier has arrived."""
    return os.path.exists(os.path.join(_parse(spec)[0], "open"))


def arrived(spec: str) -> int:
    """How many jobs have arrived so far."""
    try:
        with open(os.path.join(_parse(spec)[0], "count"), "rb") as f:
            text = f.read(_COUNT_BYTES).strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def arrive(spec: str, timeout: float) -> None:
    """Waits at the barrier ``spec`` until all its jobs have arrived;
    raises :class:`BarrierError` after ``timeout`` seconds without."""
    where, jobs = _parse(spec)
    fifo = os.path.join(where, f"wait-{os.getpid()}")
    os.mkfifo(fifo, 0o600)
    wake = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        if _count_in(where, jobs):
            return
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BarrierError(
                    f"only {arrived(spec)} of {jobs} jobs reached the start barrier {where}"
                    f" within {timeout:g} s (a job failed or is still setting up)"
                )
            ready, _, _ = select.select([wake], [], [], left)
            if ready and os.read(wake, 1):
                return
    finally:
        os.close(wake)


def _count_in(where: str, jobs: int) -> bool:
    """Adds this job to the count; the last job opens the barrier (and
    returns True)."""
    fd = os.open(os.path.join(where, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = os.path.join(where, "count")
        try:
            with open(path, "rb") as f:
                text = f.read(_COUNT_BYTES).strip()
            count = int(text) if text.isdigit() else 0
        except FileNotFoundError:
            count = 0
        count += 1
        tmp = f"{path}.tmp{os.getpid()}"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(str(count))
        os.replace(tmp, path)
        if count < jobs:
            return False
        for name in os.listdir(where):
            if name.startswith("wait-") and name != f"wait-{os.getpid()}":
                _wake(os.path.join(where, name))
        os.close(os.open(os.path.join(where, "open"), os.O_WRONLY | os.O_CREAT, 0o600))
        return True
    finally:
        os.close(fd)


def _wake(fifo: str) -> None:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # its job gave up (timed out) and closed it
        return
    try:
        os.write(fd, b"g")
    finally:
        os.close(fd)
