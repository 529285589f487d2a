"""The epochs of a Consumer's stream: one ``for`` loop reads one epoch,
claimed at its first ``next()``, skipping what an earlier loop left of its
own; the triggers fired between epochs; and the end of the stream
(:class:`batchcast.ProducerFinished`, naming a cut epoch as cut)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable, NamedTuple

from . import _native
from ._events import EventReader
from ._plane import PRIVATE
from ._spec import arrays_of_batch, check_arrays
from ._tree import unflatten
from ._triggers import Trigger

__all__ = ["EpochInfo", "EpochLoop"]


class EpochInfo(NamedTuple):
    """An epoch as this consumer sees it."""

    epoch: int
    #: Samples this consumer receives in it (None: the producer did not say).
    samples: int | None
    #: Batches this consumer receives in it (None: unknown).
    batches: int | None
    #: This consumer's batch size.
    batch_size: int
    #: True when the consumer joined mid-epoch (join="now").
    partial: bool


class EpochLoop(EventReader):
    """The epoch-reading half of :class:`batchcast.Consumer`, above the
    events: which loop owns the current epoch, where it stands, and what
    ends it. :meth:`_init_epochs` sets its state; the Consumer sets the
    rest, ``_expect_arrays`` and ``_prefetch`` included."""

    #: Array expectations left to check on the first batch.
    _expect_arrays: dict | None
    #: Whether the next batch is augmented while the loop works on this one.
    _prefetch: bool

    def _init_epochs(self, on_trigger: Callable[[Trigger], Any] | None) -> None:
        """Before the first epoch: no loop, no epoch, no trigger yet."""
        self._generation = 0
        #: The generation of the iterator reading the current epoch; None
        #: when no loop owns it (none began, or the last one left early).
        self._owner: int | None = None
        self._in_epoch = False
        self._current: EpochInfo | None = None
        self._last_full: EpochInfo | None = None
        self._finished: tuple | None = None
        self._triggers: list[Trigger] = []
        self._on_trigger = on_trigger
        #: The position of the next row the loop is handed in the current
        #: epoch (see state_dict).
        self._row = 0
        #: The position loaded by load_state_dict, until an epoch begins.
        self._restored: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        """The producer's name."""
        return self._native.name

    @property
    def epoch(self) -> int | None:
        """The epoch in progress or last read (from 0); None before the first."""
        return None if self._current is None else self._current.epoch

    @property
    def triggers(self) -> list[Trigger]:
        """The triggers the producer fired so far (``serve --trigger``), in
        order: each is received after the last batch of the epoch before
        it, before that epoch's end, so a loop that ended has seen the
        triggers at its end, and the next loop's epoch holds their data. A
        loop that ignores them reads the same batches."""
        return list(self._triggers)

    @property
    def epoch_info(self) -> EpochInfo | None:
        """The epoch in progress or last read, as this consumer sees it."""
        return self._current

    # -- iteration --------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """An iterator over one epoch. Creating it claims nothing: the epoch
        is claimed when its first batch is asked for (the first ``next()``),
        so a library that calls ``iter()`` to check that the loader is
        iterable and drops the iterator (Lightning does) skips nothing.

        The first ``next()`` first skips what an earlier loop left of its
        epoch (a ``break``), then waits for the next epoch in the stream.
        Raises :class:`batchcast.ProducerFinished` at once when the producer
        is already known to have finished."""
        self._generation += 1  # earlier iterators are done, whatever happens here
        if self._finished is not None and not self._in_epoch:
            raise self._finished_error()
        return self._epoch_batches(self._generation)

    def _check_current(self, generation: int) -> None:
        if generation != self._generation:
            raise RuntimeError(
                "this iterator over batchcast.Consumer was superseded by a newer iter(); "
                "each iter() reads one epoch"
            )

    def _claim(self) -> None:
        """Makes the next epoch of the stream the current one."""
        if self._in_epoch:
            self._skip_rest()
        if self._finished is not None:
            raise self._finished_error()
        while not self._in_epoch:
            event = self._next_event().event_or_raise()
            if event[0] == "start":
                self._start(event)
            elif event[0] == "trigger":
                self._trigger(event)
            elif event[0] == "finished":
                self._finished = event
                raise self._finished_error()

    def _epoch_batches(self, generation: int) -> Iterator[Any]:
        # A generator: nothing here runs before the first next().
        self._check_current(generation)
        self._claim()
        self._owner = generation
        handed = 0  # batches of this epoch handed to the loop
        try:
            while True:
                self._check_current(generation)
                if self._transfers is not None:
                    self._take_released()  # device tensors freed: behind a fence now
                    self._transfers.collect()  # slots whose copies completed go back
                item = self._next_event()
                event = item.event_or_raise()
                kind = event[0]
                if kind == "batch":
                    if item.future is not None:
                        batch = item.future.result()  # raises what augmenting raised
                    else:
                        batch = self._build(event)
                    if self._expect_arrays is not None:
                        expect, self._expect_arrays = self._expect_arrays, None
                        check_arrays(arrays_of_batch(batch), expect, self.name)
                    if self._prefetch:
                        self._prefetch_next()
                    handed += 1
                    self._row += event[5]
                    yield batch
                elif kind == "end":
                    self._in_epoch = False
                    return
                elif kind == "trigger":
                    self._trigger(event)
                elif kind == "finished":
                    # Before the epoch's end: it is incomplete, and a loop
                    # that ended as if it were whole would be counted done
                    # (a trainer saves it, and resumes after it).
                    self._finished = event
                    self._in_epoch = False
                    raise self._finished_error(cut_short=handed)
                elif kind == "start":
                    self._start(event)
        finally:
            # Left early (break, an exception): the rest of the epoch is
            # skipped by the next loop, so len() now speaks of that one.
            if self._owner == generation:
                self._owner = None

    def _skip_rest(self) -> None:
        """Reads and drops what is left of an epoch a loop left unfinished
        (its batches that could not be built included)."""
        while self._in_epoch:
            try:
                item = self._next_event()
                if item.future is not None:
                    item.future.cancel()  # a prefetched batch: dropped, finished or not
                event = item.event_or_raise()
            except _native.InvalidBatch:
                continue
            if event[0] == "end":
                self._in_epoch = False
            elif event[0] == "trigger":
                self._trigger(event)
            elif event[0] == "finished":
                self._finished = event
                self._in_epoch = False
            elif event[0] == "start":
                self._in_epoch = False
                self._start(event)
                return

    def _build(self, event: tuple) -> Any:
        """A batch event's batch: augmented with ``transform=`` if given
        (which moves its output to the device), else moved to the device,
        if any, through the transfers that keep its slot leased until the
        copies have completed; on the device plane, its arrays of one slot
        are device tensors (cloned there with ``copy_on_write``)."""
        if self._augment is not None:
            assert self._current is not None
            batch = unflatten(event[3], event[4], self._convert)
            return self._augment(batch, event[1], event[2] * self._current.batch_size, self.name)
        if self._transfers is None:
            return unflatten(event[3], event[4], self._convert)
        convert = self._convert
        with self._transfers.batch() as move:
            if not self._path.on_device:
                return unflatten(event[3], event[4], lambda view: move(convert(view)))
            # Device plane: an array of one slot is on the device already
            # (cloned with copy_on_write); an assembled one is host memory.
            clone = self._path.path == PRIVATE

            def place(view: Any) -> Any:
                if not view.on_device:
                    return move(convert(view))
                tensor = convert(view)
                return move(tensor, clone=True) if clone else tensor

            return unflatten(event[3], event[4], place)

    def _trigger(self, event: tuple) -> None:
        """Records a trigger event and calls ``on_trigger`` with it."""
        fired = Trigger.from_event(event)
        self._triggers.append(fired)
        if self._on_trigger is not None:
            self._on_trigger(fired)

    def _start(self, event: tuple) -> None:
        _, epoch, samples, batches, batch_size, partial, first_row = event
        info = EpochInfo(epoch, samples, batches, batch_size, partial)
        self._current = info
        self._row = first_row
        self._restored = None
        if not partial:
            self._last_full = info
        self._in_epoch = True

    def _finished_error(self, cut_short: int | None = None) -> BaseException:
        """ProducerFinished for a loop after the stream's end, or, with
        ``cut_short`` (the batches the loop got of it), for the loop whose
        epoch the end cut short."""
        assert self._finished is not None
        _, reason, message = self._finished
        if reason == "finished":
            last = "" if self._current is None else f" after epoch {self._current.epoch}"
            text = (
                f"producer {self.name!r} has finished{last}: it served all its epochs and no more "
                "batches will come, but this loop asked for another epoch. Serve for as long as "
                "any trainer reads: a Python producer with run() (no epochs=) or "
                "run(forever=True), `batchcast serve` with --epochs 0 (and --idle-timeout "
                "SECONDS to end once no trainer is left); or give either epochs at least what "
                "every trainer loops (epochs= or --epochs N)"
            )
        elif reason == "interrupted":
            text = f"producer {self.name!r} was interrupted (Ctrl-C) and stopped; no more batches will come"
        else:
            text = f"producer {self.name!r} stopped because its loader failed: {message}"
        if cut_short is not None and reason != "failed":
            info = self._current
            of = f" of {info.batches}" if info is not None and info.batches is not None else ""
            epoch = f"epoch {info.epoch}" if info is not None else "its epoch"
            text += (
                f"; it stopped in the middle of {epoch}, after {cut_short}{of} batches, so this loop "
                "raises rather than end as if the epoch were whole. Restart the producer and resume "
                "from the last checkpoint taken at the end of a whole epoch"
            )
        err = _native.ProducerFinished(text)
        err.name = self.name
        err.reason = reason
        return err
