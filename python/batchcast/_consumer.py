"""batchcast.Consumer: a drop-in for a DataLoader that reads a producer's
batches from shared memory."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Iterator, NamedTuple, Optional, Union

from . import _native
from ._tree import unflatten

__all__ = ["Consumer", "EpochInfo"]


class EpochInfo(NamedTuple):
    """An epoch as this consumer sees it."""

    epoch: int
    #: Samples this consumer receives in it (None: the producer did not say).
    samples: Optional[int]
    #: Batches this consumer receives in it (None: unknown).
    batches: Optional[int]
    #: This consumer's batch size.
    batch_size: int
    #: True when the consumer joined mid-epoch (join="now").
    partial: bool


def _resolve_format(fmt: Optional[str], device: str) -> str:
    if fmt is None:
        fmt = "torch" if importlib.util.find_spec("torch") is not None else "numpy"
    if fmt not in ("torch", "numpy"):
        raise _native.InvalidArgument(f'format must be "torch", "numpy" or None, not {fmt!r}')
    if fmt == "torch" and importlib.util.find_spec("torch") is None:
        raise _native.InvalidArgument('format="torch" needs PyTorch, which is not installed')
    if fmt == "numpy" and device != "cpu":
        raise _native.InvalidArgument(
            f'format="numpy" gives CPU arrays only; device={device!r} needs format="torch"'
        )
    return fmt


def _resolve_device(device: Any) -> Any:
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
    return dev


class Consumer:
    """Reads the batches of the producer ``name``: an iterable like a
    DataLoader, one epoch per ``for`` loop, with an exact ``len()``::

        loader = batchcast.Consumer("cifar", batch_size=64)
        for epoch in range(epochs):
            for images, labels in loader:
                ...

    Batches come back in the structure the producer sent (tuples stay
    tuples, lists lists, dicts dicts), as torch tensors (NumPy arrays with
    ``format="numpy"``, or when torch is not installed) that share memory with
    the producer: no copy is made when a batch lies inside one producer batch.
    Per-sample lists of ints, floats and strs come back as Python lists.

    **Batches are read-only shared memory.** Every consumer reads the same
    pages, so no training process can change what the others see. NumPy
    arrays are flagged non-writeable (a write raises ValueError). PyTorch has
    no read-only tensors; with ``copy_on_write=True`` (the default) the
    memory is mapped private and writable, and an in-place write to a batch
    tensor (``x.sub_(mean)``, ``x[0] = 0``, an in-place transform, from any
    number of threads) lands on a private copy of each page it touches,
    visible to this process only, and dropped when the slot is reused (no
    signal handler: ``faulthandler`` is unaffected). With
    ``copy_on_write=False`` the memory is mapped read-only and such a write
    kills the process with SIGSEGV. Either way, prefer ``x = x.clone()`` (or an
    out-of-place op: ``x.float()``, ``x - mean``, ``x.to(device)``) before
    modifying a batch. A batch kept across steps stays valid: its memory is
    released when the last tensor viewing it is freed.

    Each ``iter(loader)`` consumes exactly one epoch. A loop that stops early
    (``break``) leaves the rest of that epoch unread: the next loop first skips
    it and starts at the next epoch, as a DataLoader starts a fresh epoch.
    When the producer has finished, the loop in progress ends and the next
    ``iter()`` raises :class:`batchcast.ProducerFinished`. If the producer
    dies, the next call raises :class:`batchcast.ProducerGone` at once.

    Args:
        name: the producer's name.
        batch_size: rows per batch; None: the producer's batch size. Any size
            works: every sample arrives exactly once per epoch, in order.
        drop_last: drop each epoch's last, smaller batch.
        join: for a producer already running: ``"catch-up"`` replays the
            current epoch if its start is still in the producer's window,
            else starts at the next epoch; ``"next-epoch"`` always starts at
            the next epoch; ``"now"`` starts with the next batch (a partial
            first epoch).
        connect_timeout: seconds to wait for the producer to appear; None
            fails at once with :class:`batchcast.ProducerNotFound`.
        device: ``"cpu"``, or ``"cuda:N"`` to move each batch to that GPU
            (``.to(device, non_blocking=True)``); needs torch with CUDA.
        format: ``"torch"``, ``"numpy"``, or None: torch if installed.
        label: shown by ``batchcast status``, at most 128 bytes (default: the
            script's name).
        dir: the socket directory (see :class:`batchcast.Producer`).
        copy_on_write: in-place writes to batch tensors land on private
            copies of the pages written instead of SIGSEGV (see above); costs
            a scan of each reused slot's page table (README: "Batches are
            read-only shared memory").
        on_evict: if a producer with ``lag_policy="evict"`` evicts this
            consumer for falling too far behind: ``"error"`` raises
            :class:`batchcast.FellBehind` at the next read; ``"rejoin"`` ends
            the current epoch short (with a warning) and follows the next.
    """

    def __init__(
        self,
        name: str,
        batch_size: Optional[int] = None,
        *,
        drop_last: bool = False,
        join: str = "catch-up",
        connect_timeout: Optional[float] = None,
        device: Any = "cpu",
        format: Optional[str] = None,
        label: Optional[str] = None,
        dir: Union[str, "os.PathLike[str]", None] = None,
        copy_on_write: bool = True,
        on_evict: str = "error",
    ) -> None:
        if batch_size is not None:
            if isinstance(batch_size, bool) or not hasattr(batch_size, "__index__"):
                raise TypeError(f"batch_size must be an int or None, not {type(batch_size).__name__}")
            batch_size = batch_size.__index__()
            if batch_size < 1:
                raise _native.InvalidArgument(
                    f"batch_size must be at least 1 (or None for the producer's), not {batch_size}"
                )
        self._format = _resolve_format(format, "cpu" if device is None else str(device))
        self._device = _resolve_device(device)
        if self._format == "torch":
            import torch

            self._from_dlpack = torch.from_dlpack
        else:
            import numpy

            self._np_from_dlpack = numpy.from_dlpack
        if label is None:
            label = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
            # Labels are at most 128 bytes; cut a long script name to fit.
            label = label.encode()[:128].decode(errors="ignore")
        self._native = _native.Consumer(
            name,
            batch_size=batch_size,
            drop_last=bool(drop_last),
            join=join,
            connect_timeout=connect_timeout,
            label=label,
            dir=None if dir is None else os.fspath(dir),
            copy_on_write=bool(copy_on_write),
            on_evict=on_evict,
        )
        self._requested_batch_size = batch_size
        self._generation = 0
        self._in_epoch = False
        self._current: Optional[EpochInfo] = None
        self._last_full: Optional[EpochInfo] = None
        self._finished: Optional[tuple] = None

    # -- properties -------------------------------------------------------

    @property
    def name(self) -> str:
        """The producer's name."""
        return self._native.name

    @property
    def epoch(self) -> Optional[int]:
        """The epoch in progress or last read (from 0); None before the first."""
        return None if self._current is None else self._current.epoch

    @property
    def epoch_info(self) -> Optional[EpochInfo]:
        """The epoch in progress or last read, as this consumer sees it."""
        return self._current

    @property
    def batch_size(self) -> Optional[int]:
        """This consumer's batch size (None until known)."""
        if self._requested_batch_size is not None:
            return self._requested_batch_size
        if self._current is not None:
            return self._current.batch_size
        return self._native.welcome()["batch_size"]

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._native.closed

    def welcome(self) -> dict:
        """What the producer announced at connection (pid, slot size,
        window, samples per epoch, batch size)."""
        return self._native.welcome()

    def stats(self) -> dict:
        """``{"batches": handed out so far, "wait_seconds": time spent
        waiting for data, "lag": batches received but not yet handed out}``."""
        return self._native.stats()

    def __len__(self) -> int:
        """Batches in the epoch in progress, or else in the next full epoch."""
        if self._in_epoch and self._current is not None and self._current.batches is not None:
            return self._current.batches
        if self._last_full is not None and self._last_full.batches is not None:
            return self._last_full.batches
        n = self._native.batches_per_epoch()
        if n is not None:
            return n
        raise TypeError(
            f"len() of batchcast.Consumer({self.name!r}) is unknown: the producer did not "
            "announce its epoch size (its loader has no len(), or no batch size is known); "
            "pass samples_per_epoch= (and batch_size=) to batchcast.Producer"
        )

    # -- iteration --------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """One epoch of batches. Waits for the epoch to start (first
        skipping what a previous, interrupted loop left of its epoch); raises
        :class:`batchcast.ProducerFinished` if the producer has finished."""
        native = self._native
        self._generation += 1  # earlier iterators are done, whatever happens here
        generation = self._generation
        if self._in_epoch:
            self._skip_rest()
        if self._finished is not None:
            raise self._finished_error()
        if not self._in_epoch:
            while True:
                event = native.next_event()
                if event[0] == "start":
                    self._start(event)
                    break
                if event[0] == "finished":
                    self._finished = event
                    raise self._finished_error()
        return self._batches(generation)

    def _batches(self, generation: int) -> Iterator[Any]:
        native = self._native
        while True:
            if generation != self._generation:
                raise RuntimeError(
                    "this iterator over batchcast.Consumer was superseded by a newer iter(); "
                    "each iter() reads one epoch"
                )
            event = native.next_event()
            kind = event[0]
            if kind == "batch":
                yield unflatten(event[3], event[4], self._convert)
            elif kind == "end":
                self._in_epoch = False
                return
            elif kind == "finished":
                self._finished = event
                self._in_epoch = False
                if event[1] == "failed":
                    raise self._finished_error()
                return
            elif kind == "start":
                self._start(event)

    def _skip_rest(self) -> None:
        """Reads and drops what is left of an epoch a loop left unfinished
        (its batches that could not be built included)."""
        while self._in_epoch:
            try:
                event = self._native.next_event()
            except _native.InvalidBatch:
                continue
            if event[0] == "end":
                self._in_epoch = False
            elif event[0] == "finished":
                self._finished = event
                self._in_epoch = False
            elif event[0] == "start":
                self._in_epoch = False
                self._start(event)
                return

    def _start(self, event: tuple) -> None:
        _, epoch, samples, batches, batch_size, partial = event
        info = EpochInfo(epoch, samples, batches, batch_size, partial)
        self._current = info
        if not partial:
            self._last_full = info
        self._in_epoch = True

    def _convert(self, view: Any) -> Any:
        if self._format == "torch":
            t = self._from_dlpack(view)
            if self._device is not None:
                t = t.to(self._device, non_blocking=True)
            return t
        if view.dtype == "bf16":
            raise TypeError(
                f"the producer {self.name!r} sends a bfloat16 array, which NumPy cannot hold; "
                'use format="torch"'
            )
        a = self._np_from_dlpack(view)
        a.flags.writeable = False
        return a

    def _finished_error(self) -> BaseException:
        assert self._finished is not None
        _, reason, message = self._finished
        if reason == "finished":
            text = (
                f"producer {self.name!r} has finished: it served all its epochs and no more "
                "batches will come (run the producer for as many epochs as the consumers loop)"
            )
        elif reason == "interrupted":
            text = f"producer {self.name!r} was interrupted (Ctrl-C) and stopped; no more batches will come"
        else:
            text = f"producer {self.name!r} stopped because its loader failed: {message}"
        err = _native.ProducerFinished(text)
        err.name = self.name
        err.reason = reason
        return err

    # -- closing ----------------------------------------------------------

    def close(self) -> None:
        """Disconnects. Tensors still alive keep their memory valid."""
        self._native.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"epoch {self.epoch}"
        return f"<batchcast.Consumer of {self.name!r} ({state})>"
