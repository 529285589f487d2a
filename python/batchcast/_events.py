"""The events a Consumer reads, in the stream's order: the one taken ahead
of the loop (``transform_prefetch``), else the native consumer's next,
waiting for copies to the device (and for the fences of freed device
tensors, see :mod:`batchcast._plane`) before waiting for the producer."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from ._prefetch import Pending, take_and_augment
from ._tree import unflatten

if TYPE_CHECKING:
    from . import _native
    from ._augment import Augment
    from ._device import Transfers
    from ._epochs import EpochInfo
    from ._plane import DevicePath


class EventReader:
    """The event-reading half of :class:`batchcast.Consumer`, which sets
    these attributes; the prefetch keeps ``_pending`` and ``_executor``."""

    _native: _native.Consumer
    _transfers: Transfers | None
    _augment: Augment | None
    _convert: Callable[[Any], Any]
    _current: EpochInfo | None
    _pending: Pending | None
    _executor: ThreadPoolExecutor | None
    _waited: float
    _path: DevicePath

    def _take_released(self) -> None:
        """Hands the leases of device tensors freed since the last look
        (zero-copy device plane) to the transfers, behind a fence recorded
        now on the current stream: work queued on them before they were
        freed may still read their slots."""
        transfers = self._transfers
        if transfers is None or not self._path.on_device:
            return
        released = self._native.take_released()
        if released is not None:
            transfers.defer(released)

    def _next_event(self) -> Pending:
        """The next event of the stream: the one taken ahead, if any, else
        the native consumer's next (waiting for it)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return Pending(self._wait_event(), None, None)
        if not pending.waiting:
            return pending
        # A prefetch thread is waiting for it, or has taken it.
        assert pending.future is not None, "a waiting event has the prefetch thread's task"
        t0 = time.monotonic()
        try:
            event, batch, error = pending.future.result()
        except KeyboardInterrupt:
            self._pending = pending  # still the stream's next event
            raise
        except BaseException as e:  # taking the event failed: raised in its turn
            return Pending(None, None, e)
        finally:
            self._waited += time.monotonic() - t0
        if event[0] != "batch":
            return Pending(event, None, None)
        done: Future = Future()
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(batch)
        return Pending(event, done, None)

    def _wait_event(self) -> tuple:
        """The native consumer's next event, waiting for it. With copies to
        the device in flight, it first looks, and while nothing has arrived
        waits for the oldest copy instead (its slot may be the one the
        producer needs to publish the next batch); it waits for the
        producer only once no copy holds a slot. (The loop collects the
        completed copies at each ``next()``, just before this; a completed
        one still counted here is dropped by its wait, which returns at
        once. On the device plane, device tensors freed meanwhile are
        taken and fenced the same way, also while it waits for the
        producer.)"""
        transfers = self._transfers
        while transfers is not None:
            self._take_released()
            while transfers.in_flight():
                event = self._native.poll_event()
                if event is not None:
                    return event
                transfers.wait_oldest()
                self._take_released()  # the sources it dropped may be device tensors
            if not self._path.on_device:
                break
            # Device tensors freed by another thread while this waits hold
            # slots only this thread can fence: the wait ends for them.
            found = self._native.next_event_or_released()
            if found is not None:
                return found
        return self._native.next_event()

    def _prefetch_next(self) -> None:
        """Takes the next event now if it has arrived and starts augmenting
        it if it is a batch; if it has not arrived, a prefetch thread waits
        for it (holding the native consumer only while it looks) and
        augments it when it comes. Either way it stays pending for the next
        reader of events, so the stream's order is unchanged."""
        if self._pending is not None:
            return
        try:
            event = self._native.poll_event()
        except Exception as e:  # raised in order, when this event is read
            self._pending = Pending(None, None, e)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="batchcast-prefetch")
        if event is None:
            assert self._augment is not None and self._current is not None
            # The task holds what it needs, not this Consumer, so dropping
            # the Consumer still closes the native one (see __del__).
            task = self._executor.submit(
                take_and_augment,
                self._native,
                self._augment,
                self._convert,
                self._current.batch_size,
                self._native.name,
            )
            self._pending = Pending(None, task, None, waiting=True)
            return
        future: Future | None = None
        if event[0] == "batch":
            try:
                views = unflatten(event[3], event[4], self._convert)
            except Exception as e:
                self._pending = Pending(None, None, e)
                return
            assert self._augment is not None and self._current is not None
            first_key = event[2] * self._current.batch_size
            future = self._executor.submit(
                self._augment, views, event[1], first_key, self._native.name
            )
        self._pending = Pending(event, future, None)

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and pending.future is not None:
            pending.future.cancel()
