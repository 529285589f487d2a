"""A consumer's ``transform=``: the native augmenter behind
:mod:`batchcast.transforms`, run on each decoded batch."""

from __future__ import annotations

import os
from typing import Any

from . import _native
from ._device import Transfers


class Augment:
    """A consumer's ``transform=``: augments each decoded batch into fresh
    memory of this process (see :mod:`batchcast.transforms`)."""

    def __init__(
        self, transform: Any, seed: int | None, threads: int, fmt: str, transfers: Transfers | None
    ) -> None:
        from . import transforms

        if isinstance(transform, transforms.RandomResizedCrop):
            transform = transforms.Compose([transform])
        if not isinstance(transform, transforms.Compose):
            raise TypeError(
                "transform must be a batchcast.transforms.Compose (or RandomResizedCrop), "
                f"not {type(transform).__name__}; torchvision transforms run on the output instead"
            )
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise _native.InvalidArgument(f"seed must be an int in [0, 2**64), not {seed!r}")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise _native.InvalidArgument(
                f"transform_threads must be a positive int, not {threads!r}"
            )
        self.seed = seed
        self._native = transform.native(threads, seed)
        self._dtype = transform.dtype
        self._format = fmt
        self._transfers = transfers

    def __call__(self, batch: Any, epoch: int, first_key: int, name: str) -> Any:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise _native.InvalidBatch(
                f"transform= needs a decoded stream of (images, labels), as `batchcast serve "
                f"--decode-only` sends; producer {name!r} sends {type(batch).__name__}"
            )
        images, labels = batch
        # Into the augmenter's own reused memory (no page faults of a fresh
        # batch); it is reused only once every array viewing it is freed.
        view = self._native.augment_pooled(images, epoch, first_key)
        out: Any
        if self._format == "torch":
            import torch

            out = torch.from_dlpack(view)
        else:
            import numpy

            out = numpy.from_dlpack(view)
        del view
        if self._transfers is not None:
            # The labels view the producer's slot, the images the augmenter's
            # pool: both stay referenced until their copies have completed.
            with self._transfers.batch() as move:
                out, labels = move(out), move(labels)
        return (out, labels) if isinstance(batch, tuple) else [out, labels]
