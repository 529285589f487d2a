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

Supported, in this order: ``RandomResizedCrop`` (or, for an evaluation
loader, ``Resize(r)`` then ``CenterCrop(c)``, without a flip) first, then
optionally ``RandomHorizontalFlip``, one of ``TrivialAugmentWide`` /
``RandAugment``, ``ColorJitter``, and ``Normalize``. Other ops: apply them
to the output with torchvision (which also works on GPU tensors).

The colour and auto-augment ops follow torchvision's tensor (``uint8``)
implementations, in ``float32`` as torch computes them:

- ``ColorJitter(brightness, contrast, saturation, hue)``: a random order
  of the four adjustments per image, each factor uniform in its range;
- ``TrivialAugmentWide()`` (one op per image, a random magnitude bin) and
  ``RandAugment(num_ops=2, magnitude=9)`` (``num_ops`` ops at bin
  ``magnitude``) draw uniformly from torchvision's 14 ops with its
  magnitude tables and a random sign: Identity, ShearX, ShearY,
  TranslateX, TranslateY, Rotate (NEAREST interpolation, fill 0),
  Brightness, Color, Contrast, Sharpness, Posterize, Solarize,
  AutoContrast, Equalize.

Against torchvision with the same parameters (tests/python/
test_augment_colour.py), every op is bit-identical on the test images
(random, odd-sized, smooth, up to 320x300). The tests assert that for
the pointwise and histogram ops (hue included); sharpness (a convolution)
and the geometric ops (a matrix product) are asserted within one level /
pixel-identical on 99.9%, room for another CPU's accumulation order.
The random draws are batchcast's own (from
``(seed, epoch, sample)``), with torchvision's distributions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from . import _native

__all__ = [
    "Compose",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "RandomHorizontalFlip",
    "TrivialAugmentWide",
    "RandAugment",
    "ColorJitter",
    "Normalize",
]

_ORDER = (
    "RandomResizedCrop (or Resize then CenterCrop), then optionally RandomHorizontalFlip (not "
    "after CenterCrop), one of TrivialAugmentWide / RandAugment, ColorJitter and Normalize, in "
    "that order"
)


def _pair(x: Any, what: str) -> tuple[float, float]:
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


def _side(size: Any, what: str) -> int:
    if isinstance(size, (tuple, list)):
        if len(size) == 1:
            size = size[0]
        elif len(size) == 2 and size[0] == size[1] and what == "CenterCrop":
            size = size[0]
        else:
            raise _native.InvalidArgument(
                f"{what} size {size!r}: only "
                + (
                    "an int (the shorter side) is supported"
                    if what == "Resize"
                    else "square crops are supported"
                )
            )
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 16384:
        raise _native.InvalidArgument(f"{what} size must be an int in 1..16384, not {size!r}")
    return size


class Resize:
    """torchvision's ``Resize(size)`` for an int ``size``: the shorter side
    to ``size`` (bilinear, antialiased), the aspect kept. Natively only as
    ``Resize(r)`` then ``CenterCrop(c)``, an evaluation loader's geometry."""

    def __init__(self, size: int) -> None:
        self.size = _side(size, "Resize")

    def __repr__(self) -> str:
        return f"Resize(size={self.size})"


class CenterCrop:
    """torchvision's ``CenterCrop(size)``: the central ``size`` x ``size``
    square (at most the resized shorter side)."""

    def __init__(self, size: int) -> None:
        self.size = _side(size, "CenterCrop")

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class RandomHorizontalFlip:
    """torchvision's ``RandomHorizontalFlip(p)``."""

    def __init__(self, p: float = 0.5) -> None:
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise _native.InvalidArgument(f"p must be in [0, 1], not {p}")
        self.p = p

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


def _jitter_range(
    value: Any, name: str, center: float, bound: tuple[float, float], clip: bool
) -> tuple[float, float] | None:
    """torchvision's ``ColorJitter._check_input``: a number ``v`` is the
    range ``(center - v, center + v)``; ``None`` when the range does
    nothing."""
    if isinstance(value, bool):
        raise _native.InvalidArgument(
            f"{name} must be a number or a (min, max) pair, not {value!r}"
        )
    if isinstance(value, (int, float)):
        if not value >= 0:
            raise _native.InvalidArgument(
                f"{name} {value!r}: a single number must be non-negative (e.g. {name}=0.4)"
            )
        lo, hi = center - float(value), center + float(value)
        if clip:
            lo = max(lo, 0.0)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        lo, hi = _pair(value, name)
    else:
        raise _native.InvalidArgument(
            f"{name} must be a number or a (min, max) pair, not {value!r} (e.g. {name}=0.4)"
        )
    if not (bound[0] <= lo <= hi <= bound[1]) or not math.isfinite(hi):
        raise _native.InvalidArgument(
            f"{name} range ({lo}, {hi}) must satisfy {bound[0]} <= min <= max <= {bound[1]}"
        )
    return None if lo == hi == center else (lo, hi)


class ColorJitter:
    """torchvision's ``ColorJitter(brightness, contrast, saturation, hue)``:
    per image, the four adjustments in a random order, each with a factor
    drawn uniformly from its range (a number ``v`` means ``(1 - v, 1 + v)``,
    clipped at 0, or ``(-v, v)`` for the hue, at most 0.5)."""

    def __init__(
        self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0, hue: Any = 0
    ) -> None:
        inf = float("inf")
        self.brightness = _jitter_range(brightness, "brightness", 1.0, (0.0, inf), True)
        self.contrast = _jitter_range(contrast, "contrast", 1.0, (0.0, inf), True)
        self.saturation = _jitter_range(saturation, "saturation", 1.0, (0.0, inf), True)
        self.hue = _jitter_range(hue, "hue", 0.0, (-0.5, 0.5), False)

    def ranges(self) -> tuple:
        """The four ranges, ``None`` for an adjustment left out."""
        return (self.brightness, self.contrast, self.saturation, self.hue)

    def __repr__(self) -> str:
        return (
            f"ColorJitter(brightness={self.brightness}, contrast={self.contrast}, "
            f"saturation={self.saturation}, hue={self.hue})"
        )


def _int(value: Any, name: str, lo: int, hi: int, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _native.InvalidArgument(
            f"{name} must be an int in {lo}..{hi}, not {value!r} ({example})"
        )
    return value


def _native_only(interpolation: Any, fill: Any, name: str) -> None:
    """The geometric ops run with NEAREST interpolation and fill 0."""
    mode = getattr(interpolation, "value", interpolation)
    if mode != "nearest":
        raise _native.InvalidArgument(
            f"{name}: interpolation {interpolation!r} is not native; only NEAREST (the default) is"
        )
    fills = fill if isinstance(fill, (tuple, list)) else [fill]
    if fill is not None and any(isinstance(f, bool) or f != 0 for f in fills):
        raise _native.InvalidArgument(
            f"{name}: fill {fill!r} is not native; only fill=None or 0 is"
        )


class TrivialAugmentWide:
    """torchvision's ``TrivialAugmentWide(num_magnitude_bins=31)``: one of
    the 14 ops (see the module's docstring) per image, uniformly, at a
    uniform magnitude bin, with a random sign. ``interpolation`` must be
    NEAREST and ``fill`` None or 0 (the defaults)."""

    def __init__(
        self, num_magnitude_bins: int = 31, interpolation: Any = "nearest", fill: Any = None
    ) -> None:
        self.num_magnitude_bins = _int(num_magnitude_bins, "num_magnitude_bins", 2, 1024, "e.g. 31")
        _native_only(interpolation, fill, "TrivialAugmentWide")

    def native_kwargs(self) -> dict:
        return {"auto": "trivialaugmentwide", "num_magnitude_bins": self.num_magnitude_bins}

    def __repr__(self) -> str:
        return f"TrivialAugmentWide(num_magnitude_bins={self.num_magnitude_bins})"


class RandAugment:
    """torchvision's ``RandAugment(num_ops=2, magnitude=9,
    num_magnitude_bins=31)``: ``num_ops`` of the 14 ops (see the module's
    docstring) per image, each drawn uniformly, at magnitude bin
    ``magnitude``, with a random sign. ``interpolation`` must be NEAREST
    and ``fill`` None or 0 (the defaults)."""

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        interpolation: Any = "nearest",
        fill: Any = None,
    ) -> None:
        self.num_magnitude_bins = _int(num_magnitude_bins, "num_magnitude_bins", 2, 1024, "e.g. 31")
        self.num_ops = _int(num_ops, "num_ops", 0, 64, "e.g. 2")
        self.magnitude = _int(
            magnitude,
            "magnitude",
            0,
            self.num_magnitude_bins - 1,
            "a bin below num_magnitude_bins, e.g. 9",
        )
        _native_only(interpolation, fill, "RandAugment")

    def native_kwargs(self) -> dict:
        return {
            "auto": "randaugment",
            "num_ops": self.num_ops,
            "magnitude": self.magnitude,
            "num_magnitude_bins": self.num_magnitude_bins,
        }

    def __repr__(self) -> str:
        return (
            f"RandAugment(num_ops={self.num_ops}, magnitude={self.magnitude}, "
            f"num_magnitude_bins={self.num_magnitude_bins})"
        )


class Normalize:
    """torchvision's ``ToTensor()`` then ``Normalize(mean, std)``: float32,
    ``(x / 255 - mean) / std`` per channel."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != 3 or len(self.std) != 3:
            raise _native.InvalidArgument("mean and std must have 3 values (R, G, B)")
        if any(s == 0 or not math.isfinite(s) for s in self.std) or not all(
            map(math.isfinite, self.mean)
        ):
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
        self.crop, self.flip, self.auto, self.jitter, self.normalize = self._parse()

    def _parse(self) -> tuple:
        ops = list(self.transforms)
        if not ops:
            raise _native.InvalidArgument("an empty Compose: give at least RandomResizedCrop")
        if isinstance(ops[0], RandomResizedCrop):
            crop = ops.pop(0)
        elif isinstance(ops[0], Resize) and len(ops) > 1 and isinstance(ops[1], CenterCrop):
            crop = (ops.pop(0), ops.pop(0))
            if ops and isinstance(ops[0], RandomHorizontalFlip):
                raise _native.InvalidArgument(
                    "Resize + CenterCrop takes no RandomHorizontalFlip here: use RandomResizedCrop "
                    "for random crops and flips, or flip the output with torchvision"
                )
        else:
            raise _native.InvalidArgument(
                "a native transform starts with batchcast.transforms.RandomResizedCrop, or "
                f"Resize then CenterCrop (got {ops[0]!r}); the order is {_ORDER}"
            )
        flip = ops.pop(0) if ops and isinstance(ops[0], RandomHorizontalFlip) else None
        auto = ops.pop(0) if ops and isinstance(ops[0], (TrivialAugmentWide, RandAugment)) else None
        jitter = ops.pop(0) if ops and isinstance(ops[0], ColorJitter) else None
        normalize = ops.pop(0) if ops and isinstance(ops[0], Normalize) else None
        if ops:
            known = (
                RandomResizedCrop,
                Resize,
                CenterCrop,
                RandomHorizontalFlip,
                TrivialAugmentWide,
                RandAugment,
                ColorJitter,
                Normalize,
            )
            if isinstance(ops[0], known):
                raise _native.InvalidArgument(
                    f"{ops[0]!r} is not supported here, out of order (or repeated): batchcast "
                    f"runs {_ORDER}"
                )
            raise _native.InvalidArgument(
                f"{ops[0]!r} is not supported here: batchcast runs {_ORDER}; apply other ops to "
                "the consumer's output (torchvision works on those tensors)"
            )
        return crop, flip, auto, jitter, normalize

    def native(self, threads: int, seed: int) -> Any:
        """The ``_native.Augmenter`` running these ops."""
        kwargs = {}
        if self.normalize is not None:
            kwargs = {"mean": self.normalize.mean, "std": self.normalize.std}
        if self.auto is not None:
            kwargs.update(self.auto.native_kwargs())
        if self.jitter is not None:
            kwargs["jitter"] = self.jitter.ranges()
        if isinstance(self.crop, tuple):  # Resize, CenterCrop
            resize, centre = self.crop
            kwargs.update(resize=resize.size, hflip_p=0.0)
            return _native.Augmenter(
                centre.size, layout=self.layout, threads=threads, seed=seed, **kwargs
            )
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
