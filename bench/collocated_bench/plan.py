"""What runs, in which order, with how many workers, within --budget.

A run is one (model, mode, N) cell run once; --repeats R runs every cell R
times. Each of --model, --trainers and --modes may be split into priority
groups with `/`; a cell's group is the lowest of its three (the largest
index). Runs go group by group, every repeat of a group before the next
group, and inside a repeat model by model, N by N, the modes rotated by one
place each repeat so that no mode always runs first or last.
"""

from __future__ import annotations

import os
import time
from statistics import mean
from typing import NamedTuple

from .options import SHARED_MODES, TENSORSOCKET_MODES


class Run(NamedTuple):
    model: str
    mode: str
    n: int
    repeat: int
    group: int


def plan_runs(args) -> list[Run]:
    """Every run, in the order they are made."""
    g = args.groups

    def group(model: str, mode: str, n: int) -> int:
        return max(g["model"][model], g["mode"][mode], g["n"][n])

    runs = []
    for level in sorted({group(m, mode, n) for m in args.models for mode in args.modes for n in args.trainers}):
        for r in range(args.repeats):
            for model in args.models:
                for n in args.trainers:
                    modes = [m for m in args.modes if group(model, m, n) == level]
                    k = r % len(modes) if modes else 0
                    runs += [Run(model, m, n, r, level) for m in modes[k:] + modes[:k]]
    return runs


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers_for(args, mode: str, n: int) -> int:
    """Loading workers of one pipeline: --workers, or with auto the usable
    cores split fairly between the N pipelines of `independent` (at least one
    each) and all of them for the one pipeline of a shared mode."""
    if args.workers != "auto":
        return args.workers
    cores = usable_cores()
    if mode in SHARED_MODES or mode in TENSORSOCKET_MODES:
        return cores
    return max(1, cores // n)


class Budget:
    """--budget: the run's time limit, counted from `start` (time.monotonic()).
    A run is made only if the time it is estimated to take still fits; the
    estimate is the last duration of the same cell, else the mean of cells
    with the same mode and N, else the mean of every run so far (the first
    run always starts). The first run that does not fit ends the run: it and
    every later one are skipped."""

    def __init__(self, seconds: float | None, start: float):
        self.seconds, self.start = seconds, start
        self.durations: dict[Run, float] = {}
        self.exhausted: str | None = None

    def left(self) -> float | None:
        return None if self.seconds is None else self.seconds - (time.monotonic() - self.start)

    def estimate(self, run: Run) -> float | None:
        same = [d for r, d in self.durations.items() if r[:3] == run[:3]]
        alike = [d for r, d in self.durations.items() if (r.mode, r.n) == (run.mode, run.n)]
        every = list(self.durations.values())
        for values in (same[-1:], alike, every):
            if values:
                return mean(values)
        return None

    def why_not(self, run: Run) -> str | None:
        """None if `run` may start, else why it is skipped."""
        if self.exhausted is None and self.seconds is not None:
            left, need = self.left(), self.estimate(run)
            if left <= 0 or (need is not None and need > left):
                self.exhausted = (f"--budget {self.seconds:g} s: "
                                  + (f"~{need:.0f} s needed, {max(left, 0):.0f} s left" if need is not None
                                     else "no time left"))
        return self.exhausted

    def record(self, run: Run, seconds: float) -> None:
        self.durations[run] = seconds
