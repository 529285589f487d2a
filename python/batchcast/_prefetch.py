"""A consumer's prefetch: while the training loop works on one batch, a
thread of the Consumer's takes the next event and augments it if it is a
batch (``transform=``). When the next event has not arrived yet, the thread
waits for it, holding the native consumer only while it looks, so the
loop's own calls (``stats()``, ``close()``) go on meanwhile.

What a thread holds is the native consumer, the augmenter and a converter,
never the Consumer, so dropping a Consumer still closes it."""

from __future__ import annotations

# Imported before the exit hook below is registered, so that hook runs
# before concurrent.futures' own (see the end of this module).
import concurrent.futures.thread  # noqa: F401
import threading
from concurrent.futures import Future
from typing import Any, NamedTuple

from ._tree import unflatten

#: Native consumers a prefetch thread is waiting on now.
WAITING: set[Any] = set()


def take_and_augment(native: Any, augment: Any, convert: Any, batch_size: int, name: str) -> tuple:
    """A prefetch thread's task when the next event had not arrived: waits
    for it (``wait_event`` holds the native consumer only while it looks, so
    the loop's other calls go on), then augments it if it is a batch.
    Returns ``(event, batch, augmentation error)``; raises what taking the
    event raised."""
    WAITING.add(native)
    try:
        event = native.wait_event()
    finally:
        WAITING.discard(native)
    if event[0] != "batch":
        return event, None, None
    try:
        views = unflatten(event[3], event[4], convert)
        return event, augment(views, event[1], event[2] * batch_size, name), None
    except Exception as e:  # raised when this batch is asked for
        return event, None, e


def close_waiting() -> None:
    """At interpreter exit, before threads are joined: closes the native
    consumers that prefetch threads wait on (a producer that sends nothing
    more would otherwise hold the exit up); each wait ends within 100 ms."""
    for native in list(WAITING):
        try:
            native.close()
        except Exception:  # exiting; nothing to report to
            pass


# Registered after concurrent.futures' own hook (imported above), so it runs
# first: threading calls these in reverse order, then joins the threads.
_register_atexit = getattr(threading, "_register_atexit", None)
if _register_atexit is not None:
    _register_atexit(close_waiting)


def holds_a_batch(pending: Pending | None) -> bool:
    """Whether ``pending`` is a batch event taken ahead of the loop (one
    the native consumer counts as handed out)."""
    if pending is None:
        return False
    if not pending.waiting:
        return pending.event is not None and pending.event[0] == "batch"
    future = pending.future
    assert future is not None, "a waiting event has the prefetch thread's task"
    if not future.done() or future.exception() is not None:
        return False
    return future.result()[0][0] == "batch"


class Pending(NamedTuple):
    """An event taken from the native consumer ahead of the loop, or being
    waited for by the prefetch thread (``waiting``)."""

    #: The event (None when taking it raised, or while ``waiting``).
    event: tuple | None
    #: A batch event's augmentation, running on the prefetch thread; with
    #: ``waiting``, the prefetch thread's `take_and_augment`.
    future: Future | None
    #: What taking the event raised, re-raised in its turn.
    error: BaseException | None
    #: The event had not arrived: ``future`` waits for it.
    waiting: bool = False

    def event_or_raise(self) -> tuple:
        if self.error is not None:
            raise self.error
        assert self.event is not None
        return self.event
