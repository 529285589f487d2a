"""A GPU consumer's slot stays leased until its copy to the device has
completed (batchcast._device), shown on the CPU with a stand-in device whose
copies are asynchronous: each copy reads its source only when the test (or
a wait on its fence) completes it, as a DMA queued behind a GPU's work
reads the pinned arena only when its turn comes. A slot handed back early
would be overwritten by the producer first, and the completed copy would
hold the wrong samples."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest
import torch

import batchcast
from batchcast import _consumer, _device
from test_errors import run_in_thread


class StandInFence:
    def __init__(self, device: "StandInDevice", copies: List[Any]) -> None:
        self.device = device
        self.copies = copies
        self.completed = False
        self.waited = False

    def complete(self) -> None:
        if not self.completed:
            for src, dst in self.copies:
                dst.copy_(src)  # the "DMA": reads the source now
            self.copies = []  # a finished DMA holds no source
            self.completed = True

    def done(self) -> bool:
        return self.completed

    def wait(self) -> None:
        self.waited = True
        self.complete()


class StandInDevice:
    """A device whose copies stay queued until completed."""

    torch_device = torch.device("cpu")

    def __init__(self) -> None:
        self.queued: List[Any] = []
        self.fences: List[StandInFence] = []
        self.lock = threading.Lock()

    def copy(self, tensor: Any) -> Any:
        out = torch.empty_like(tensor)
        with self.lock:
            self.queued.append((tensor, out))
        return out

    def fence(self) -> StandInFence:
        with self.lock:
            fence = StandInFence(self, self.queued)
            self.queued = []
            self.fences.append(fence)
        return fence

    def complete_all(self) -> None:
        for f in list(self.fences):
            f.complete()


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandInDevice:
    dev = StandInDevice()
    real = _device.open_device
    monkeypatch.setattr(_consumer, "open_device", lambda d: dev if d == "stand-in" else real(d))
    return dev


class GatedLoader:
    """Batches of sample ids; ``asked[k]`` is set when batch k is asked
    for, which the producer does once it has published batch k - 1."""

    def __init__(self, n: int, batch_size: int) -> None:
        self.n, self.batch_size = n, batch_size
        self.asked = [threading.Event() for _ in range(len(self) + 1)]

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for k, start in enumerate(range(0, self.n, self.batch_size)):
            self.asked[k].set()
            ids = np.arange(start, min(start + self.batch_size, self.n), dtype=np.int64)
            yield {"id": ids, "x": np.repeat(ids.astype(np.float32)[:, None], 64, axis=1)}
        self.asked[-1].set()


def serve(loader: Any, name: str, epochs: int = 1, **options: Any) -> Any:
    """A producer of ``loader`` running in a thread of this process."""
    options.setdefault("idle_timeout", 30)
    producer = batchcast.Producer(loader, name, samples_per_epoch=loader.n, batch_size=loader.batch_size,
                                  **options)
    return producer, run_in_thread(producer, epochs)


def finish(thread: Any, idle: bool = False) -> None:
    """Joins a producer's thread; with ``idle``, it may end for want of
    consumers (its only one left mid-epoch)."""
    thread.join(30)
    errors = [e for e in thread.errors if not (idle and isinstance(e, batchcast.NoConsumers))]
    assert not thread.is_alive() and not errors, errors


def ids_of(batch: Dict[str, Any]) -> List[int]:
    assert torch.equal(batch["x"][:, 0], batch["id"].float()), "x and id disagree: a torn copy"
    return batch["id"].tolist()


def test_a_slot_is_not_reused_while_its_copy_is_pending(bc_dir, stand_in):
    loader = GatedLoader(n=64, batch_size=8)
    producer, thread = serve(loader, "pending", window=2, max_lag=0)
    with batchcast.Consumer("pending", device="stand-in", connect_timeout=30) as c:
        it = iter(c)
        b0, b1 = next(it), next(it)
        assert c.stats()["copies_in_flight"] == 2
        # Both slots hold a batch whose copy has not run: the producer,
        # which has loaded batch 2, cannot publish it (and so never asks
        # for batch 3). With the lease handed back at .to(), it would
        # overwrite slot 0 and b0's copy would read batch 2.
        assert not loader.asked[3].wait(0.5), "the producer reused a slot whose copy was pending"
        stand_in.fences[0].complete()
        assert c.stats()["copies_in_flight"] == 1  # collected: slot 0 goes back
        assert loader.asked[3].wait(30), "the slot of a completed copy was not handed back"
        assert ids_of(b0) == list(range(0, 8))
        stand_in.fences[1].complete()
        assert ids_of(b1) == list(range(8, 16))
        rest = []
        for b in it:
            stand_in.complete_all()  # a device tensor is read after its copy, in stream order
            rest += ids_of(b)
        assert rest == list(range(16, 64))
    finish(thread)


@pytest.mark.parametrize("batch_size", [8, 5, 12], ids=["same", "divides-not", "spans-slots"])
def test_every_batch_is_exact_when_copies_complete_late(bc_dir, stand_in, batch_size):
    """Many small steps queued ahead: copies complete only when the
    consumer must wait, as on a GPU several steps behind the loop."""
    loader = GatedLoader(n=203, batch_size=8)
    producer, thread = serve(loader, "late", epochs=2, window=3, max_lag=0)
    with batchcast.Consumer("late", batch_size=batch_size, device="stand-in", connect_timeout=30) as c:
        for _ in range(2):
            kept = list(c)  # the loop holds every device batch, as a queue of steps would
            stand_in.complete_all()
            assert [i for b in kept for i in ids_of(b)] == list(range(203))
            assert {len(b["id"]) for b in kept[:-1]} == {batch_size}
    finish(thread)


def test_an_evicted_consumer_keeps_the_slots_its_pending_copies_read(bc_dir, stand_in):
    """A slot read by a pending copy counts as held: the consumer that
    stopped with two copies in flight falls behind, the other goes on
    through the free slots and the lag slots, the stalled one is evicted,
    and the two slots its copies read stay untouched until they complete."""
    loader = GatedLoader(n=160, batch_size=8)
    producer, thread = serve(loader, "evict", epochs=2, window=4, max_lag="2batches", lag_policy="evict",
                             stall_timeout=0.2, wait_for_consumers=2, idle_timeout=0.5)
    # Attached together: the producer welcomes them once both are there.
    with ThreadPoolExecutor(2) as pool:
        slow_f = pool.submit(batchcast.Consumer, "evict", device="stand-in", connect_timeout=30)
        fast_f = pool.submit(batchcast.Consumer, "evict", connect_timeout=30)
        slow, fast = slow_f.result(), fast_f.result()
    it = iter(slow)
    held = [next(it), next(it)]  # copies pending, never completed while the other reads
    assert [i for b in fast for i in b["id"].tolist()] == list(range(160))
    status = producer.status()
    assert status["evictions"] == 1
    assert [c["state"] for c in status["consumers"] if c["evictions"]] == ["evicted"]
    stand_in.complete_all()
    assert [ids_of(b) for b in held] == [list(range(0, 8)), list(range(8, 16))]
    with pytest.raises(batchcast.FellBehind):
        next(it)
    fast.close()
    slow.close()
    finish(thread, idle=True)


def test_close_waits_for_copies_in_flight(bc_dir, stand_in):
    loader = GatedLoader(n=32, batch_size=8)
    producer, thread = serve(loader, "closing", window=2, idle_timeout=0.5)
    c = batchcast.Consumer("closing", device="stand-in", connect_timeout=30)
    b = next(iter(c))
    c.close()
    assert stand_in.fences[0].waited and ids_of(b) == list(range(8))
    finish(thread, idle=True)


def test_cpu_consumers_have_no_transfers(bc_dir):
    loader = GatedLoader(n=16, batch_size=8)
    producer, thread = serve(loader, "cpu")
    with batchcast.Consumer("cpu", connect_timeout=30) as c:
        assert c._transfers is None
        assert [i for b in c for i in ids_of(b)] == list(range(16))
        assert c.stats()["copies_in_flight"] == 0
    finish(thread)


def test_a_device_that_is_not_a_gpu_is_refused():
    with pytest.raises(batchcast.InvalidArgument, match="CUDA GPUs only|needs a GPU"):
        _device.open_device("meta")
