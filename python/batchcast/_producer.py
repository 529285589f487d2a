"""batchcast.Producer: publish the batches of one data loader to many
training processes."""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from collections.abc import Iterable, Iterator
from collections.abc import Iterator as _IteratorABC
from typing import Any

from . import _native
from ._modules import types_of
from ._resume import EPOCH, SAMPLER, Resume
from ._spec import encode_metadata
from ._tree import flatten

__all__ = ["Producer"]

_log = logging.getLogger("batchcast")


class _Auto:
    def __repr__(self) -> str:
        return "<derived from the loader>"


#: Default of ``samples_per_epoch`` and ``batch_size``: derive from the loader.
AUTO: Any = _Auto()


def _positive_int(x: Any) -> int | None:
    if isinstance(x, int) and not isinstance(x, bool) and x > 0:
        return x
    return None


def _loader_batch_size(loader: Any) -> int | None:
    bs = _positive_int(getattr(loader, "batch_size", None))
    if bs is None:
        bs = _positive_int(getattr(getattr(loader, "batch_sampler", None), "batch_size", None))
    return bs


def _from_batch_sampler(bsampler: Any) -> int | None:
    """Exact samples per epoch of a BatchSampler-like object, if knowable
    without iterating it (iterating would consume random numbers)."""
    sampler = getattr(bsampler, "sampler", None)
    bs = _positive_int(getattr(bsampler, "batch_size", None))
    drop_last = getattr(bsampler, "drop_last", None)
    if bs is None or not isinstance(drop_last, bool):
        return None
    try:
        n = len(sampler)  # type: ignore[arg-type]
    except TypeError:
        n = None
    if n is not None:
        return n // bs * bs if drop_last else n
    if drop_last:
        try:
            return len(bsampler) * bs  # every batch is full
        except TypeError:
            return None
    return None


def _derive_samples(loader: Any, batch_size: int | None) -> tuple[int | None, str]:
    """``(samples per epoch, why unknown)`` for ``loader`` of nominal
    ``batch_size``."""
    if isinstance(loader, types_of("torch.utils.data", "DataLoader")):
        if isinstance(loader.dataset, types_of("torch.utils.data", "IterableDataset")):
            return None, "its DataLoader wraps an IterableDataset, whose length is not known"
        if loader.batch_sampler is None:
            return None, "its DataLoader has batch_size=None (the dataset yields whole batches)"
        n = _from_batch_sampler(loader.batch_sampler)
        if n is None:
            return None, (
                "its DataLoader's batch_sampler does not tell its sizes (no batch_size, drop_last "
                "and sized sampler)"
            )
        return n, ""
    bsampler = getattr(loader, "batch_sampler", None)
    if bsampler is not None:
        n = _from_batch_sampler(bsampler)
        if n is not None:
            return n, ""
    bs = batch_size
    dataset = getattr(loader, "dataset", None)
    drop_last = getattr(loader, "drop_last", None)
    if bs is not None and isinstance(drop_last, bool) and hasattr(dataset, "__len__"):
        n = len(dataset)  # type: ignore[arg-type]
        return (n // bs * bs if drop_last else n), ""
    if bs is not None and hasattr(loader, "__len__"):
        # len() batches of batch_size rows; checked (and corrected) after
        # the first epoch.
        return len(loader) * bs, ""
    if bs is None:
        return None, "the loader has no batch_size and no batch_size= was given"
    return None, "the loader has no len()"


def _check_loader(loader: Any) -> None:
    """Refuses a loader that cannot be iterated once per epoch."""
    if not hasattr(loader, "__iter__"):
        raise TypeError(f"loader must be iterable, not {type(loader).__name__}")
    if isinstance(loader, _IteratorABC):
        raise TypeError(
            f"loader is an iterator ({type(loader).__name__}), which can be iterated only "
            "once; pass a re-iterable source (a DataLoader, a list, an object whose __iter__ "
            "starts a new epoch)"
        )


def _min_consumers(wait_for_consumers: Any) -> int:
    """The consumers to wait for before publishing (see ``wait_for_consumers``)."""
    if isinstance(wait_for_consumers, bool):
        return 1 if wait_for_consumers else 0
    if isinstance(wait_for_consumers, int) and wait_for_consumers >= 0:
        return wait_for_consumers
    raise _native.InvalidArgument(
        f"wait_for_consumers must be a bool or a non-negative int, not {wait_for_consumers!r}"
    )


class Producer:
    """Publishes the batches of ``loader`` under ``name`` to every
    :class:`batchcast.Consumer` of that name on this machine.

    ``loader`` is any re-iterable source of batches (a
    ``torch.utils.data.DataLoader``, a list, ...): each epoch iterates it once.
    A batch is a torch tensor or NumPy array, or a tuple / list / dict
    (nested) of them sharing the first (batch) dimension; per-sample Python
    lists of ints, floats or strs (file names, captions) travel too. Each batch
    is copied once into shared memory, with the GIL released.

    Run it with :meth:`run`, or iterate it for control between batches::

        producer = batchcast.Producer(loader, name="cifar")
        producer.run()   # serves while trainers read; Ctrl-C stops cleanly and tells them

        with batchcast.Producer(loader, name="cifar") as producer:
            for epoch in range(10):
                for batch in producer:     # one epoch; yields each batch once published
                    pass

    Args:
        loader: the batch source, iterated once per epoch.
        name: the name consumers connect to (1-64 of ``A-Z a-z 0-9 . _ -``).
        window: slots of shared memory; the slowest consumer may fall this
            many producer batches behind before the producer waits for it.
        slot_size: bytes per slot; None sizes slots from the first batch
            with 25 % headroom (a later, larger batch raises BatchTooLarge).
        samples_per_epoch: samples per epoch, which gives consumers an exact
            ``len()``. Derived by default: for a DataLoader from its sampler,
            batch size and ``drop_last``; None if unknown (consumers' ``len()``
            then raises TypeError, and ``producer.samples_unknown_reason``
            says why). Checked after every epoch (a warning if wrong).
        batch_size: the nominal batch size; default ``loader.batch_size``, or
            the first batch's rows.
        wait_for_consumers: True: publish only while at least one consumer
            is attached; an int n: also wait for n consumers before the first
            batch; False: publish regardless (batches nobody reads are lost).
            Under ``batchcast run``, the workload's number of trainers
            (``$BATCHCAST_CONSUMERS``) is waited for before the first batch
            too, whatever is passed here, so that the first trainer to attach
            cannot drain the epochs before the last has started.
        idle_timeout: seconds the producer waits while no consumer is
            attached (60 by default): at the start, before raising
            :class:`batchcast.NoConsumers`; after the last one left, before
            :meth:`run` finishes (see there). None waits forever.
        metadata: a dict (JSON-serialisable, at most 64 KiB encoded) that
            describes the stream, e.g. ``{"img_size": 64, "transform": ...}``;
            consumers read it in ``consumer.spec.metadata`` and can require
            values with ``Consumer(expect=...)``. ``batchcast status`` shows
            it, with the structure, dtypes and shapes of the first batch.
        dir: the socket directory (default ``$BATCHCAST_DIR``, else
            ``$XDG_RUNTIME_DIR/batchcast``, else ``/tmp/batchcast-UID``).
        max_lag: how far one consumer may fall behind the others (paused by
            a checkpoint save, a debugger, SIGSTOP) before it holds them
            back: bytes (an int, or ``"512MiB"``) or batches
            (``"100batches"``). The producer keeps publishing into extra
            slots meanwhile, and the laggard still gets every sample. None:
            the smaller of 1 GiB and 1/8 of the memory available; its memory
            is reserved only when used.
        lag_policy: past ``max_lag``: ``"wait"`` holds the others back;
            ``"evict"`` evicts the laggard after ``stall_timeout`` seconds
            (its next read raises :class:`batchcast.FellBehind`, or it
            rejoins at the next epoch if it asked to).
        stall_timeout: seconds the producer stays blocked by a laggard
            before evicting it (with ``lag_policy="evict"``).
        seed: draws each epoch's order from (seed, epoch) where the loader's
            sampler has a ``generator`` (a shuffling DataLoader's
            ``RandomSampler``), so that a restart can replay it. None: the
            loader's own order.
        durable: keep a state file beside the socket, so that a producer
            restarted under this name (after SIGKILL, OOM, preemption)
            resumes the stream where this one stopped, and its consumers wait
            for it and continue with exactly the samples they have not had
            (see docs/share.md, "Durable epochs"). Off by default: a restart
            starts afresh and consumers fail at once when the producer dies,
            as before. Resumption is exact mid-epoch for a loader with
            ``state_dict()``/``load_state_dict()`` (torchdata's
            ``StatefulDataLoader``; its state is kept as JSON) and for a
            DataLoader over a map-style dataset with a sequential sampler, or
            a shuffling one with ``seed=``; any other loader resumes at the
            next epoch's start, with a warning.
        fresh: with ``durable``, discard the state a killed producer of this
            name left and start afresh (``batchcast serve --fresh``).
        rejoin_timeout: seconds a resumed producer waits for the consumers
            its predecessor had to reattach before it publishes
            (``--rejoin-timeout``).
        device: GPUs to serve from device memory: ``"cuda:0"``, a list
            (``["cuda:0", "cuda:1"]``) or UUIDs. The arena is mirrored on
            each (its whole length: the window and the lag slots), each batch
            is copied to each GPU once and published only after the copy has
            completed, and consumers with ``device=`` on that GPU receive CUDA
            tensors from the mirror instead of copying each batch themselves
            (see docs/share.md, "GPUs"). Where that cannot be done (no CUDA
            driver, a MIG instance, a GPU that cannot share memory), one
            warning on the ``batchcast`` logger says why and the producer
            serves on the host path. ``producer.devices`` shows the copies.
        identity: a line of text that identifies the stream beyond what the
            producer sees (the loader's type, dataset length, batch size,
            sampler type and seed): a transform's version, say. A restart
            whose identity differs from the state file's is refused with
            :class:`batchcast.InvalidArgument` naming the difference, and
            its waiting consumers fail with that message.

    A Producer belongs to the process that made it: DataLoader workers that
    fork from it cannot use it.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        name: str,
        *,
        window: int = 8,
        slot_size: int | None = None,
        samples_per_epoch: int | None = AUTO,
        batch_size: int | None = AUTO,
        wait_for_consumers: bool | int = True,
        idle_timeout: float | None = 60.0,
        dir: str | os.PathLike[str] | None = None,
        max_lag: int | str | None = None,
        lag_policy: str = "wait",
        stall_timeout: float = 10.0,
        metadata: dict | None = None,
        seed: int | None = None,
        durable: bool = False,
        fresh: bool = False,
        rejoin_timeout: float = 30.0,
        identity: str = "",
        device: str | list[str] | tuple[str, ...] | None = None,
    ) -> None:
        _check_loader(loader)
        self._min_consumers = _min_consumers(wait_for_consumers)
        #: Trainers `batchcast run` announced (0: none): waited for before
        #: the first batch, with the script's own count.
        self._trainers = _native.trainers_from_env()
        self._loader = loader
        self._size_epochs(loader, samples_per_epoch, batch_size)
        if seed is not None:
            seed = _check_count(seed, "seed", allow_zero=True)
        self._resume = Resume(loader, seed, self._batch_size)
        self._rejoin_timeout = rejoin_timeout
        self._open(
            name,
            durable,
            identity,
            metadata,
            window=window,
            slot_size=slot_size,
            samples_per_epoch=self._samples,
            batch_size=self._batch_size,
            wait_for_consumers=self._min_consumers > 0,
            idle_timeout=idle_timeout,
            dir=None if dir is None else os.fspath(dir),
            max_lag=max_lag,
            lag_policy=lag_policy,
            stall_timeout=stall_timeout,
            fresh=fresh,
            device=_device_list(device),
        )
        self._idle_timeout = idle_timeout
        self._epoch: int | None = None
        self._waited = False
        #: Batches published (so a consumer was attached at some point).
        self._served = 0
        #: The core's rule of when run() ends (None while iterated directly).
        self._rule: Any | None = None
        # A producer still open at interpreter exit tells its consumers the
        # stream finished (rather than leaving them to see it vanish).
        self._finalizer = weakref.finalize(self, self._native.close)

    def _size_epochs(self, loader: Any, samples_per_epoch: Any, batch_size: Any) -> None:
        """The batch size and samples per epoch announced to consumers:
        those given, else derived from ``loader`` (see :func:`_derive_samples`)."""
        if batch_size is AUTO:
            batch_size = _loader_batch_size(loader)
        elif batch_size is not None:
            batch_size = _check_count(batch_size, "batch_size")
        self._samples_derived = samples_per_epoch is AUTO
        #: Why samples_per_epoch is None ("" when it is known).
        self.samples_unknown_reason = ""
        if samples_per_epoch is AUTO:
            samples_per_epoch, self.samples_unknown_reason = _derive_samples(loader, batch_size)
        elif samples_per_epoch is not None:
            samples_per_epoch = _check_count(
                samples_per_epoch, "samples_per_epoch", allow_zero=True
            )
        else:
            self.samples_unknown_reason = "samples_per_epoch=None was given"
        self._samples: int | None = samples_per_epoch
        self._batch_size: int | None = batch_size

    def _open(
        self, name: str, durable: bool, identity: str, metadata: dict | None, **options: Any
    ) -> None:
        """Creates the native producer with ``options`` and gives it
        ``metadata``; if ``durable``, resumes the stream its state file holds
        under ``identity``, if any. Closes it again if that fails."""
        state_identity = self._resume.identity(identity) if durable else None
        self._native = _native.Producer(name, **options, durable=state_identity)
        self._durable = durable
        #: (epoch, row, consumers) where this producer resumed its stream.
        self._resumed: tuple[int, int, int] | None = None
        #: (epoch, row): the resumed epoch's rows to leave out, until taken.
        self._skip_left: tuple[int, int] | None = None
        try:
            if metadata is not None:
                self._native.set_metadata(encode_metadata(metadata))
            if durable:
                self._resumed = self._resume.restore(self._native, self.name)
                self._skip_left = None if self._resumed is None else self._resumed[:2]
                self._note_state()
        except BaseException:
            self._native.close()
            raise

    # -- properties -------------------------------------------------------

    @property
    def devices(self) -> list[dict]:
        """The GPUs the arena is mirrored on (``device=``), one dict each:
        ``device`` (its UUID), ``ordinal``, ``name``, ``copies``, ``bytes`` and
        ``seconds`` copied so far (each copy until it completed),
        ``pinned`` (whether copies come from page-locked memory; None for a
        stand-in) and ``p50_seconds``/``p99_seconds`` per copy. Empty on
        the host path."""
        return self._native.devices

    @property
    def name(self) -> str:
        """The producer's name."""
        return self._native.name

    @property
    def socket_path(self) -> str | None:
        """The Unix socket consumers connect to (None once closed)."""
        path = self._native.socket_path
        return None if path is None else os.fspath(path)

    @property
    def epoch(self) -> int | None:
        """The epoch in progress or last run (from 0); None before the first."""
        return self._epoch

    @property
    def samples_per_epoch(self) -> int | None:
        """Samples per epoch as announced to consumers (None: unknown)."""
        return self._samples

    @property
    def batch_size(self) -> int | None:
        """The nominal batch size (None: the first batch's rows)."""
        return self._batch_size

    @property
    def consumers(self) -> int:
        """Consumers connected now."""
        return self._native.consumers

    @property
    def closed(self) -> bool:
        """True once finished or closed."""
        return self._native.closed

    def status(self) -> dict:
        """Live figures (as ``batchcast status`` shows them)."""
        return self._native.status()

    # -- running ----------------------------------------------------------

    def run(self, epochs: int | None = None, *, forever: bool = False) -> int:
        """Publishes epochs, then finishes; returns the epochs it published.

        By default (``epochs=None``) it serves as long as any consumer needs
        data: trainers come and go, each looping its own number of epochs,
        and the producer runs epochs while at least one is attached. Once the
        last one has left and none has attached for ``idle_timeout`` seconds
        (60 by default), it finishes and says so on the ``batchcast`` logger.
        If no consumer ever attaches within ``idle_timeout``, it raises
        :class:`batchcast.NoConsumers`. ``forever=True`` serves until
        interrupted, however long it is idle. ``epochs=N`` publishes exactly
        N epochs (and raises :class:`batchcast.NoConsumers` if every consumer
        is gone for ``idle_timeout`` before then); consumers that loop more
        get :class:`batchcast.ProducerFinished` saying so.

        When it finishes, consumers' loops end and their next loop raises
        :class:`batchcast.ProducerFinished`. Ctrl-C stops cleanly: consumers
        see the end of the stream, and the KeyboardInterrupt is re-raised
        here. Any other error from the loader is sent to consumers as the
        reason of the end, then re-raised. A loader that yields no batch in
        an epoch (an empty dataset) raises :class:`batchcast.InvalidArgument`
        the same way, at the end of that epoch.
        """
        # The core's rule, the one `batchcast serve` follows (it validates
        # epochs and forever).
        rule = _native.ServeRule(epochs, forever=bool(forever))
        self._rule = rule
        # A resumed stream counts the epochs its predecessors served.
        first = 0 if self._resumed is None else self._resumed[0]
        done = first
        try:
            while rule.wants_epoch(done):
                for _ in self._run_epoch():
                    pass
                done += 1
        except _native.NoConsumers as e:
            if rule.after_no_consumers(self._served) != "end":
                self._finish("failed", _describe_error(e))
                raise
            _log.warning(
                "batchcast: producer %r finishes: no consumer has been attached for %g s (it "
                "served %d epoch(s)); pass idle_timeout= to wait longer for trainers, or "
                "run(forever=True) to serve until interrupted",
                self.name,
                self._idle_timeout,
                done - first,
            )
        except KeyboardInterrupt:
            self._finish("interrupted")
            raise
        except BaseException as e:
            self._finish("failed", _describe_error(e))
            raise
        self._finish("finished")
        return done - first

    def __iter__(self) -> Iterator[Any]:
        """Runs one epoch of the loader, publishing each batch, and yields
        each batch after it was published."""
        return self._run_epoch()

    def _wait_first(self) -> None:
        if self._waited:
            return
        self._waited = True
        if self._resumed is not None and self._resumed[2] > 0:
            self._resume.wait_rejoin(
                self._native, self.name, self._resumed[2], self._rejoin_timeout
            )
        timeout = None if self._rule is not None and self._rule.forever else self._idle_timeout
        self._native.wait_for_start(self._min_consumers, self._trainers, timeout)

    def _note_state(self) -> None:
        if self._durable:
            self._resume.note(self._native, self.name)

    def _take_skip(self, epoch: int) -> int | None:
        """The resume point's row if ``epoch`` is the resumed one (once),
        else None."""
        resumed, self._skip_left = self._skip_left, None
        if resumed is None or resumed[0] != epoch:
            return None
        return resumed[1]

    def _epoch_batches(self, epoch: int, skip: int | None) -> Iterator[Any]:
        kind = self._resume.kind
        if skip is not None and kind == EPOCH:
            return iter(())  # ends the interrupted epoch: it cannot be replayed
        return self._resume.batches(epoch, skip or 0 if kind == SAMPLER else 0)

    def _publish(self, spec: Any, leaves: Any) -> None:
        while True:
            try:
                self._native.publish(spec, leaves)
                return
            except _native.NoConsumers:
                rule = self._rule
                if rule is None or rule.after_no_consumers(self._served) != "retry":
                    raise  # else wait on for a consumer (run(forever=True))

    def _run_epoch(self) -> Iterator[Any]:
        native = self._native
        try:
            self._wait_first()
            epoch = native.begin_epoch()
        except KeyboardInterrupt:
            self._finish("interrupted")
            raise
        self._epoch = epoch
        samples = 0
        batches = 0
        skip = self._take_skip(epoch)
        try:
            for batch in self._epoch_batches(epoch, skip):
                spec, leaves, rows = flatten(batch)
                self._publish(spec, leaves)
                self._note_state()
                self._served += 1
                samples += rows
                batches += 1
                yield batch
        except GeneratorExit:
            # The caller left the loop mid-epoch: end the epoch here, short.
            if not native.closed:
                native.end_epoch()
            raise
        except (KeyboardInterrupt, _native.NoConsumers):
            raise  # the caller finishes the stream
        except BaseException as e:
            self._finish("failed", _describe_error(e))
            raise
        if batches == 0 and skip is None:
            # An empty epoch would be published as one more empty epoch, at
            # once and forever, and consumers of a stream that never had a
            # batch would wait for one forever.
            err = _native.InvalidArgument(
                f"producer {self.name!r}: the loader yielded no batches in epoch {epoch}: it is "
                "empty (a dataset of length 0, or drop_last=True with fewer samples than "
                "batch_size); give the Producer a loader with at least one batch"
            )
            self._finish("failed", _describe_error(err))
            raise err
        native.end_epoch()
        self._resume.seed_epoch(epoch + 1)
        self._note_state()
        if skip is None:
            self._check_samples(epoch, samples)

    def _check_samples(self, epoch: int, samples: int) -> None:
        expected = self._samples
        if expected is None or samples == expected:
            return
        if self._samples_derived:
            warnings.warn(
                f"producer {self.name!r} published {samples} samples in epoch {epoch}, but "
                f"{expected} were derived from the loader and announced to consumers, so their "
                f"len() was wrong for this epoch; announcing {samples} from now on (pass "
                f"samples_per_epoch= to say it up front)",
                RuntimeWarning,
                stacklevel=3,
            )
            self._samples = samples
            self._native.set_samples_per_epoch(samples)
        else:
            warnings.warn(
                f"producer {self.name!r} published {samples} samples in epoch {epoch}, but "
                f"samples_per_epoch={expected}; consumers' len() was wrong for this epoch",
                RuntimeWarning,
                stacklevel=3,
            )

    # -- closing ----------------------------------------------------------

    def _finish(self, reason: str, message: str | None = None) -> None:
        self._native.finish(reason, message)

    def close(self) -> None:
        """Tells consumers the stream is over and frees the name. Idempotent."""
        self._native.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self._finish("finished")
        elif issubclass(exc_type, KeyboardInterrupt):
            self._finish("interrupted")
        else:
            self._finish("failed", _describe_error(exc))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.consumers} consumer(s)"
        return f"<batchcast.Producer {self.name!r} ({state})>"


def _describe_error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _device_list(device: Any) -> str | None:
    """``device=`` as the native producer takes it: a comma-separated list."""
    if device is None:
        return None
    if isinstance(device, str):
        return device
    if isinstance(device, (list, tuple)) and all(isinstance(d, str) for d in device):
        return ",".join(device)
    raise _native.InvalidArgument(
        f"device={device!r}: name GPUs as 'cuda:N' or by UUID, one string or a list of them"
    )


def _check_count(x: Any, what: str, allow_zero: bool = False) -> int:
    try:
        n = x.__index__()
    except AttributeError:
        raise TypeError(f"{what} must be an int or None, not {type(x).__name__}") from None
    if n < 0 or (n == 0 and not allow_zero):
        raise _native.InvalidArgument(f"{what} must be {'>= 0' if allow_zero else '>= 1'}, not {n}")
    return n
