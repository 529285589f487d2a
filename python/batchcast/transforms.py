"""Per-consumer augmentation of a decoded stream, on native threads.

A producer that decodes once (``batchcast serve --data DIR --decode-only
--store-size 256``) publishes each image's centre square at the stored
size, ``uint8`` ``(n, S, S, 3)``, with its label. Each trainer augments its
own copy, with its own transform and seed::

    from batchcast import transforms as T

    loader = batchcast.Consumer("imagenet", batch_size=64, transform=T.Compose([
        T.RandomResizedCrop(160, scale=(0.35, 1.0)),
        T.RandomHorizontalFlip(),
        T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    ]), seed=3)
    for images, labels in loader:   # images: float32 (64, 3, 160, 160)
        ...

The ops have torchvision's parameters and semantics (the same arithmetic
as the native pipeline of ``batchcast serve``, torchvision's to the
rounding); the crop is drawn from the stored square rather than the
original file. Without ``Normalize`` the output is ``uint8``; ``Normalize``
includes ``ToTensor``'s scaling to [0, 1]. The work runs in the consumer's
process on ``threads`` native threads with the GIL released; results do
not depend on the thread count, and each consumer's ``seed`` gives it its
own random crops (a fixed seed reproduces them).

Supported now: ``RandomResizedCrop`` (required, first), then optionally
``RandomHorizontalFlip`` and ``Normalize``. Other ops (``ColorJitter``,
``RandAugment``) are not native yet: apply them to the output with
torchvision (which also works on GPU tensors).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple

from . import _native

__all__ = ["Compose", "RandomResizedCrop", "RandomHorizontalFlip", "Normalize"]


def _pair(x: Any, what: str) -> Tuple[float, float]:
    try:
        a, b = (float(v) for v in x)
    except (TypeError, ValueError):
        raise _native.InvalidArgument(f"{what} must be a pair of numbers, not {x!r}") from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise _native.InvalidArgument(f"{what} must be finite, not {x!r}")
    return a, b


class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop(size, scale, ratio)`` (bilinear,
    antialiased): a crop of random area and aspect, resized to ``size``."""

    def __init__(
        self,
        size: int,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
    ) -> None:
        if isinstance(size, (tuple, list)):
            if len(size) != 2 or size[0] != size[1]:
                raise _native.InvalidArgument(f"size {size!r}: only square outputs are supported")
            size = size[0]
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 16384:
            raise _native.InvalidArgument(f"size must be an int in 1..16384, not {size!r}")
        self.size = size
        self.scale = _pair(scale, "scale")
        self.ratio = _pair(ratio, "ratio")

    def __repr__(self) -> str:
        return f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio})"


class RandomHorizontalFlip:
    """torchvision's ``RandomHorizontalFlip(p)``."""

    def __init__(self, p: float = 0.5) -> None:
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise _native.InvalidArgument(f"p must be in [0, 1], not {p}")
        self.p = p

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class Normalize:
    """torchvision's ``ToTensor()`` then ``Normalize(mean, std)``: float32,
    ``(x / 255 - mean) / std`` per channel."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != 3 or len(self.std) != 3:
            raise _native.InvalidArgument("mean and std must have 3 values (R, G, B)")
        if any(s == 0 or not math.isfinite(s) for s in self.std) or not all(map(math.isfinite, self.mean)):
            raise _native.InvalidArgument(f"std must be non-zero and finite: {self.std}")

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


class Compose:
    """A sequence of the ops above, and the output layout (``"nchw"``, as
    torchvision's tensors are, or ``"nhwc"``)."""

    def __init__(self, transforms: Sequence[Any], layout: str = "nchw") -> None:
        self.transforms = list(transforms)
        if layout not in ("nchw", "nhwc"):
            raise _native.InvalidArgument(f"layout must be 'nchw' or 'nhwc', not {layout!r}")
        self.layout = layout
        self.crop, self.flip, self.normalize = self._parse()

    def _parse(self) -> Tuple[RandomResizedCrop, Optional[RandomHorizontalFlip], Optional[Normalize]]:
        ops = list(self.transforms)
        if not ops or not isinstance(ops[0], RandomResizedCrop):
            raise _native.InvalidArgument(
                "a native transform starts with batchcast.transforms.RandomResizedCrop "
                f"(got {ops[0]!r})" if ops else "an empty Compose: give at least RandomResizedCrop"
            )
        crop, flip, normalize = ops.pop(0), None, None
        if ops and isinstance(ops[0], RandomHorizontalFlip):
            flip = ops.pop(0)
        if ops and isinstance(ops[0], Normalize):
            normalize = ops.pop(0)
        if ops:
            raise _native.InvalidArgument(
                f"{ops[0]!r} is not supported here: batchcast runs RandomResizedCrop, then "
                "RandomHorizontalFlip and Normalize, in that order; apply other ops to the "
                "consumer's output (torchvision works on those tensors)"
            )
        return crop, flip, normalize

    def native(self, threads: int, seed: int) -> Any:
        """The ``_native.Augmenter`` running these ops."""
        kwargs = {}
        if self.normalize is not None:
            kwargs = {"mean": self.normalize.mean, "std": self.normalize.std}
        return _native.Augmenter(
            self.crop.size,
            scale=self.crop.scale,
            ratio=self.crop.ratio,
            hflip_p=0.0 if self.flip is None else self.flip.p,
            layout=self.layout,
            threads=threads,
            seed=seed,
            **kwargs,
        )

    @property
    def dtype(self) -> str:
        """``"float32"`` with Normalize, else ``"uint8"``."""
        return "uint8" if self.normalize is None else "float32"

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r}, layout={self.layout!r})"
