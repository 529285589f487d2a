"""``SelectSampler``: the selections of ``batchcast serve --select`` as a
``torch.utils.data.Sampler`` for a map-style dataset whose loader a
:class:`batchcast.Producer` owns.

The spec is parsed and every epoch's samples are drawn and ordered by the
native ``Selection`` (the one the CLI uses): this module only keeps the
epoch. The loader decodes only the samples the sampler yields, once, for
every consumer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from . import _native

try:
    from torch.utils.data import Sampler as _Base
except ImportError:  # torch is optional: the sampler also serves plain loops
    _Base = object  # type: ignore[assignment,misc]


def _as_list(values: Any) -> Any:
    """A tensor's or an ndarray's values as a list (None stays None)."""
    if values is None or isinstance(values, (list, tuple)):
        return values
    tolist = getattr(values, "tolist", None)
    return tolist() if callable(tolist) else list(values)


def _selection(args: dict[str, Any]) -> Any:
    """The native ``Selection`` of a sampler's constructor arguments."""
    return _native.Selection(
        **{**args, "labels": _as_list(args["labels"]), "scores": _as_list(args["scores"])}
    )


class SelectSampler(_Base):
    """The samples of each epoch that ``spec`` selects, in the epoch's order.

    ``spec`` takes the forms of ``batchcast serve --select``: ``random:R``,
    ``label-balanced:R`` (needs ``labels``), ``rs2:R`` / ``rs2:R,replace``
    and ``scores=FILE,keep=P`` (FILE a 1-D float ``.npy``, one score per
    sample; or ``scores=-,keep=P`` with the scores given as ``scores=``). ``new-data`` and ``freshness:P`` need arrival times, which a
    map-style dataset has not: they are refused (serve a growing folder with
    :func:`batchcast.serve.serve_folder` instead). Draws are seeded by
    ``(seed, epoch)``: the same seed selects the same samples, in the same
    order, as ``batchcast serve --select ... --seed`` over a dataset with
    the same labels.

    Each ``iter()`` is one epoch: the epoch given to :meth:`set_epoch`, else
    the one after the last (from 0), so a :class:`batchcast.Producer`, which
    iterates its loader once per epoch, gets a fresh epoch each time.
    ``iter()`` and :meth:`set_epoch` may be called from several threads: each
    ``iter()`` takes its own epoch under a lock. The sampler (and
    :class:`Weighted` over it) can be pickled, so DataLoader workers started
    with ``spawn`` or ``forkserver`` can use it::

        sampler = batchcast.SelectSampler("label-balanced:20", labels=ds.targets)
        loader = DataLoader(ds, batch_size=64, sampler=sampler)
        batchcast.Producer(loader, name="cifar").run()

    Args:
        spec: the selection, as ``--select`` takes it.
        labels: one int label per sample (label-balanced needs them).
        n: the dataset's length, when no labels are given.
        seed: seeds the selection and the order.
        shuffle: order each epoch's samples at random (else dataset order).
        scores: one finite score per sample, for ``scores=-,keep=P``.

    Raises:
        batchcast.InvalidArgument: a spec the CLI refuses (same message), a
            spec needing arrivals, or neither ``labels`` nor ``n``.
        batchcast.IoError: a scores file that cannot be read.
    """

    def __init__(
        self,
        spec: str,
        *,
        labels: Sequence[int] | Any | None = None,
        n: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        scores: Sequence[float] | Any | None = None,
    ) -> None:
        # Kept as given (a tensor or an ndarray stays one, not a list of
        # Python ints) for __getstate__.
        self._args: dict[str, Any] = {
            "spec": spec,
            "labels": labels,
            "n": n,
            "seed": seed,
            "shuffle": shuffle,
            "scores": scores,
        }
        self._selection = _selection(self._args)
        self._lock = threading.Lock()
        self._next = 0
        self._asked: int | None = None
        #: The epoch of the last ``iter()`` (None before the first).
        self.epoch: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        """The constructor's arguments and the epoch counters: a copy sent
        to a DataLoader worker started with ``spawn`` or ``forkserver``
        draws its selection again from them (a ``scores=FILE`` is read
        again there)."""
        with self._lock:
            return {
                "args": self._args,
                "next": self._next,
                "asked": self._asked,
                "epoch": self.epoch,
            }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._args = state["args"]
        self._selection = _selection(self._args)
        self._lock = threading.Lock()
        self._next = state["next"]
        self._asked = state["asked"]
        self.epoch = state["epoch"]

    def set_epoch(self, epoch: int) -> None:
        """Makes the next ``iter()`` serve ``epoch``."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise _native.InvalidArgument(f"epoch must be a non-negative int, not {epoch!r}")
        with self._lock:
            self._asked = epoch

    def __iter__(self) -> Iterator[int]:
        with self._lock:
            epoch = self._next if self._asked is None else self._asked
            self._asked = None
            self._next = epoch + 1
            self.epoch = epoch
        return iter(self._selection.order(epoch))

    def __len__(self) -> int:
        """Samples per epoch (the same every epoch)."""
        return self._selection.count

    @property
    def has_weights(self) -> bool:
        """True when the spec defines per-sample weights (label-balanced:
        a class's share of the dataset over its share of the selection)."""
        return self._selection.has_weights

    def weight(self, index: int) -> float:
        """The weight of sample ``index`` (1.0 where the spec defines none)."""
        return self._selection.weight(index)

    @property
    def weights(self) -> Any:
        """Every sample's weight in dataset order, as a float32 tensor."""
        import torch

        return torch.tensor(self._selection.weights(), dtype=torch.float32)

    def __repr__(self) -> str:
        return f"SelectSampler({self._selection!r})"


class Weighted:
    """A map-style dataset whose item ``i`` is ``(dataset[i], weight(i))``:
    delivers a :class:`SelectSampler`'s per-sample weights as one more leaf
    of the batch, for a weighted loss in every consumer::

        loader = DataLoader(batchcast.Weighted(ds, sampler), sampler=sampler, batch_size=64)
        # consumers: for (images, labels), weights in consumer: ...
    """

    def __init__(self, dataset: Any, sampler: SelectSampler) -> None:
        self.dataset = dataset
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        import torch

        # float32, as `serve --select-weights` delivers its weights leaf.
        return self.dataset[index], torch.tensor(self.sampler.weight(index), dtype=torch.float32)
