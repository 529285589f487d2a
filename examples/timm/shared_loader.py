"""Run timm's own train.py with its training loader replaced by a shared
batchcast producer. Nothing in train.py changes: this wrapper replaces
timm.data.create_loader for the training split only (validation keeps its
own loader), then runs train.py as its __main__.

    # one producer (see producer.py), any number of trainers:
    python examples/timm/shared_loader.py PATH/TO/pytorch-image-models/train.py DATA \\
        --model resnet10t --img-size 32 -b 64 --epochs 3 --lr 0.1 --no-prefetcher --device cpu

BATCHCAST_NAME picks the producer (default "timm-train"). The trainer states
what it expects (its input size, and uint8 images with the prefetcher,
float32 without), so a trainer started with --img-size 96 against a 32-px
producer, or with the prefetcher against a producer without --prefetcher,
stops at connection with both sides named instead of training on the wrong
images. With the prefetcher on (train.py's default, on a GPU), timm's
PrefetchLoader wraps the Consumer and normalises on the GPU: run the
producer with --prefetcher then, so that it sends uint8.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

NAME = os.environ.get("BATCHCAST_NAME", "timm-train")


def shared_create_loader(real: Any) -> Any:
    """timm.data.create_loader, with the training loader read from the
    producer NAME."""

    def create_loader(dataset: Any, input_size: Any, batch_size: int, is_training: bool = False,
                      **kwargs: Any) -> Any:
        if not is_training:
            return real(dataset, input_size, batch_size, is_training=is_training, **kwargs)
        import batchcast

        shape = tuple(input_size) if isinstance(input_size, (tuple, list)) else (3, input_size,
                                                                                 input_size)
        prefetcher = kwargs.get("use_prefetcher", True)
        # timm's prefetcher normalises uint8 images in the trainer; without
        # it the producer's transform sends them normalised, as float32.
        dtype = "uint8" if prefetcher else "float32"
        try:
            consumer = batchcast.Consumer(NAME, batch_size=batch_size, connect_timeout=120,
                                          expect={"batch[0]": {"shape": shape, "dtype": dtype}})
        except batchcast.StreamMismatch as e:
            raise batchcast.StreamMismatch(
                f"{e}. A train.py with timm's prefetcher (its default) reads uint8 images: start "
                "examples/timm/producer.py with --prefetcher; one run with --no-prefetcher reads "
                "float32 images: start the producer without --prefetcher"
            ) from None
        if prefetcher:
            import torch
            from timm.data.loader import PrefetchLoader

            return PrefetchLoader(consumer, device=kwargs.get("device", torch.device("cuda")),
                                  **{k: kwargs[k] for k in ("mean", "std") if k in kwargs})
        return consumer

    return create_loader


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    import timm.data

    timm.data.create_loader = shared_create_loader(timm.data.create_loader)
    train_py = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(train_py, run_name="__main__")


if __name__ == "__main__":
    main()
