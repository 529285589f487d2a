"""batchcast: share one data pipeline between many training processes.

A :class:`Producer` runs one data loader and writes each batch once into
shared memory; any number of :class:`Consumer` processes on the same machine
read it without copies, each at its own pace and batch size, as a drop-in
for their DataLoader::

    # producer.py: serves for as long as any trainer reads
    batchcast.Producer(loader, name="cifar").run()

    # train.py (any number of them)
    loader = batchcast.Consumer("cifar", batch_size=64)
    for epoch in range(10):
        for images, labels in loader:
            ...

Batches are read-only views of shared memory; see :class:`Consumer`.
A decoded stream (``batchcast serve --decode-only``) from a Python dataset:
:class:`DecodedImages`; consumers augment it with ``transform=``.
Under ``batchcast run``, :func:`log_metrics` and :func:`log_params` record
a script's own values in its run.
A trainer chooses the samples worth a step for its own model, on its own
device, with :mod:`batchcast.select`; the producer selects once for all of
them with :class:`SelectSampler` (the samplers of ``serve --select``).
Every error derives from :class:`BatchcastError`.
"""

from . import select
from ._consumer import Consumer, EpochInfo
from ._decoded import DecodedImages, store_image
from ._metrics import log_metric, log_metrics, log_param, log_params
from ._native import (
    BatchcastError,
    BatchTooLarge,
    FellBehind,
    InvalidArgument,
    InvalidBatch,
    IoError,
    JoinRefused,
    NameInUse,
    NoConsumers,
    OutOfSharedMemory,
    PermissionDenied,
    ProducerFinished,
    ProducerGone,
    ProducerNotFound,
    ProtocolError,
    UsageError,
    __version__,
)
from ._producer import Producer
from ._select_sampler import SelectSampler, Weighted
from ._spec import ArraySpec, StreamMismatch, StreamSpec
from ._triggers import Trigger

__all__ = [
    "Producer",
    "Consumer",
    "EpochInfo",
    "Trigger",
    "SelectSampler",
    "Weighted",
    "DecodedImages",
    "store_image",
    "log_metric",
    "log_metrics",
    "log_param",
    "log_params",
    "StreamSpec",
    "ArraySpec",
    "StreamMismatch",
    "select",
    "BatchcastError",
    "BatchTooLarge",
    "FellBehind",
    "InvalidArgument",
    "InvalidBatch",
    "IoError",
    "JoinRefused",
    "NameInUse",
    "NoConsumers",
    "OutOfSharedMemory",
    "PermissionDenied",
    "ProducerFinished",
    "ProducerGone",
    "ProducerNotFound",
    "ProtocolError",
    "UsageError",
    "__version__",
]
