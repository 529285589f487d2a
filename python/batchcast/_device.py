"""Moving a consumer's batches to a GPU, and keeping each batch's shared
memory leased until its copy has completed.

With ``device="cuda:N"`` every array of a batch is copied with
``.to(device, non_blocking=True)``. From page-locked memory (the arena, once
:mod:`batchcast._pinned` has registered it) that copy is an asynchronous
DMA, queued on the current CUDA stream behind whatever the training loop
has queued already, and PyTorch records no event for host memory it did not
allocate. The CPU tensor that views the slot holds the slot's lease; if it
were dropped when ``.to()`` returns, the producer could reuse the slot while
the copy is still queued, and the model would train on the next batch's
bytes.

So a batch's moves go through :class:`Transfers`: the CPU tensors stay
referenced, with a fence recorded on the stream the copies were queued on,
until that fence has completed. Completed fences are collected without
blocking at every ``next()``; the consumer waits for one only when it is
about to wait for the producer anyway (the slot it frees may be the one the
producer needs) and when it closes. The rule holds for every path that
moves host memory to the device: batches cut from one slot, batches
assembled across slots, per-consumer augmentation output, and the prefetch
thread (which records its fence on its own current stream).

The device calls sit behind :class:`Device` (``copy`` and ``fence``):
:class:`CudaDevice` on a GPU, and in the tests a stand-in whose copies
complete when the test says so.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Protocol

from . import _native

__all__ = ["CudaDevice", "Device", "Fence", "Transfers", "open_device"]


class Fence(Protocol):
    """The completion of the copies queued before it on one stream."""

    def done(self) -> bool:
        """True once every copy queued before the fence has completed."""

    def wait(self) -> None:
        """Blocks until :meth:`done`."""


class Device(Protocol):
    """Where a consumer's batches go."""

    #: What ``Consumer(device=...)`` resolved to (a ``torch.device``).
    torch_device: Any

    def copy(self, tensor: Any) -> Any:
        """Queues the copy of a CPU tensor to the device; returns the
        device tensor (its bytes are there once a later fence is done)."""

    def fence(self) -> Fence:
        """A fence after the copies this thread has queued so far."""


class _EventFence:
    def __init__(self, event: Any) -> None:
        self._event = event

    def done(self) -> bool:
        return bool(self._event.query())

    def wait(self) -> None:
        self._event.synchronize()


class CudaDevice:
    """A CUDA GPU through torch: ``non_blocking`` copies, and a CUDA event
    recorded on the calling thread's current stream as the fence."""

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.torch_device = device

    def copy(self, tensor: Any) -> Any:
        return tensor.to(self.torch_device, non_blocking=True)

    def fence(self) -> Fence:
        event = self._torch.cuda.Event()
        event.record(self._torch.cuda.current_stream(self.torch_device))
        return _EventFence(event)


def open_device(device: Any) -> Device | None:
    """The :class:`Device` for ``Consumer(device=...)``; None for the CPU."""
    if device is None or str(device) == "cpu":
        return None
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise _native.InvalidArgument(
            f"device={str(device)!r} needs a GPU, but torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); use device='cpu'"
        )
    if dev.type != "cuda":
        raise _native.InvalidArgument(
            f"device={str(device)!r}: batchcast moves batches to CUDA GPUs only; use 'cpu' or 'cuda:N'"
        )
    return CudaDevice(dev)


class Transfers:
    """A consumer's copies to its device that may still be in flight, each
    batch's with the CPU tensors (and so the leases) it reads from.

    Safe to use from several threads (the loop and the prefetch thread)."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._lock = threading.Lock()
        self._in_flight: deque[tuple[Fence, list[Any]]] = deque()

    @contextmanager
    def batch(self) -> Iterator[Callable[[Any], Any]]:
        """``with transfers.batch() as move:`` ``move(cpu_tensor)`` queues
        a copy and returns the device tensor; leaving the block records one
        fence after all of them (also when the block raised: what was queued
        still reads the slot)."""
        sources: list[Any] = []

        def move(tensor: Any) -> Any:
            out = self.device.copy(tensor)
            sources.append(tensor)
            return out

        try:
            yield move
        finally:
            if sources:
                fence = self.device.fence()
                with self._lock:
                    self._in_flight.append((fence, sources))

    def in_flight(self) -> int:
        """Batches whose copies have not been seen to complete."""
        with self._lock:
            return len(self._in_flight)

    def collect(self) -> int:
        """Drops the sources of every batch whose fence has completed
        (never blocks); returns the batches still in flight."""
        with self._lock:
            keep = [entry for entry in self._in_flight if not entry[0].done()]
            done = len(self._in_flight) - len(keep)
            if done:
                self._in_flight = deque(keep)
            return len(keep)

    def wait_oldest(self) -> bool:
        """Waits for the oldest batch in flight and drops its sources;
        False when none was in flight."""
        with self._lock:
            if not self._in_flight:
                return False
            fence, sources = self._in_flight[0]
        fence.wait()  # outside the lock: the prefetch thread may add meanwhile
        with self._lock:
            if self._in_flight and self._in_flight[0][0] is fence:
                self._in_flight.popleft()
        del sources
        return True

    def wait_all(self) -> None:
        """Waits for every copy in flight and drops the sources."""
        while self.wait_oldest():
            pass
