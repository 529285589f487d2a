"""batchcast.Consumer: a drop-in for a DataLoader that reads a producer's
batches from shared memory."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, NamedTuple

from . import _native, _state
from ._augment import Augment
from ._device import Transfers, open_device
from ._events import EventReader
from ._pinned import try_pin
from ._prefetch import Pending, holds_a_batch
from ._spec import StreamSpec, arrays_of_batch, check_arrays, check_expect
from ._surface import SkipFirstBatches, StreamBatchSampler, StreamDataset, StreamSampler
from ._tree import unflatten
from ._triggers import Trigger

__all__ = ["Consumer", "EpochInfo"]


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


def _resolve_format(fmt: str | None, device: str) -> str:
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


class Consumer(EventReader):
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

    **Epochs.** The consumer reads the producer's epochs in order, one per
    ``for`` loop. An epoch is claimed when a loop asks for its first batch
    (the first ``next()``), not by ``iter()``: calling ``iter()`` and dropping
    the iterator, as Lightning does to check that a loader is iterable, skips
    nothing. A loop that stops early (``break``) leaves the rest of that epoch
    unread: the next loop first skips it and starts at the next epoch, as a
    DataLoader starts a fresh epoch. ``len()`` is the batches of the epoch the
    next loop reads (exact for every join policy; see :meth:`__len__`).
    When the producer has finished, the loop in progress ends with its epoch
    and the next loop raises :class:`batchcast.ProducerFinished`; a producer
    that stops in the middle of an epoch (Ctrl-C, a failed loader) makes the
    loop in progress raise it, so that a cut epoch is never taken for a
    whole one. If the producer dies, the next call raises
    :class:`batchcast.ProducerGone` at once, unless the producer resumes its
    stream when restarted (``batchcast serve`` keeps a state file): then the
    consumer waits up to ``reconnect_timeout`` for the restart, logging that
    it waits, and continues with exactly the batches it has not received.

    **DataLoader attributes.** ``dataset``, ``sampler``, ``batch_sampler``,
    ``batch_size``, ``drop_last``, ``num_workers`` (0), ``pin_memory`` and
    ``set_epoch`` are there for scripts that read them; the producer's loader
    does the sampling, so ``set_epoch`` does nothing (see
    :mod:`batchcast._surface`).

    Args:
        name: the producer's name.
        batch_size: rows per batch; None: the producer's batch size. Any size
            works: every sample arrives exactly once per epoch, in order.
        drop_last: drop each epoch's last, smaller batch.
        join: for a producer already running: ``"catch-up"`` replays the
            current epoch if its start is still in the producer's window,
            else starts at the next epoch; ``"next-epoch"`` always starts at
            the next epoch; ``"now"`` starts with the next batch (a partial
            first epoch, which the first ``len()`` counts: size LR schedules
            from :attr:`batches_per_epoch`).
        connect_timeout: seconds to wait for the producer to appear; None
            fails at once with :class:`batchcast.ProducerNotFound`.
        reconnect_timeout: seconds to wait for a producer that died to be
            restarted under its name, when it resumes its stream (see
            above); then :class:`batchcast.ProducerGone`. 0: fail at once.
        device: ``"cpu"``, or ``"cuda:N"`` to move each batch to that GPU
            (``.to(device, non_blocking=True)``); needs torch with CUDA. The
            arena is then registered once with CUDA as page-locked memory so
            that each copy is an asynchronous DMA (``pin_memory`` says whether
            it worked; it falls back quietly to pageable copies; this path has
            not yet run on a GPU).
        format: ``"torch"``, ``"numpy"``, or None: torch if installed.
        label: shown by ``batchcast status``, at most 128 bytes (default: the
            script's name).
        dir: the socket directory (see :class:`batchcast.Producer`).
        copy_on_write: in-place writes to batch tensors land on private
            copies of the pages written instead of SIGSEGV (see above); costs
            a scan of each reused slot's page table (docs/share.md: "Batches
            are read-only shared memory"). Ignored with a CUDA ``device``: the
            batches are then device tensors, and the arena is mapped shared
            and read-only, as page-locking for the GPU needs.
        on_evict: if a producer with ``lag_policy="evict"`` evicts this
            consumer for falling too far behind: ``"error"`` raises
            :class:`batchcast.FellBehind` at the next read; ``"rejoin"`` ends
            the current epoch short (with a warning) and follows the next.
        expect: what this trainer expects of the stream, e.g.
            ``{"img_size": 96, "batch[0]": "float32[3, 96, 96]"}``: checked
            against :attr:`spec` at connection; a mismatch raises
            :class:`batchcast.StreamMismatch` naming both sides (see
            :mod:`batchcast._spec` for the keys). Array expectations on a
            producer that has not described its first batch yet (one started
            with ``slot_size=``) are checked on the first batch.
        transform: this trainer's own augmentation of a decoded stream
            (``batchcast serve --decode-only``): a
            :class:`batchcast.transforms.Compose` (or a single
            ``RandomResizedCrop``), run on native threads into this
            process's memory; batches are then ``(augmented images,
            labels)``. See :mod:`batchcast.transforms`.
        seed: the seed of ``transform``'s random draws (default: a fresh
            random one, so every consumer crops differently); a fixed seed
            reproduces the same crops.
        transform_threads: native threads that run ``transform``.
        transform_prefetch: with ``transform``, augment the next batch while
            the loop works on this one: when the loop takes batch k, batch
            k+1 is augmented on a background thread (the native work
            releases the GIL) at once if it has arrived, else as soon as it
            arrives, so the next ``next()`` waits only for what is left of
            it. Events keep their order; an augmentation error is raised
            when that batch is asked for; a ``break`` drops the prefetched
            batch with the rest of the epoch. Costs one batch of augmented
            memory and holds one more producer batch. False: each batch is
            augmented when it is asked for.
        on_trigger: called with each :class:`batchcast.Trigger` the
            producer fires (``serve --trigger``), in the loop, after the
            last batch of the epoch before it (what it raises is raised
            there); :attr:`triggers` lists them all.
    """

    def __init__(
        self,
        name: str | None = None,
        batch_size: int | None = None,
        *,
        drop_last: bool = False,
        join: str = "catch-up",
        connect_timeout: float | None = None,
        device: Any = "cpu",
        format: str | None = None,
        label: str | None = None,
        dir: str | os.PathLike[str] | None = None,
        copy_on_write: bool = True,
        on_evict: str = "error",
        reconnect_timeout: float = 300.0,
        expect: dict | None = None,
        transform: Any = None,
        seed: int | None = None,
        transform_threads: int = 2,
        transform_prefetch: bool = True,
        on_trigger: Callable[[Trigger], Any] | None = None,
    ) -> None:
        if name is None:
            # `batchcast run` gives every job of a workload with a shared
            # pipeline its producer's name.
            name = os.environ.get("BATCHCAST_NAME") or None
            if name is None:
                raise _native.InvalidArgument(
                    "no producer name: pass Consumer(name=...), or run the script under "
                    "`batchcast run` with a Data pipeline (it sets BATCHCAST_NAME)"
                )
        if batch_size is not None:
            if isinstance(batch_size, bool) or not hasattr(batch_size, "__index__"):
                raise TypeError(
                    f"batch_size must be an int or None, not {type(batch_size).__name__}"
                )
            batch_size = batch_size.__index__()
            if batch_size < 1:
                raise _native.InvalidArgument(
                    f"batch_size must be at least 1 (or None for the producer's), not {batch_size}"
                )
        self._format = _resolve_format(format, "cpu" if device is None else str(device))
        target = open_device(device)
        #: The copies to the device still in flight, with the leases they
        #: read from (see batchcast._device); None on the CPU.
        self._transfers = None if target is None else Transfers(target)
        self._device = None if target is None else target.torch_device
        self._augment = None
        #: The event taken ahead of the loop (see transform_prefetch): the
        #: next one every reader of events takes, before next_event().
        self._pending: Pending | None = None
        self._prefetch = bool(transform_prefetch) and transform is not None
        self._executor: ThreadPoolExecutor | None = None
        if transform is not None:
            self._augment = Augment(
                transform, seed, transform_threads, self._format, self._transfers
            )
        self._convert = _converter(self._format, name)
        #: Seconds the loop waited for a batch a prefetch thread was
        #: waiting for (its own wait is not the loop's).
        self._waited = 0.0
        if label is None:
            label = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
            # Labels are at most 128 bytes; cut a long script name to fit.
            label = label.encode()[:128].decode(errors="ignore")
        #: What the native consumer is connected with. Deferred: the
        #: producer sends it nothing until its first read or load_state_dict,
        #: which may place it at the saved position (so the producer keeps
        #: that position meanwhile); with join="now", whose first epoch's
        #: size the welcome gives, not deferred, and load_state_dict
        #: connects again with a start.
        self._connect_args: dict[str, Any] = dict(
            batch_size=batch_size,
            drop_last=bool(drop_last),
            join=join,
            connect_timeout=connect_timeout,
            label=label,
            dir=None if dir is None else os.fspath(dir),
            # A GPU consumer's batches are device tensors (copies), so
            # nothing writes to its mapping; and the page-locking of a
            # copy-on-write mapping would pin private copies of its pages
            # (Linux unshares them at a long-term pin), which the GPU would
            # then read instead of what the producer writes.
            copy_on_write=bool(copy_on_write) and self._transfers is None,
            on_evict=on_evict,
            reconnect_timeout=reconnect_timeout,
        )
        self._deferred = join != "now"
        self._native = _native.Consumer(name, **self._connect_args, deferred=self._deferred)
        self._spec = StreamSpec(self._native.welcome())
        #: Array expectations left to check on the first batch.
        self._expect_arrays: dict | None = None
        if expect is not None:
            try:
                if not check_expect(self._spec, expect, name):
                    self._expect_arrays = dict(expect)
            except BaseException:
                self._native.close()
                raise
        self._requested_batch_size = batch_size
        self._drop_last = bool(drop_last)
        # Page-locks the arena for asynchronous copies to the GPU, where
        # that applies and works (see batchcast._pinned; untested on a GPU).
        self._pinned = try_pin(name, self._device, self._format)
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
        self._sampler = StreamSampler(name, self._samples_per_epoch)
        self._dataset = StreamDataset(name, self._samples_per_epoch)
        self._batch_sampler = StreamBatchSampler(
            name, self._full_batches, lambda: self.batch_size, self._drop_last, self._sampler
        )

    # -- properties -------------------------------------------------------

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

    @property
    def batch_size(self) -> int | None:
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

    @property
    def spec(self) -> StreamSpec:
        """What the producer says it sends: the structure, dtypes and
        per-sample shapes of its batches, its batch size, samples per epoch
        and metadata (see :class:`batchcast.StreamSpec`)."""
        return self._spec

    def welcome(self) -> dict:
        """What the producer announced at connection (pid, slot size,
        window, samples per epoch, batch size)."""
        return self._native.welcome()

    def stats(self) -> dict:
        """``{"batches": handed out so far, "wait_seconds": time spent
        waiting for data, "lag": batches received but not yet handed out,
        "behind": batches of this epoch the producer has published that
        this consumer has not read yet, "copies_in_flight": batches whose
        copies to ``device`` have not been seen to complete (each holds its
        slot until then)}`` (a batch being prefetched counts as not yet
        handed out)."""
        stats = self._native.stats()
        stats["copies_in_flight"] = 0 if self._transfers is None else self._transfers.collect()
        if holds_a_batch(self._pending):
            stats["batches"] -= 1
            stats["lag"] += 1
        stats["wait_seconds"] += self._waited
        return stats

    # -- the DataLoader surface -------------------------------------------
    #
    # What scripts written for a DataLoader read besides the batches (see
    # batchcast._surface). Each value is chosen so that the common code paths
    # of timm's train.py, Lightning, Accelerate and torchvision's reference
    # scripts do the right thing with a Consumer.

    @property
    def dataset(self) -> StreamDataset:
        """A stand-in whose ``len()`` is the samples of a full epoch (as
        ``len(DataLoader.dataset)``); it cannot be indexed."""
        return self._dataset

    @property
    def sampler(self) -> StreamSampler:
        """A stand-in whose ``len()`` is the samples of a full epoch and
        whose ``set_epoch`` does nothing (the producer's sampler shuffles)."""
        return self._sampler

    @property
    def batch_sampler(self) -> StreamBatchSampler:
        """A stand-in with this consumer's ``batch_size`` and ``drop_last``,
        ``len()`` the batches of a full epoch, and a no-op ``set_epoch``."""
        return self._batch_sampler

    @property
    def drop_last(self) -> bool:
        """Whether each epoch's last, smaller batch is dropped."""
        return self._drop_last

    @property
    def num_workers(self) -> int:
        """0: this process starts no loader workers (the producer's loader
        does the loading)."""
        return 0

    @property
    def collate_fn(self) -> None:
        """None: batches arrive collated by the producer's loader."""
        return None

    @property
    def pin_memory(self) -> bool:
        """True when batches are read from page-locked (pinned) memory, so
        that copies to the GPU are asynchronous (see ``device``)."""
        return self._pinned

    def set_epoch(self, epoch: int) -> None:
        """Accepted for scripts that call it; does nothing. Which samples
        come in which order is the producer loader's choice; each ``for``
        loop reads the next epoch in the stream."""
        self._sampler.set_epoch(epoch)

    def skip_first_batches(self, num_batches: int) -> SkipFirstBatches:
        """The next epoch without its first ``num_batches`` batches, to
        resume an epoch from a checkpoint: an iterable of that one epoch
        whose ``len()`` is the batches left. The skipped batches are
        released unread (the producer has loaded them for everyone)."""
        return SkipFirstBatches(self, num_batches)

    @property
    def prefetch_factor(self) -> None:
        """Raises: read by code that rebuilds a DataLoader from this one's
        attributes (accelerate's ``skip_first_batches``), which cannot work
        for a stream; :meth:`skip_first_batches` is the way to skip."""
        raise TypeError(
            f"batchcast.Consumer({self.name!r}) cannot be rebuilt as a torch DataLoader (as "
            "accelerate's skip_first_batches does): its batches come from the producer, not "
            f"from a dataset it can index; use consumer.skip_first_batches(n) instead"
        )

    def _samples_per_epoch(self) -> int:
        # The native consumer keeps the size last announced: at join, at a
        # full epoch's start, or at an epoch boundary (a dataset that grew).
        n = self._native.welcome()["samples_per_epoch"]
        if n is None and self._last_full is not None:
            n = self._last_full.samples
        if n is None:
            raise self._unknown_len()
        return n

    def _full_batches(self) -> int:
        n = self._native.batches_per_epoch()
        if n is None and self._last_full is not None:
            n = self._last_full.batches
        if n is None:
            raise self._unknown_len()
        return n

    def _unknown_len(self) -> TypeError:
        return TypeError(
            f"len() of batchcast.Consumer({self.name!r}) is unknown: the producer did not "
            "announce its epoch size (its loader has no len(), or no batch size is known); "
            "pass samples_per_epoch= (and batch_size=) to batchcast.Producer"
        )

    def __len__(self) -> int:
        """Batches of the epoch the next (or current) loop reads; exact
        before the loop, for every join policy.

        Inside a loop: the batches of its epoch. Before a loop: the batches
        of the epoch it will read. That is the partial first epoch of a
        ``join="now"`` consumer that joined mid-epoch (the producer tells it
        at connection how many samples are left), and a full epoch
        otherwise. A loop left early (``break``) does not count: the next
        loop starts a new, full epoch.

        **The join="now" trap.** A schedule sized once from ``len()`` at
        connection (``OneCycleLR(steps_per_epoch=len(loader))``, timm's and
        Lightning's step counts) is sized from that partial first epoch
        when the consumer joined mid-epoch, and runs out (OneCycleLR
        raises) in the next, full epoch. Size such schedules from
        :attr:`batches_per_epoch`, the length of a full epoch.
        """
        if self._in_epoch and self._owner is not None and self._current is not None:
            if self._current.batches is not None:
                return self._current.batches
            raise self._unknown_len()
        if self._current is None:
            first = self._first_epoch_batches()
            if first is not None:
                return first
        return self._full_batches()

    @property
    def batches_per_epoch(self) -> int:
        """Batches of a full epoch at this consumer's batch size and
        ``drop_last``, whatever epoch the next loop reads (``len()`` of a
        ``join="now"`` consumer is first its partial first epoch; see
        :meth:`__len__`). Raises TypeError when the producer did not
        announce its epoch size."""
        return self._full_batches()

    def _first_epoch_batches(self) -> int | None:
        """Batches of the partial first epoch a ``join="now"`` consumer
        joined, from the welcome; None when its first epoch is a full one."""
        w = self._native.welcome()
        if self._restored is not None and w.get("samples_per_epoch") is not None:
            bs = self.batch_size
            if bs is not None:
                samples = max(0, w["samples_per_epoch"] - self._restored[1])
                return samples // bs if self._drop_last else -(-samples // bs)
        if not w.get("first_epoch_partial"):
            return None
        samples = w.get("first_epoch_samples")
        bs = self.batch_size
        if samples is None or bs is None:
            raise self._unknown_len()
        return samples // bs if self._drop_last else -(-samples // bs)

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
        copies have completed."""
        if self._augment is not None:
            assert self._current is not None
            batch = unflatten(event[3], event[4], self._convert)
            return self._augment(batch, event[1], event[2] * self._current.batch_size, self.name)
        if self._transfers is None:
            return unflatten(event[3], event[4], self._convert)
        convert = self._convert
        with self._transfers.batch() as move:
            return unflatten(event[3], event[4], lambda view: move(convert(view)))

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

    # -- state (torch.utils.data's Stateful protocol) ---------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this consumer stands: ``{"version": 2, "name": ...,
        "stream": S, "epoch": E, "row": R}``, S the stream identity the
        producer announced (None when it keeps none), R the rows of epoch E
        the loop has been handed (batches a prefetch took ahead do not
        count). After an epoch's
        end, or a loop left early (whose rest the next loop skips), it is
        the next epoch's start; None as the epoch before the first. Save it
        with a checkpoint and give it to :meth:`load_state_dict`."""
        if self._current is None:
            epoch, row = self._restored if self._restored is not None else (None, 0)
        elif self._in_epoch and self._owner is not None:
            epoch, row = self._current.epoch, self._row
        else:
            epoch, row = self._current.epoch + 1, 0
        return _state.state(self.name, self._native.welcome()["identity"], epoch, row)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Starts this consumer where a saved :meth:`state_dict` stood: the
        loop receives the rows of its epoch from its row on, then the next
        epochs. Call it before the first loop. Exact while the producer
        still holds the batch with that row (or has not begun its epoch:
        a restarted ``batchcast serve`` resumes there); else the first
        loop logs a warning through the ``batchcast`` logger naming the
        rows that cannot be replayed, and starts at the next epoch.

        Raises :class:`batchcast.InvalidArgument` for a state that is not
        one (naming what is wrong), or was saved for another producer or
        from another stream under its name (naming what differs)."""
        native = self._native
        position = _state.parse(
            state_dict, self.name, native.welcome()["identity"], native.identity_differences
        )
        if self._current is not None or self._in_epoch:
            raise _native.InvalidArgument(
                f"load_state_dict on batchcast.Consumer({self.name!r}) after it began reading "
                f"epoch {self._current.epoch if self._current else '?'}: load the state into a "
                "new Consumer, before its first loop"
            )
        if position is None:
            return
        if self._deferred:
            self._native.start_at(position)
            self._restored = position
            return
        native = _native.Consumer(self.name, **self._connect_args, start=position)
        self._drop_pending()
        old, self._native = self._native, native
        old.close()
        self._spec = StreamSpec(native.welcome())
        self._restored = position

    # -- closing ----------------------------------------------------------

    def close(self) -> None:
        """Disconnects. Tensors still alive keep their memory valid.
        Waits for copies to the device still in flight (see ``device``)."""
        self._drop_pending()
        if self._transfers is not None:
            self._transfers.wait_all()
        executor, self._executor = self._executor, None
        if executor is not None:
            # Never waits: the thread only ever augments a batch already
            # received (it never waits for the producer), and exits after.
            executor.shutdown(wait=False, cancel_futures=True)
        self._native.close()

    def __del__(self) -> None:
        # The sources of copies still in flight must outlive the copies.
        transfers = getattr(self, "_transfers", None)
        if transfers is not None:
            try:
                transfers.wait_all()
            except Exception:  # interpreter shutdown, a lost device: nothing to report to
                pass
        # A prefetch thread waiting for the next event holds the native
        # consumer, not this object: close it, so that thread ends.
        pending = getattr(self, "_pending", None)
        if pending is not None and pending.waiting and not pending.future.done():
            try:
                self._native.close()
            except Exception:  # interpreter shutdown; nothing to report to
                pass

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"epoch {self.epoch}"
        return f"<batchcast.Consumer of {self.name!r} ({state})>"


def _converter(fmt: str, name: str) -> Callable[[Any], Any]:
    """The function that makes a batch's arrays from its DLPack views: CPU
    torch tensors or read-only NumPy arrays (moves to a device go through
    :class:`batchcast._device.Transfers`). A plain function, not a method: a
    prefetch thread holds it without holding the Consumer."""
    if fmt == "torch":
        import torch

        return torch.from_dlpack
    import numpy

    def to_numpy(view: Any) -> Any:
        if view.dtype == "bf16":
            raise TypeError(
                f'the producer {name!r} sends a bfloat16 array, which NumPy cannot hold; use format="torch"'
            )
        a = numpy.from_dlpack(view)
        a.flags.writeable = False
        return a

    return to_numpy
