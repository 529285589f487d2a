#!/usr/bin/env python3
"""The Python consumer's own cost per batch on the CPU: a producer thread
publishes small batches as fast as it can and a ``batchcast.Consumer``
reads them; the figure is microseconds per batch of the reading loop.

    python bench/consumer_path.py                        # this tree's package
    python bench/consumer_path.py --compare OLD_DIR      # against another copy of python/batchcast

With ``--compare``, each round runs both packages in fresh processes, in
alternating order, and the medians and their ratio are printed (the
machine is noisy: compare within one run). OLD_DIR is a folder holding a
``batchcast`` package; give it this build's native module, e.g.
``git archive REV python/batchcast | tar -x -C /tmp/old`` then copy
``python/batchcast/_native*.so`` into /tmp/old/python/batchcast.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time


def one_round(batches: int, batch: int) -> float:
    import numpy as np

    import batchcast

    rows = np.arange(batch, dtype=np.int64)

    class Loader:
        def __len__(self) -> int:
            return batches

        def __iter__(self):
            for _ in range(batches):
                yield {"id": rows}

    name = f"consumer-path-{os.getpid()}"
    producer = batchcast.Producer(Loader(), name, batch_size=batch, samples_per_epoch=batches * batch)
    thread = threading.Thread(target=producer.run, kwargs={"epochs": 1}, daemon=True)
    thread.start()
    with batchcast.Consumer(name, connect_timeout=30) as c:
        it = iter(c)
        next(it)
        t0 = time.perf_counter()
        n = sum(1 for _ in it)
        elapsed = time.perf_counter() - t0
    thread.join(30)
    return elapsed / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compare", metavar="OLD_DIR", help="another copy of the package to compare with")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one_round(a.batches, a.batch)))
        return
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
    trees = {"this": os.path.abspath(here)}
    if a.compare:
        trees["other"] = os.path.abspath(a.compare)
    figures = {k: [] for k in trees}
    for r in range(a.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(list(trees)))
        for key in order:
            env = dict(os.environ, PYTHONPATH=trees[key], BATCHCAST_DIR=os.environ.get("BATCHCAST_DIR", "/tmp"))
            out = subprocess.run([sys.executable, __file__, "--one", "--batches", str(a.batches),
                                  "--batch", str(a.batch)], env=env, capture_output=True, text=True, check=True)
            figures[key].append(float(out.stdout.strip().splitlines()[-1]))
    medians = {k: statistics.median(v) for k, v in figures.items()}
    for k, v in figures.items():
        print(f"{k:6} {trees[k]}: {medians[k]:.1f} us per batch (rounds: {', '.join(f'{x:.1f}' for x in v)})")
    if "other" in medians:
        print(f"this / other: {medians['this'] / medians['other']:.3f}")


if __name__ == "__main__":
    main()
