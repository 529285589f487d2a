"""Per-step timing inside a marked script, written as JSON when done.

A step is the time between two batches handed to the training loop; its
data wait is the part spent blocked in the loader's ``next()``. The first
``warmup`` steps are not measured; after ``steps`` measured steps (or
``seconds``) the recorder writes its result and ends the script with
``SystemExit(0)``.
"""

import json
import os
import sys
import time
from typing import Any, Callable, Optional

from .._barrier import BarrierError, arrive, join
from .._figures import write_figures
from .._files import write_whole
from .._native import machine_busy_seconds, tree_cpu_seconds
from . import _protocol

#: At most this many steps past the warm-up are spent catching up with a
#: shared producer (three windows of the producer :mod:`_mark` starts).
DRAIN_MAX_STEPS = 3 * _protocol.SHARED_WINDOW


def batch_len(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first array leaf."""
    if hasattr(batch, "shape") and len(getattr(batch, "shape", ())) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict):
        for v in batch.values():
            return batch_len(v)
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        if hasattr(first, "shape") or isinstance(first, (list, tuple, dict)):
            return batch_len(first)
        return len(batch)
    return 1


class Recorder:
    """Times the steps of one marked loader.

    ``backlog``, for a reader of a shared producer, tells how many published
    batches wait unread: while the copies wait at the barrier the producer
    runs ahead by up to its window, and those batches would be read at the
    consumer's own speed, not the producer's. The measurement starts once the
    copy has caught up (a backlog of at most one batch) or after
    :data:`DRAIN_MAX_STEPS` steps past the warm-up, whichever comes first.
    """

    def __init__(
        self, config: "_protocol.Config", info: dict, backlog: Optional[Callable[[], int]] = None
    ) -> None:
        self._c = config
        self._info = info
        self._backlog = backlog
        self._seen = 0
        self._last: Optional[float] = None
        self._start: Optional[float] = None
        self._cpu0 = 0.0
        self._busy0 = 0.0
        self._waits: list[float] = []
        self._steps: list[float] = []
        self._samples = 0
        self._drained = 0
        self.epochs: list[int] = []
        if config.barrier:
            # A copy that ends while this one warms up is seen at the barrier.
            try:
                join(config.barrier)
            except (BarrierError, OSError) as e:
                _unsynchronised(e)

    def _begin(self, at: float) -> None:
        self._start = at
        self._cpu0 = tree_cpu_seconds()
        self._busy0 = machine_busy_seconds()

    def _settled(self) -> bool:
        """Past the warm-up, and (for a shared reader) caught up."""
        if self._seen < self._c.warmup:
            return False
        if self._backlog is None or self._drained >= DRAIN_MAX_STEPS:
            return True
        self._drained += 1
        return self._backlog() <= 1

    def step(self, asked: float, got: float, batch: Any) -> None:
        """One batch: ``next()`` was called at ``asked`` and returned at ``got``."""
        self._seen += 1
        if (
            self._start is None
            and self._c.warmup == 0
            and self._seen == 1
            and self._backlog is None
        ):
            self._begin(asked)  # no warm-up: the first step is measured too
        if self._start is not None:
            self._waits.append(got - asked)
            self._steps.append(got - (self._last if self._last is not None else asked))
            self._samples += batch_len(batch)
        self._last = got
        if self._seen == self._c.warmup and self._c.barrier:
            _wait_for_all(self._c.barrier)
            self._last = now()
        if self._start is None:
            if self._settled():
                # Measurement starts where the last unmeasured step ended.
                self._begin(self._last)
        elif self._done(got):
            self.finish(got)

    def _done(self, now: float) -> bool:
        if self._c.steps is not None and len(self._steps) >= self._c.steps:
            return True
        assert self._start is not None
        return self._c.seconds is not None and now - self._start >= self._c.seconds

    def finish(self, now: float) -> None:
        cpu = tree_cpu_seconds() - self._cpu0
        busy = machine_busy_seconds() - self._busy0
        assert self._start is not None
        elapsed = max(now - self._start, 1e-9)
        result = dict(self._info)
        result.update(
            mode=self._c.mode,
            rank=_protocol.rank(),
            world_size=int(os.environ.get("WORLD_SIZE", "1") or 1),
            steps=len(self._steps),
            samples=self._samples,
            seconds=elapsed,
            cpu_seconds=cpu,
            others_cpu_seconds=max(0.0, busy - cpu),
            waits=self._waits,
            step_times=self._steps,
            epochs=self.epochs,
            caught_up_after=self._drained,
        )
        path = os.path.join(self._c.out, _protocol.RESULT_FILE.format(rank=_protocol.rank()))
        write_whole(path, json.dumps(result))
        if _protocol.rank() == 0:
            write_figures(result)  # the run's figures, under `batchcast run`
        raise SystemExit(0)


def _wait_for_all(spec: str) -> None:
    """The barrier of ``BATCHCAST_STALLS_BARRIER=DIR:N``: waits until N
    copies have warmed up. Where it does not open (a copy ended, or took
    over :data:`_protocol.BARRIER_TIMEOUT_S`), this copy says so and is
    measured alone; the copy that ended is reported as failed."""
    try:
        arrive(spec, _protocol.BARRIER_TIMEOUT_S)
    except (BarrierError, OSError) as e:
        _unsynchronised(e)


def _unsynchronised(e: BaseException) -> None:
    print(f"batchcast stalls: {e}; this copy is measured without the others", file=sys.stderr)


def now() -> float:
    return time.perf_counter()
