"""The DataLoader attributes that training scripts read, for a Consumer.

Training code written for a ``torch.utils.data.DataLoader`` reads more than
its batches: timm's ``train.py`` calls ``set_epoch`` on ``loader.dataset``,
``loader.batch_sampler`` or ``loader.sampler`` if they have one (reading
``loader.dataset`` unguarded); Lightning calls ``set_epoch`` on
``loader.sampler`` and ``loader.batch_sampler.sampler``; scripts log
``len(loader.dataset)``, ``loader.batch_size`` and ``loader.num_workers``.

A consumer does not sample: the producer's loader decides which samples
come, in which order. So these stand-ins describe the stream instead of
driving it. Each has an exact ``len()`` (samples, or batches for the batch
sampler) when the producer announced its epoch size; none can be iterated
(there are no indices to give), and their ``set_epoch`` is accepted and does
nothing (the producer's own sampler shuffles; it is the one to seed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

from ._position import Position

__all__ = [
    "LoaderSurface",
    "StreamDataset",
    "StreamSampler",
    "StreamBatchSampler",
    "SkipFirstBatches",
]


class _Described:
    """Shared by the stand-ins: a length read from the consumer when asked."""

    _what = "stand-in"

    def __init__(self, name: str, length: Callable[[], int]) -> None:
        self._name = name
        self._length = length
        #: The last epoch a script passed to ``set_epoch`` (None: never called).
        self.epoch: int | None = None

    def __len__(self) -> int:
        return self._length()

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(
            f"the {self._what} of batchcast.Consumer({self._name!r}) cannot be iterated: the "
            "producer's loader samples, not this process; iterate the Consumer for batches"
        )

    def set_epoch(self, epoch: int) -> None:
        """Accepted and ignored: the producer's loader decides the order of
        samples (seed its sampler there). Records ``epoch``."""
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"<batchcast {self._what} of {self._name!r}>"


class StreamDataset(_Described):
    """``Consumer.dataset``: ``len()`` is the samples this consumer receives
    in an epoch; it cannot be indexed (the samples live in the producer)."""

    _what = "dataset"

    def __getitem__(self, index: Any) -> Any:
        raise TypeError(
            f"the dataset of batchcast.Consumer({self._name!r}) cannot be indexed: its samples "
            "are loaded by the producer; iterate the Consumer for batches"
        )


class StreamSampler(_Described):
    """``Consumer.sampler``: ``len()`` is the samples per epoch."""

    _what = "sampler"


class StreamBatchSampler(_Described):
    """``Consumer.batch_sampler``: ``len()`` is the batches per epoch;
    ``batch_size``, ``drop_last`` and ``sampler`` are the consumer's."""

    _what = "batch sampler"

    def __init__(
        self,
        name: str,
        length: Callable[[], int],
        batch_size: Callable[[], int | None],
        drop_last: bool,
        sampler: StreamSampler,
    ) -> None:
        super().__init__(name, length)
        self._batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler

    @property
    def batch_size(self) -> int | None:
        return self._batch_size()


class SkipFirstBatches:
    """``Consumer.skip_first_batches(n)``: the consumer's next epoch without
    its first ``n`` batches (to resume an epoch from a checkpoint, as
    accelerate's ``skip_first_batches`` does for a DataLoader). The skipped
    batches are taken from the stream and released at once: nothing is
    loaded or copied for them. ``len()`` is the batches left."""

    def __init__(self, consumer: Any, num_batches: int) -> None:
        if isinstance(num_batches, bool) or not hasattr(num_batches, "__index__"):
            raise TypeError(f"num_batches must be an int, not {type(num_batches).__name__}")
        if num_batches.__index__() < 0:
            raise ValueError(f"num_batches must be at least 0, not {num_batches}")
        self._consumer = consumer
        self._skip = num_batches.__index__()

    def __len__(self) -> int:
        return max(len(self._consumer) - self._skip, 0)

    def __iter__(self) -> Iterator[Any]:
        batches = iter(self._consumer)
        for _ in range(self._skip):
            if next(batches, None) is None:
                return
        yield from batches

    def __getattr__(self, name: str) -> Any:
        # dataset, sampler, batch_size, ...: the consumer's.
        return getattr(self._consumer, name)


class LoaderSurface(Position):
    """The DataLoader half of :class:`batchcast.Consumer`: what scripts
    written for a DataLoader read besides the batches. Each value is chosen
    so that the common code paths of timm's train.py, Lightning, Accelerate
    and torchvision's reference scripts do the right thing with a Consumer.
    The Consumer sets ``_pinned``."""

    #: Whether the arena is page-locked for copies to the GPU.
    _pinned: bool

    def _init_surface(self, name: str) -> None:
        """Makes the stand-ins, whose lengths are read when asked."""
        self._sampler = StreamSampler(name, self._samples_per_epoch)
        self._dataset = StreamDataset(name, self._samples_per_epoch)
        self._batch_sampler = StreamBatchSampler(
            name, self._full_batches, lambda: self.batch_size, self._drop_last, self._sampler
        )

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
