"""The contract between ``batchcast stalls`` (the runner) and a marked script.

The runner starts the script with these environment variables; the script's
:func:`batchcast.stalls.mark` reads them. Results travel back as JSON files
in the result directory (never pickle).
"""

import os
from dataclasses import dataclass
from typing import Optional

MODE = "BATCHCAST_STALLS_MODE"
OUT = "BATCHCAST_STALLS_OUT"
WARMUP = "BATCHCAST_STALLS_WARMUP"
STEPS = "BATCHCAST_STALLS_STEPS"
SECONDS = "BATCHCAST_STALLS_SECONDS"
#: The shared producer's name; else ``BATCHCAST_NAME``, which ``batchcast
#: run`` gives a workload's producer and its jobs.
SHARED = "BATCHCAST_STALLS_SHARED"
#: ``DIR:N``: N copies run together; each waits after its warm-up until all
#: N have warmed up, so that their measured windows overlap.
BARRIER = "BATCHCAST_STALLS_BARRIER"
BARRIER_TIMEOUT_S = 120.0
#: The window (batches in flight) of the shared producer of ``--validate``:
#: batchcast.Producer's default.
SHARED_WINDOW = 8

#: Modes a script can be run in. ``loader`` iterates the loader with no
#: training step, as a shared producer does (the producer's own cost, for
#: ``--jobs``). ``producer``/``consumer`` are the shared pipeline of
#: ``--validate``: one copy serves its loader, the others read it.
MODES = ("synthetic", "cold", "warm", "loader", "producer", "consumer")

MARKED_FILE = "marked-{pid}.json"
RESULT_FILE = "result-{rank}.json"
OPENED_FILE = "opened.txt"


@dataclass(frozen=True)
class Config:
    mode: str
    out: str
    warmup: int
    steps: Optional[int]
    seconds: Optional[float]
    shared: Optional[str]
    barrier: Optional[str]

    @staticmethod
    def from_env() -> Optional["Config"]:
        mode = os.environ.get(MODE)
        if not mode:
            return None
        if mode not in MODES:
            raise ValueError(f"{MODE}={mode!r}: expected one of {', '.join(MODES)}")
        out = os.environ.get(OUT)
        if not out or not os.path.isdir(out):
            raise ValueError(f"{OUT} must name an existing directory (got {out!r})")
        steps = os.environ.get(STEPS)
        seconds = os.environ.get(SECONDS)
        return Config(
            mode=mode,
            out=out,
            warmup=int(os.environ.get(WARMUP, "5")),
            steps=int(steps) if steps else None,
            seconds=float(seconds) if seconds else None,
            shared=os.environ.get(SHARED) or os.environ.get("BATCHCAST_NAME") or None,
            barrier=os.environ.get(BARRIER) or None,
        )


def rank() -> int:
    """This process's rank under torchrun (0 otherwise)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0
