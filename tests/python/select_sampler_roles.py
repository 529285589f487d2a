"""Processes for test_select_sampler.py (``python select_sampler_roles.py
ROLE JSON``): a producer over DataLoader(dataset, sampler=SelectSampler)
that counts its dataset's __getitem__ calls, and consumers that report the
ids they received."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List

from helpers import say


class CountingDataset:
    """Sample i is {"id": i, "x": float(i)}; counts the calls per sample."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = [0] * n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Dict[str, Any]:
        self.calls[i] += 1
        return {"id": i, "x": float(i)}


def produce(o: Dict[str, Any]) -> None:
    from torch.utils.data import DataLoader

    import batchcast

    ds = CountingDataset(o["n"])
    labels = [c for c, size in enumerate(o["sizes"]) for _ in range(size)]
    sampler = batchcast.SelectSampler(o["spec"], labels=labels, seed=o["seed"])
    loader = DataLoader(ds, batch_size=o["batch_size"], sampler=sampler)
    p = batchcast.Producer(loader, o["name"], wait_for_consumers=o["consumers"])
    say("ready")
    p.run(epochs=o["epochs"])
    say("calls", json.dumps(ds.calls))


def consume(o: Dict[str, Any]) -> None:
    import batchcast

    c = batchcast.Consumer(o["name"], connect_timeout=30)
    epochs: List[List[int]] = []
    for _ in range(o["epochs"]):
        assert len(c) == -(-o["count"] // o["batch_size"]), len(c)  # batches of the selection
        ids: List[int] = []
        for batch in c:
            ids.extend(int(i) for i in batch["id"].tolist())
        epochs.append(ids)
    c.close()
    say("got", json.dumps(epochs))


if __name__ == "__main__":
    globals()[sys.argv[1]](json.loads(sys.argv[2]))
