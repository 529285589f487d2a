"""Processes for test_durable_py.py (``python durable_py_roles.py ROLE JSON``):
a durable Python producer over a map-style dataset (through a shuffling
DataLoader, a stateful loader of its own, torchdata's StatefulDataLoader,
or an iterable DataLoader) that SIGKILLs itself after loading a number of
samples, and consumers that log (epoch, index) of every sample."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, Dict, Iterator, List

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

import batchcast


class Items(Dataset):
    """Item i is a tensor whose values encode i; loading the `kill_at`-th
    item in this process SIGKILLs it."""

    def __init__(self, n: int, kill_at: int | None) -> None:
        self.n = n
        self.kill_at = kill_at
        self.loaded = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Dict[str, Any]:
        self.loaded += 1
        if self.loaded == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"x": torch.full((4,), float(i)), "index": torch.tensor(i)}


class Stream(IterableDataset):
    """The same items, in order, through an iterable dataset."""

    def __init__(self, items: Items) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return (self.items[i] for i in range(len(self.items)))


class StatefulLoader:
    """A loader offering the Stateful protocol: each epoch's order is a
    permutation drawn from a generator whose state (a uint8 tensor) is in
    its state_dict, with the epoch and the batches yielded."""

    def __init__(self, items: Items, batch_size: int, seed: int) -> None:
        self.items = items
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.pos = 0
        self.rng = torch.Generator().manual_seed(seed).get_state()

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos, "generator": self.rng}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        assert isinstance(state["generator"], torch.Tensor)
        self.epoch, self.pos, self.rng = state["epoch"], state["pos"], state["generator"]

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        g = torch.Generator()
        g.set_state(self.rng)
        order = torch.randperm(len(self.items), generator=g).tolist()
        starts = range(0, len(order), self.batch_size)
        for b in starts[self.pos:]:
            rows = [self.items[i] for i in order[b:b + self.batch_size]]
            self.pos += 1
            yield {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
        self.epoch += 1
        self.pos = 0
        self.rng = g.get_state()


def producer(o: Dict[str, Any]) -> None:
    items = Items(o["samples"], o.get("kill_at"))
    kind = o["kind"]
    loader: Any
    if kind == "sampler":
        loader = DataLoader(items, batch_size=o["batch"], shuffle=True)
    elif kind == "stateful":
        loader = StatefulLoader(items, o["batch"], o["seed"])
    elif kind == "torchdata":
        from torchdata.stateful_dataloader import StatefulDataLoader

        loader = StatefulDataLoader(items, batch_size=o["batch"], shuffle=True)
    else:
        loader = DataLoader(Stream(items), batch_size=o["batch"])
    p = batchcast.Producer(loader, o["name"], durable=True, seed=o["seed"], window=4,
                           wait_for_consumers=o["consumers"], rejoin_timeout=30,
                           samples_per_epoch=o["samples"], idle_timeout=60)
    print("started", flush=True)
    p.run(epochs=o["epochs"])


def consumer(o: Dict[str, Any]) -> None:
    """Reads `epochs` epochs, sleeping `step_ms` per batch, then writes
    [[epoch, index], ...] to `log`."""
    c = batchcast.Consumer(o["name"], connect_timeout=30, reconnect_timeout=60)
    log: List[List[int]] = []
    for _ in range(o["epochs"]):
        for batch in c:
            assert c.epoch is not None
            log.extend([c.epoch, int(i)] for i in batch["index"].tolist())
            time.sleep(o["step_ms"] / 1000)
    c.close()
    with open(o["log"], "w") as f:
        json.dump(log, f)
    print("done", flush=True)


if __name__ == "__main__":
    {"producer": producer, "consumer": consumer}[sys.argv[1]](json.loads(sys.argv[2]))
