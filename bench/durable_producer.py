"""What a durable Python producer costs: batches/s of `Producer.run()` with
`durable=True` against `durable=False`, alternating, for a DataLoader over a
map-style dataset (the sampler kind) and a loader with state_dict() (the
stateful kind, whose state is noted after every batch), with no consumer
attached (`wait_for_consumers=False`), so that the producer's own cost is
measured. Prints one JSON line per kind with the median rates and their
ratio.

    PYTHONPATH=python python bench/durable_producer.py --batches 4000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

import batchcast


class Stateful:
    """`batches` batches of `rows` rows, with state_dict()/load_state_dict()
    holding the position and a generator's state (a 5 KB tensor, as
    torchdata's shuffling loader has)."""

    def __init__(self, batches: int, rows: int) -> None:
        self.batches, self.rows, self.pos = batches, rows, 0
        self.data = torch.zeros(rows, 64)
        self.rng = torch.Generator().manual_seed(0).get_state()

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos, "generator": self.rng}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.rng = state["pos"], state["generator"]

    def __iter__(self) -> Iterator[torch.Tensor]:
        while self.pos < self.batches:
            self.pos += 1
            yield self.data
        self.pos = 0


def loader(kind: str, batches: int, rows: int) -> Any:
    if kind == "stateful":
        return Stateful(batches, rows)
    return DataLoader(torch.zeros(batches * rows, 64), batch_size=rows, shuffle=True)


def rate(kind: str, durable: bool, batches: int, rows: int, name: str) -> float:
    p = batchcast.Producer(
        loader(kind, batches, rows),
        name,
        durable=durable,
        seed=1,
        wait_for_consumers=False,
        fresh=durable,
    )
    t0 = time.perf_counter()
    p.run(epochs=1)
    return batches / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=4000)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("BATCHCAST_DIR", tempfile.mkdtemp(prefix="bcd-"))
    for kind in ("sampler", "stateful"):
        on, off = [], []
        for i in range(args.repeat):
            off.append(rate(kind, False, args.batches, args.rows, f"bench-{kind}-{i}"))
            on.append(rate(kind, True, args.batches, args.rows, f"bench-{kind}-{i}"))
        line = {
            "kind": kind,
            "batches_per_s_off": round(statistics.median(off)),
            "batches_per_s_on": round(statistics.median(on)),
            "ratio_on_off": round(statistics.median(on) / statistics.median(off), 3),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
