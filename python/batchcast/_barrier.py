"""A start barrier for jobs measured together.

Jobs measured together (the collocated benchmark's trainers, the copies of
``batchcast stalls --validate``) set up at their own pace and must start
their measured part at one instant. This barrier holds each job until all
N have arrived, in a directory of this user that no one else can open
(``DIR:N``, made by :func:`make_barrier`):

- a job joins (:func:`join`, as early as it can; :func:`arrive` joins if
  it has not) by making its FIFO ``wait-<pid>``, opening it for reading
  and writing (so it never reads end-of-file) before the name appears, and
  holding it open until it leaves the barrier; a job that ends (even by
  SIGKILL) leaves its FIFO with no reader, which the others see;
- a job arrives under an exclusive ``flock`` of ``lock``: it adds itself
  to ``count``; the job that makes it N checks that every job that joined
  is alive, creates ``open`` and writes ``g`` into every FIFO;
- the others wait in ``poll`` on their own FIFO and on a write end of each
  other job's FIFO: ``g`` lets them pass; a write end's error means that
  job ended before the barrier opened, so the barrier breaks: ``broken``
  holds why, every FIFO gets ``b``, and every job, waiting or arriving
  later, raises :class:`BarrierError` with that reason. A timeout breaks
  it the same way. A job that joins writes ``m`` into the others' FIFOs
  so that the waiting ones watch it too.

No polling, no process in the middle. Whoever watches the jobs sees the
barrier open by the file ``open`` (:func:`is_open`). Each process is one
job of a barrier: threads of one process that arrive wait together.
A job that ends before it joins is seen only at the timeout.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import select
import stat
import threading
import time

from ._files import write_whole

__all__ = ["BarrierError", "arrive", "arrived", "is_open", "join", "make_barrier"]

#: Bytes of the ``count`` file read at most (it holds one decimal number).
_COUNT_BYTES = 32
#: Bytes of the ``broken`` file (the reason) read at most.
_REASON_BYTES = 4096
# What one job writes into another's FIFO.
_GO, _BROKEN, _ROSTER = b"g", b"b", b"m"
_FIFO_PREFIX = "wait-"


class BarrierError(RuntimeError):
    """The barrier did not open: a job ended before it opened, or did not
    arrive in time."""


# The FIFO (both ends) of each barrier directory this process has joined.
_joined: dict[str, int] = {}
_lock = threading.Lock()


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) is no job: it closes its copies
    of the FIFOs, so that its parent's end is seen."""
    global _lock
    _lock = threading.Lock()
    for fd in _joined.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _joined.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def make_barrier(where: str, jobs: int) -> str:
    """A fresh barrier for ``jobs`` jobs in ``where`` (made 0700, or an
    empty directory of this user that no one else can open); returns the
    spec (``DIR:N``) the jobs pass to :func:`arrive`."""
    if jobs < 1:
        raise ValueError(f"a barrier needs at least one job, not {jobs}")
    os.makedirs(where, mode=0o700, exist_ok=True)
    _check_dir(where)
    if os.listdir(where):
        raise BarrierError(f"{where} is not empty: a barrier needs a fresh directory")
    return f"{where}:{jobs}"


def _parse(spec: str) -> tuple[str, int]:
    where, _, count = spec.rpartition(":")
    if not where or not count.isdigit() or int(count) < 1:
        raise BarrierError(f"barrier {spec!r} is not DIR:N (N >= 1)")
    return where, int(count)


def _check_dir(where: str) -> None:
    try:
        st = os.lstat(where)
    except OSError as e:
        raise BarrierError(f"no barrier directory {where}: {e.strerror}") from e
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise BarrierError(
            f"{where} must be a directory of this user that no one else can open (mode 0700,"
            f" as make_barrier makes it); it is mode {stat.filemode(st.st_mode)}, uid {st.st_uid}"
        )


def is_open(spec: str) -> bool:
    """Whether every job of the barrier has arrived."""
    return os.path.exists(os.path.join(_parse(spec)[0], "open"))


def arrived(spec: str) -> int:
    """How many jobs have arrived so far."""
    return _read_count(_parse(spec)[0])


def _read_count(where: str) -> int:
    try:
        with open(os.path.join(where, "count"), "rb") as f:
            text = f.read(_COUNT_BYTES).strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def join(spec: str) -> None:
    """Makes this process a job of the barrier before it arrives, so that
    the jobs waiting there see it if it ends first (each process is one
    job; joining twice is joining once)."""
    where, _ = _parse(spec)
    with _lock:
        _join(where)


def _join(where: str) -> int:
    fd = _joined.get(where)
    if fd is not None:
        return fd
    _check_dir(where)
    name = os.path.join(where, f"{_FIFO_PREFIX}{os.getpid()}")
    fresh = os.path.join(where, f"new-{os.getpid()}")
    try:
        os.unlink(fresh)  # of an earlier process with this pid
    except FileNotFoundError:
        pass
    os.mkfifo(fresh, 0o600)
    fd = os.open(fresh, os.O_RDWR | os.O_NONBLOCK)
    os.replace(fresh, name)  # its name appears held: no one sees it without a reader
    _joined[where] = fd
    for other in _fifos(where):
        _tell(other, _ROSTER)
    return fd


def _fifos(where: str) -> list[str]:
    """The other jobs' FIFOs."""
    mine = f"{_FIFO_PREFIX}{os.getpid()}"
    return [
        os.path.join(where, n)
        for n in sorted(os.listdir(where))
        if n.startswith(_FIFO_PREFIX) and n != mine
    ]


def _tell(fifo: str, what: bytes) -> None:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # its job has ended or left
        return
    try:
        os.write(fd, what)
    except OSError:  # full of bytes it has not read yet: it reads the state anyway
        pass
    finally:
        os.close(fd)


def _leave(where: str) -> None:
    fd = _joined.pop(where, None)
    if fd is None:
        return
    try:
        os.unlink(os.path.join(where, f"{_FIFO_PREFIX}{os.getpid()}"))
    except OSError:
        pass
    os.close(fd)


def arrive(spec: str, timeout: float) -> None:
    """Waits at the barrier ``spec`` until all its jobs have arrived;
    raises :class:`BarrierError` as soon as a job that joined has ended
    before that, after ``timeout`` seconds without, or at once when the
    barrier broke before this job arrived."""
    where, jobs = _parse(spec)
    with _lock:
        if os.path.exists(os.path.join(where, "open")):
            return
        own = _join(where)
        try:
            if not _count_in(where, jobs):
                _wait(where, jobs, own, timeout)
        finally:
            _leave(where)


class _Flock:
    """The exclusive ``flock`` of the barrier's ``lock`` file."""

    def __init__(self, where: str) -> None:
        self._path = os.path.join(where, "lock")
        self._fd = -1

    def __enter__(self) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(self._path, flags, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        os.close(self._fd)


def _broken_reason(where: str) -> str | None:
    try:
        with open(os.path.join(where, "broken"), "rb") as f:
            return f.read(_REASON_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        return None


def _dead(where: str) -> str | None:
    """The FIFO of a job that joined and has ended, if one has."""
    for fifo in _fifos(where):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as e:
            if e.errno == errno.ENXIO:  # no reader: its job has ended
                return fifo
    return None


def _ended(fifo: str) -> str:
    pid = os.path.basename(fifo)[len(_FIFO_PREFIX) :]
    return (
        f"a job (pid {pid}) ended before the start barrier {os.path.dirname(fifo)} opened"
        " (see its own output for why)"
    )


def _count_in(where: str, jobs: int) -> bool:
    """Adds this job to the count; the last job opens the barrier (and
    returns True). Raises where the barrier is broken."""
    with _Flock(where):
        if os.path.exists(os.path.join(where, "open")):
            return True
        reason = _broken_reason(where)
        if reason is not None:
            raise BarrierError(reason)
        count = _read_count(where) + 1
        write_whole(os.path.join(where, "count"), str(count))
        if count < jobs:
            return False
        dead = _dead(where)
        if dead is not None:
            _break(where, _ended(dead))
        os.close(os.open(os.path.join(where, "open"), os.O_WRONLY | os.O_CREAT, 0o600))
        for fifo in _fifos(where):
            _tell(fifo, _GO)
        return True


def _break(where: str, reason: str) -> None:
    """Breaks the barrier for every job (the lock held); raises."""
    write_whole(os.path.join(where, "broken"), reason)
    for fifo in _fifos(where):
        _tell(fifo, _BROKEN)
    raise BarrierError(reason)


def _settle(where: str, reason: str) -> None:
    """Returns if the barrier has opened after all, else breaks it (or
    raises the reason it already broke for)."""
    with _Flock(where):
        if os.path.exists(os.path.join(where, "open")):
            return
        earlier = _broken_reason(where)
        if earlier is not None:
            raise BarrierError(earlier)
        _break(where, reason)


def _wait(where: str, jobs: int, own: int, timeout: float) -> None:
    """Waits for ``g`` on this job's FIFO, watching the others' FIFOs."""
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(own, select.POLLIN)
    watched: dict[int, str] = {}
    try:
        while True:
            for fifo in _fifos(where):
                if fifo in watched.values():
                    continue
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as e:
                    if e.errno == errno.ENXIO:
                        _settle(where, _ended(fifo))
                        return
                    continue  # it left the barrier
                watched[fd] = fifo
                poller.register(fd, 0)  # errors only: its reader has gone
            if _await_news(where, jobs, own, watched, poller, deadline, timeout):
                return
    finally:
        for fd in watched:
            os.close(fd)


def _await_news(
    where: str,
    jobs: int,
    own: int,
    watched: dict[int, str],
    poller: select.poll,
    deadline: float,
    timeout: float,
) -> bool:
    """Waits for what the others say; True: passed, False: look for new
    jobs; raises where the barrier broke."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            _settle(
                where,
                f"only {_read_count(where)} of {jobs} jobs reached the start barrier {where}"
                f" within {timeout:g} s (a job failed or is still setting up)",
            )
            return True
        events = dict(poller.poll(max(1, math.ceil(left * 1000))))
        if own in events:
            try:
                news = os.read(own, 4096)
            except BlockingIOError:
                news = b""
            if _GO in news:
                return True
            if _BROKEN in news:
                raise BarrierError(_broken_reason(where) or f"the start barrier {where} broke")
            if _ROSTER in news:
                return False
        for fd in events:
            if fd != own:
                _settle(where, _ended(watched[fd]))
                return True
