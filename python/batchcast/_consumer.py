"""batchcast.Consumer: a drop-in for a DataLoader that reads a producer's
batches from shared memory.

The class is built in layers, each in its own module: the events of the
stream (:mod:`batchcast._events`), its epochs and loops
(:mod:`batchcast._epochs`), ``len()`` and the durable position
(:mod:`batchcast._position`), and the DataLoader attributes
(:mod:`batchcast._surface`); this module connects it and closes it."""

from __future__ import annotations

import os
from typing import Any, Callable

from . import _native
from ._augment import Augment
from ._device import Transfers, open_device
from ._epochs import EpochInfo
from ._options import checked_batch_size, converter, label_or_script, producer_name, resolve_format
from ._pinned import try_pin
from ._plane import choose
from ._prefetch import holds_a_batch
from ._spec import StreamSpec, check_expect
from ._surface import LoaderSurface
from ._triggers import Trigger

__all__ = ["Consumer", "EpochInfo"]


class Consumer(LoaderSurface):
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
        device: ``"cpu"``, or ``"cuda:N"`` for batches on that GPU; needs
            torch with CUDA. When the producer serves that GPU
            (``Producer(device=...)``, ``batchcast serve --device``), the
            consumer maps the producer's copy of its slots there (the device
            plane, one host-to-device copy per GPU for all its consumers; see
            ``copy_on_write``). Otherwise (with one warning naming the reason)
            it moves each batch itself (``.to(device, non_blocking=True)``),
            from the arena registered once with CUDA as page-locked memory so
            that each copy is an asynchronous DMA (``pin_memory`` says whether
            it worked; it falls back quietly to pageable copies).
            ``stats()["device_path"]`` says which path it takes (see
            :mod:`batchcast._plane`). With ``BATCHCAST_DEVICE_STAND_IN`` set
            (tests), ``"cuda:N"`` is a stand-in on the CPU.
        format: ``"torch"``, ``"numpy"``, or None: torch if installed.
        label: shown by ``batchcast status``, at most 128 bytes (default: the
            script's name).
        dir: the socket directory (see :class:`batchcast.Producer`).
        copy_on_write: in-place writes to batch tensors land on private
            copies of the pages written instead of SIGSEGV (see above); costs
            a scan of each reused slot's page table (docs/share.md: "Batches
            are read-only shared memory"). With a CUDA ``device`` on the
            device plane: True clones each batch on the device (queued on the
            current stream), so in-place writes never reach other consumers;
            False hands out the producer's device memory itself (zero copy,
            mapped read-only: for code that never writes its inputs in place;
            queue the work on a batch on the current stream, or synchronise,
            before dropping its tensors). On the host path the batches are
            copies on the device anyway, and the arena is mapped shared and
            read-only, as page-locking for the GPU needs.
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
        name = producer_name(name)
        batch_size = checked_batch_size(batch_size)
        self._format = resolve_format(format, "cpu" if device is None else str(device))
        self._open_device(device)
        self._prepare_transform(transform, seed, transform_threads, transform_prefetch)
        self._convert = converter(self._format, name)
        self._connect(
            name,
            batch_size=batch_size,
            drop_last=bool(drop_last),
            join=join,
            connect_timeout=connect_timeout,
            label=label_or_script(label),
            dir=None if dir is None else os.fspath(dir),
            copy_on_write=bool(copy_on_write),
            on_evict=on_evict,
            reconnect_timeout=reconnect_timeout,
        )
        self._check_expect(name, expect)
        self._requested_batch_size = batch_size
        self._drop_last = bool(drop_last)
        self._path = choose(
            self._native, self._target, self._format, transform, bool(copy_on_write), name
        )
        # Page-locks the arena for asynchronous copies to the GPU, where
        # that applies and works (see batchcast._pinned); the device plane
        # reads the producer's device copy instead.
        on_device = self._path.on_device
        self._pinned = not on_device and try_pin(name, self._device, self._format)
        self._init_epochs(on_trigger)
        self._init_surface(name)

    # -- connecting -------------------------------------------------------

    def _open_device(self, device: Any) -> None:
        """The device batches are moved to (None: they stay on the CPU)."""
        target = open_device(device)
        self._target = target
        #: The copies to the device still in flight, with the leases they
        #: read from (see batchcast._device); None on the CPU.
        self._transfers = None if target is None else Transfers(target)
        self._device = None if target is None else target.torch_device

    def _prepare_transform(
        self, transform: Any, seed: int | None, threads: int, prefetch: bool
    ) -> None:
        """This trainer's own augmentation (``transform=``), and whether it
        augments the next batch ahead of the loop."""
        self._augment = None
        #: The event taken ahead of the loop (see transform_prefetch): the
        #: next one every reader of events takes, before next_event().
        self._pending = None
        self._prefetch = bool(prefetch) and transform is not None
        self._executor = None
        if transform is not None:
            self._augment = Augment(transform, seed, threads, self._format, self._transfers)
        #: Seconds the loop waited for a batch a prefetch thread was
        #: waiting for (its own wait is not the loop's).
        self._waited = 0.0

    def _connect(self, name: str, **connect_args: Any) -> None:
        """Connects the native consumer with ``connect_args``, kept for
        load_state_dict. Deferred: the producer sends it nothing until its
        first read or load_state_dict, which may place it at the saved
        position (so the producer keeps that position meanwhile); with
        join="now", whose first epoch's size the welcome gives, not
        deferred, and load_state_dict connects again with a start."""
        # A GPU consumer's batches are device tensors (copies), so nothing
        # writes to its mapping; and the page-locking of a copy-on-write
        # mapping would pin private copies of its pages (Linux unshares them
        # at a long-term pin), which the GPU would then read instead of what
        # the producer writes.
        connect_args["copy_on_write"] = connect_args["copy_on_write"] and self._transfers is None
        self._connect_args = connect_args
        self._deferred = connect_args["join"] != "now"
        self._native = _native.Consumer(name, **connect_args, deferred=self._deferred)
        self._spec = StreamSpec(self._native.welcome())

    def _check_expect(self, name: str, expect: dict | None) -> None:
        """Checks ``expect=`` against the spec, leaving array expectations
        the spec cannot answer yet for the first batch; closes the
        connection when it fails."""
        self._expect_arrays = None
        if expect is not None:
            try:
                if not check_expect(self._spec, expect, name):
                    self._expect_arrays = dict(expect)
            except BaseException:
                self._native.close()
                raise

    # -- properties -------------------------------------------------------

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
        slot until then), "device_path": how batches reach ``device`` (
        ``"device slots (zero copy)"``, ``"device slots (private copy)"``,
        ``"host copy"``; None on the CPU), "device_path_reason": why the
        host copy (else None), "device_slots": the mapped device slots
        (``uuid``, ``ordinal``, ``addr``, ``len``, ``read_only_enforced``,
        ``backend``; None off the device plane), "device": the device, with
        " (stand-in)" for the CPU stand-in}`` (a batch being prefetched
        counts as not yet handed out)."""
        stats = self._native.stats()
        stats["copies_in_flight"] = 0 if self._transfers is None else self._transfers.collect()
        slots = stats.pop("device_slots")  # the mapping now (a restarted producer maps anew)
        stats.update(self._path.stats())
        if self._path.on_device:
            stats["device_slots"] = slots
        stats["device"] = self._device_name()
        if holds_a_batch(self._pending):
            stats["batches"] -= 1
            stats["lag"] += 1
        stats["wait_seconds"] += self._waited
        return stats

    # -- closing ----------------------------------------------------------

    def close(self) -> None:
        """Disconnects. Tensors still alive keep their memory valid.
        Waits for copies to the device still in flight (see ``device``)."""
        self._drop_pending()
        if self._transfers is not None:
            self._take_released()
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
                if hasattr(self, "_path"):
                    self._take_released()
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

    def _device_name(self) -> str | None:
        target = self._target
        if target is None:
            return None
        name = getattr(target, "gpu", None) or str(target.torch_device)
        return f"{name} (stand-in)" if getattr(target, "stand_in", False) else name

    def _reattach_plane(self) -> None:
        """After a reconnection (load_state_dict): maps the new connection's
        mirror, on the path chosen at construction."""
        if self._path.on_device:
            gpu = None if self._target is None else self._target.gpu
            assert gpu is not None
            found = self._native.attach_device(gpu, "read-only")
            if found["reason"] is not None:
                raise _native.ProducerGone(
                    f"producer {self.name!r} no longer serves {gpu}: {found['reason']}"
                )

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"epoch {self.epoch}"
        device = self._device_name()
        on = "" if device is None else f", {device}: {self._path.path}"
        return f"<batchcast.Consumer of {self.name!r} ({state}{on})>"
