"""TensorSocket's API over batchcast: change the import, keep the script.

::

    # from tensorsocket import TensorProducer, TensorConsumer
    from batchcast.compat.tensorsocket import TensorProducer, TensorConsumer

The classes take TensorSocket 0.0.5's arguments and follow its iteration
protocol (its README's examples run unchanged):

- ``TensorProducer(data_loader, port=5555, ...)``: each ``for _ in producer``
  publishes one epoch of ``data_loader``; ``producer.join()`` ends the stream.
- ``TensorConsumer(port=5555, batch_size=64, ...)``: each ``for batch in
  consumer`` reads one epoch, in batches of ``batch_size`` rows; ``len()``
  is exact.

A port names the stream: ``port=5555`` is the batchcast producer
``tensorsocket-5555`` (no TCP port is opened; the stream is a Unix socket
and shared memory of this user on this machine, found by that name).
Arguments with no meaning here (``ack_port``, ``heart_ports``,
``rubber_band_pct``, ``pack_fn``, ``unpack_fn``, ``producer_batch_size``)
are accepted, with a one-time note on the ``batchcast`` logger saying why.
``consumer_max_buffer_size`` becomes the producer's window. What differs
from TensorSocket, by design: every consumer gets every sample of an epoch
(the last partial batch included), a late consumer replays the current
epoch if its start is still in the window (where TensorSocket used a
rubber band), a dead consumer holds nobody up, and a producer that exits
ends the consumers' loops at once (see docs/python.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from .._consumer import Consumer
from .._producer import Producer

__all__ = ["TensorProducer", "TensorConsumer", "stream_name"]

_log = logging.getLogger("batchcast")
_noted: set[str] = set()

_WHY = {
    "ack_port": "batchcast consumers release batches in shared memory, with no acknowledgement port",
    "heart_ports": "a consumer's death is its Unix socket closing; there is no heartbeat",
    "rubber_band_pct": "a late consumer replays the current epoch while its start is in the window",
    "pack_fn": "batches travel as shared-memory arrays, never pickled",
    "unpack_fn": "batches arrive as tensors viewing shared memory, never pickled",
    "producer_batch_size": "the producer publishes the loader's batches; each consumer picks its own batch_size",
}


def _note(arg: str) -> None:
    if arg in _noted:
        return
    _noted.add(arg)
    _log.warning("batchcast.compat.tensorsocket: %s is accepted and ignored: %s", arg, _WHY[arg])


def stream_name(port: int) -> str:
    """The batchcast producer name that stands for a TensorSocket port."""
    return f"tensorsocket-{int(port)}"


class TensorProducer:
    """TensorSocket's producer: publishes ``data_loader`` under ``port``.

    Extra keyword arguments go to :class:`batchcast.Producer` (``window``,
    ``idle_timeout``, ``metadata``, ...).
    """

    def __init__(
        self,
        data_loader: Any,
        port: int = 5555,
        ack_port: int = 5556,
        heart_ports: tuple = (4444, 4445),
        rubber_band_pct: float = 0.005,
        pack_fn: Any = None,
        consumer_max_buffer_size: int = 10,
        producer_batch_size: int = 8,
        **options: Any,
    ) -> None:
        defaults = dict(
            ack_port=5556,
            heart_ports=(4444, 4445),
            rubber_band_pct=0.005,
            pack_fn=None,
            producer_batch_size=8,
        )
        given = dict(
            ack_port=ack_port,
            heart_ports=tuple(heart_ports),
            rubber_band_pct=rubber_band_pct,
            pack_fn=pack_fn,
            producer_batch_size=producer_batch_size,
        )
        for arg, value in given.items():
            if value != defaults[arg]:
                _note(arg)
        options.setdefault("window", consumer_max_buffer_size)
        self.port = port
        self.data_loader = data_loader
        self.epoch = 0
        self._producer = Producer(data_loader, stream_name(port), **options)

    @property
    def producer(self) -> Producer:
        """The batchcast producer underneath."""
        return self._producer

    def __len__(self) -> int:
        return len(self.data_loader)

    def __iter__(self) -> Iterator[Any]:
        """One epoch: publishes each batch of the loader and yields it."""
        yield from self._producer
        self.epoch += 1

    def join(self) -> None:
        """Ends the stream: consumers' loops end, and their next one raises
        :class:`batchcast.ProducerFinished`."""
        self._producer.close()


class TensorConsumer:
    """TensorSocket's consumer: reads the stream of ``port`` in batches of
    ``batch_size`` rows; each ``for`` loop is one epoch.

    ``connect_timeout`` (seconds, default 120) is how long it waits for the
    producer to appear (TensorSocket waited without limit). Extra keyword
    arguments go to :class:`batchcast.Consumer` (``device``, ``join``, ...).
    """

    def __init__(
        self,
        port: int = 5555,
        ack_port: int = 5556,
        heart_ports: tuple = (4444, 4445),
        unpack_fn: Any = None,
        batch_size: int = 64,
        connect_timeout: float | None = 120.0,
        **options: Any,
    ) -> None:
        if ack_port != 5556:
            _note("ack_port")
        if tuple(heart_ports) != (4444, 4445):
            _note("heart_ports")
        if unpack_fn is not None:
            _note("unpack_fn")
        self.port = port
        self.batch_size = batch_size
        self._consumer = Consumer(
            stream_name(port), batch_size=batch_size, connect_timeout=connect_timeout, **options
        )
        self._epoch_iter: Iterator[Any] | None = None

    @property
    def consumer(self) -> Consumer:
        """The batchcast consumer underneath."""
        return self._consumer

    @property
    def epoch(self) -> int:
        """Epochs finished by this consumer's loops (as TensorSocket counts)."""
        return self._epochs_done

    _epochs_done = 0

    def __len__(self) -> int:
        return len(self._consumer)

    def __iter__(self) -> TensorConsumer:
        return self

    def __next__(self) -> Any:
        if self._epoch_iter is None:
            self._epoch_iter = iter(self._consumer)
        try:
            return next(self._epoch_iter)
        except StopIteration:
            self._epoch_iter = None
            self._epochs_done += 1
            raise
