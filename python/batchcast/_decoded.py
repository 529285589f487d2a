"""batchcast.DecodedImages: a decoded stream (as ``batchcast serve
--decode-only``) from a Python dataset, for consumers with ``transform=``."""

from __future__ import annotations

from typing import Any

from . import _native
from ._modules import types_of

__all__ = ["DecodedImages", "store_image"]

#: The largest stored side (as RandomResizedCrop's largest output).
MAX_SIZE = 16384


def _check_size(size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise _native.InvalidArgument(f"size must be an int in 1..{MAX_SIZE}, not {size!r}")
    return size


def _hwc(image: Any) -> Any:
    """``image`` as a C-contiguous ``(height, width, channels)`` array."""
    import numpy

    if isinstance(image, types_of("torch", "Tensor")):
        if image.dim() != 3:
            raise _native.InvalidArgument(
                f"a torch image must be (channels, height, width), as torchvision's are; "
                f"got shape {tuple(image.shape)}"
            )
        return image.detach().permute(1, 2, 0).contiguous()
    if isinstance(image, numpy.ndarray):
        return numpy.ascontiguousarray(image)
    if isinstance(image, types_of("PIL.Image", "Image")):
        if image.mode != "RGB":
            image = image.convert("RGB")  # as torchvision's default loader
        return numpy.asarray(image)
    raise TypeError(
        "a decoded image is a PIL image, a uint8 NumPy array (height, width, 3) or a uint8 "
        f"torch tensor (3, height, width), not {type(image).__name__}"
    )


def store_image(image: Any, size: int) -> Any:
    """``image`` as ``batchcast serve --decode-only --store-size size``
    stores a decoded image: its shorter side resized to ``size`` with the
    native pipeline's antialiased resampler (torchvision's
    ``Resize(size, antialias=True)``), then the centre ``size`` x ``size``
    square. Returns a new ``uint8`` NumPy array ``(size, size, 3)``.

    ``image``: a PIL image (converted to RGB first, as torchvision's loader
    does), a ``uint8`` NumPy array ``(height, width, 3)`` (RGB), or a
    ``uint8`` torch tensor ``(3, height, width)``. Raises
    :class:`batchcast.InvalidArgument` for another dtype, channel count or
    an empty image, and TypeError for another type.
    """
    import numpy

    size = _check_size(size)
    hwc = _hwc(image)
    if 0 in tuple(hwc.shape):
        raise _native.InvalidArgument(f"image is empty (shape {tuple(hwc.shape)})")
    out = numpy.empty((size, size, 3), dtype=numpy.uint8)
    _native.store_image(hwc, size, out)
    return out


class DecodedImages:
    """A map-style dataset of ``(stored image, label)``: each ``(image,
    label)`` sample of ``dataset`` with its image stored as ``batchcast
    serve --decode-only --store-size size`` stores a decoded file (see
    :func:`store_image`; the bytes are the CLI's for the same decoded
    pixels). Load it with a DataLoader and publish it with a Producer, and
    consumers augment it with ``transform=`` as they do the CLI's stream::

        ds = torchvision.datasets.ImageFolder(root)          # PIL images
        loader = torch.utils.data.DataLoader(
            batchcast.DecodedImages(ds, size=256), batch_size=64, num_workers=4)
        batchcast.Producer(loader, name="decoded").run()

        # each trainer
        batchcast.Consumer("decoded", transform=T.Compose([...]), seed=3)

    Images are PIL images, ``uint8`` NumPy arrays ``(height, width, 3)`` or
    ``uint8`` torch tensors ``(3, height, width)`` (as ``torchvision.io``
    decodes); labels pass through (the DataLoader collates ints to
    ``int64``). The resize runs natively with the GIL released, so loader
    threads and workers scale.
    """

    def __init__(self, dataset: Any, size: int = 256) -> None:
        self.dataset = dataset
        self.size = _check_size(size)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> tuple[Any, Any]:
        sample = self.dataset[index]
        if not (isinstance(sample, (tuple, list)) and len(sample) == 2):
            raise TypeError(
                f"DecodedImages needs samples of (image, label); sample {index!r} of "
                f"{type(self.dataset).__name__} is a {type(sample).__name__}"
                + (f" of {len(sample)}" if isinstance(sample, (tuple, list)) else "")
            )
        image, label = sample
        return store_image(image, self.size), label

    def __repr__(self) -> str:
        return f"DecodedImages({self.dataset!r}, size={self.size})"
