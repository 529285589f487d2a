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

On the device plane (the producer mirrors its arena on this GPU, see
:mod:`batchcast._plane`) the same mechanism holds a slot while a device
clone of it is queued (``copy_on_write=True``: ``move(t, clone=True)``),
and :meth:`Transfers.defer` holds the leases of zero-copy device tensors
that were freed, until a fence recorded when they were taken: work queued
on such a tensor before it was dropped may still read the slot.

The device calls sit behind :class:`Device` (``copy``, ``clone`` and
``fence``): :class:`CudaDevice` on a GPU, and :class:`StandInDevice` where
``BATCHCAST_DEVICE_STAND_IN`` is set (tests on the CPU): CPU tensors, and
fences that complete at once unless a test holds them (:func:`hold`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Protocol

from . import _native

__all__ = [
    "CudaDevice",
    "Device",
    "Fence",
    "StandInDevice",
    "Transfers",
    "hold",
    "open_device",
    "STAND_IN_ENV",
]

#: Set to N: ``device="cuda:K"`` opens a stand-in of K among N fake GPUs
#: (host memory; the producer's mirrors are memfds), for tests on the CPU.
STAND_IN_ENV = "BATCHCAST_DEVICE_STAND_IN"


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
    #: The GPU (``"cuda:N"``) whose device slots the consumer may map;
    #: None for a device no producer mirrors to.
    gpu: str | None
    #: True for the CPU stand-in of a GPU.
    stand_in: bool

    def copy(self, tensor: Any) -> Any:
        """Queues the copy of a CPU tensor to the device; returns the
        device tensor (its bytes are there once a later fence is done)."""

    def clone(self, tensor: Any) -> Any:
        """Queues a copy of a tensor already on the device into memory of
        its own, on the current stream."""

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

    #: False: a real GPU (``gpu`` names it for the device plane).
    stand_in: bool = False

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.torch_device = device
        self.gpu: str | None = str(device)

    def copy(self, tensor: Any) -> Any:
        return tensor.to(self.torch_device, non_blocking=True)

    def clone(self, tensor: Any) -> Any:
        return tensor.clone()

    def fence(self) -> Fence:
        event = self._torch.cuda.Event()
        event.record(self._torch.cuda.current_stream(self.torch_device))
        return _EventFence(event)


class _Gate:
    """Whether fences made while it is the current gate may complete."""

    def __init__(self) -> None:
        self.open = threading.Event()


_gate_lock = threading.Lock()
_gate: _Gate | None = None  # None: fences complete at once


@contextmanager
def hold() -> Iterator[None]:
    """For tests: stand-in fences recorded inside the block complete only
    when it ends (as GPU work still queued behind them would)."""
    global _gate
    gate = _Gate()
    with _gate_lock:
        outer, _gate = _gate, gate
    try:
        yield
    finally:
        with _gate_lock:
            _gate = outer
        gate.open.set()


class _GateFence:
    def __init__(self, gate: _Gate | None) -> None:
        self._gate = gate

    def done(self) -> bool:
        return self._gate is None or self._gate.open.is_set()

    def wait(self) -> None:
        if self._gate is not None:
            self._gate.open.wait()


class StandInDevice:
    """A stand-in GPU (``BATCHCAST_DEVICE_STAND_IN``): batches are CPU
    tensors, copies and clones are ``clone()``, and a fence completes at
    once, or, inside :func:`hold`, when the block ends."""

    stand_in: bool = True

    def __init__(self, device: str) -> None:
        import torch

        self.torch_device = torch.device("cpu")
        self.gpu: str | None = device

    def copy(self, tensor: Any) -> Any:
        return tensor.clone()

    def clone(self, tensor: Any) -> Any:
        return tensor.clone()

    def fence(self) -> Fence:
        with _gate_lock:
            return _GateFence(_gate)

    def __repr__(self) -> str:
        return f"<batchcast stand-in device {self.gpu} (host memory, {STAND_IN_ENV} is set)>"


def open_device(device: Any) -> Device | None:
    """The :class:`Device` for ``Consumer(device=...)``; None for the CPU.
    With ``BATCHCAST_DEVICE_STAND_IN`` set, ``"cuda:N"`` is a
    :class:`StandInDevice`."""
    if device is None or str(device) == "cpu":
        return None
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return None
    if dev.type == "cuda" and os.environ.get(STAND_IN_ENV):
        return StandInDevice(f"cuda:{dev.index or 0}")
    if dev.type == "cuda" and torch.cuda.is_available() and dev.index is None:
        # "cuda" is torch's current device (torch.cuda.set_device), not GPU 0:
        # the mirror mapped, the copies and the fences must all be on it.
        dev = torch.device("cuda", torch.cuda.current_device())
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
    def batch(self) -> Iterator[Callable[..., Any]]:
        """``with transfers.batch() as move:`` ``move(cpu_tensor)`` queues
        a copy and returns the device tensor (``move(device_tensor,
        clone=True)``: a clone on the device); leaving the block records one
        fence after all of them (also when the block raised: what was queued
        still reads the slot)."""
        sources: list[Any] = []

        def move(tensor: Any, clone: bool = False) -> Any:
            out = self.device.clone(tensor) if clone else self.device.copy(tensor)
            sources.append(tensor)
            return out

        try:
            yield move
        finally:
            if sources:
                fence = self.device.fence()
                with self._lock:
                    self._in_flight.append((fence, sources))

    def defer(self, token: Any) -> None:
        """Keeps ``token`` (the leases of device tensors that were freed:
        ``_native.Consumer.take_released()``) until a fence recorded now, on
        the calling thread's current stream, has completed: work queued on
        those tensors before they were freed may still read their slots."""
        fence = self.device.fence()
        with self._lock:
            self._in_flight.append((fence, [token]))

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
