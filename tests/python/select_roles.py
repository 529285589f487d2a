"""Processes for test_select.py (``python select_roles.py ROLE JSON``): a
producer that counts how often it made each sample, and trainers that each
choose their own subset of its batches with batchcast.select."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, Iterator, List

import numpy as np

from helpers import IdLoader, say

CLASSES = 4


class CountingLoader(IdLoader):
    """An IdLoader that counts the batches of each sample it makes."""

    def __init__(self, n: int, batch_size: int) -> None:
        super().__init__(n, batch_size, width=8)
        self.made = np.zeros(n, dtype=np.int64)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for batch in super().__iter__():
            self.made[batch["id"]] += 1
            yield batch


def produce_counted(o: Dict[str, Any]) -> None:
    import batchcast

    loader = CountingLoader(o["n"], o["batch_size"])
    p = batchcast.Producer(loader, o["name"], wait_for_consumers=o["consumers"])
    say("ready")
    p.run(epochs=1)
    say("made", json.dumps(loader.made.tolist()))


def consume_selecting(o: Dict[str, Any]) -> None:
    """A trainer whose model is seeded by `seed`: keeps `ratio` of each
    batch by loss, trains on the assembled batches, and reports the ids it
    received and the ids it trained on, in order."""
    import torch
    import torch.nn.functional as F

    import batchcast
    from batchcast.select import Downsampler

    torch.manual_seed(o["seed"])
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    c = batchcast.Consumer(o["name"], batch_size=o["batch_size"], connect_timeout=30)
    select = Downsampler("loss", ratio=o["ratio"], batch_size=o["batch_size"])
    seen: List[int] = []
    trained: List[int] = []

    def step(batch: Any, w: Any) -> None:
        assert batch["name"] == [f"s{i}" for i in batch["id"].tolist()]  # leaves stay aligned
        trained.extend(batch["id"].tolist())
        per_sample = F.cross_entropy(model(batch["x"] / o["n"]), batch["id"] % CLASSES, reduction="none")
        loss = (per_sample * w).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for batch in c:
        seen.extend(batch["id"].tolist())
        with torch.no_grad():
            logits = model(batch["x"] / o["n"])
        for chosen, w in select(batch, logits, batch["id"] % CLASSES):
            step(chosen, w)
    rest = select.flush()
    if rest is not None:
        step(*rest)
    c.close()
    say("chose", json.dumps({"seen": seen, "trained": trained}))


if __name__ == "__main__":
    globals()[sys.argv[1]](json.loads(sys.argv[2]))
