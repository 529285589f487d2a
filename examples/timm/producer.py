"""The producer of timm's training batches for shared_loader.py: timm's own
dataset and training loader (augmentation included), run once for every
trainer. With --generate it first writes a small generated ImageFolder.

    python examples/timm/producer.py DATA --generate --img-size 32 -b 64
"""

from __future__ import annotations

import argparse
import os

NAME = os.environ.get("BATCHCAST_NAME", "timm-train")


def generate(root: str, classes: int = 4, per_class: int = 32, size: int = 40) -> None:
    """Writes root/{train,validation}/class_c/*.png: class c is brighter."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "validation"):
        for c in range(classes):
            d = os.path.join(root, split, f"class_{c}")
            os.makedirs(d, exist_ok=True)
            for i in range(per_class):
                pixels = rng.integers(0, 128, (size, size, 3)) + c * 32
                Image.fromarray(pixels.astype(np.uint8)).save(os.path.join(d, f"{i}.png"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--generate", action="store_true")
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("-b", "--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prefetcher", action="store_true",
                        help="send uint8 images (for trainers that use timm's prefetcher)")
    parser.add_argument("--idle-timeout", type=float, default=60.0)
    parser.add_argument("--trainers", type=int, default=1,
                        help="wait for this many trainers before the first batch (under "
                             "torchrun: one per rank)")
    # train.py's augmentation flags, with train.py's defaults: a trainer
    # whose flags differ from these is refused (see augmentation.py).
    aug = parser.add_argument_group("augmentation (train.py's flags and defaults)")
    aug.add_argument("--no-aug", action="store_true")
    aug.add_argument("--train-crop-mode", default=None)
    aug.add_argument("--scale", type=float, nargs=2, default=[0.08, 1.0])
    aug.add_argument("--ratio", type=float, nargs=2, default=[3 / 4, 4 / 3])
    aug.add_argument("--hflip", type=float, default=0.5)
    aug.add_argument("--vflip", type=float, default=0.0)
    aug.add_argument("--color-jitter", type=float, default=0.4)
    aug.add_argument("--color-jitter-prob", type=float, default=None)
    aug.add_argument("--grayscale-prob", type=float, default=0.0)
    aug.add_argument("--gaussian-blur-prob", type=float, default=0.0)
    aug.add_argument("--aa", default=None)
    aug.add_argument("--train-interpolation", default="random")
    aug.add_argument("--mean", type=float, nargs="+", default=None)
    aug.add_argument("--std", type=float, nargs="+", default=None)
    aug.add_argument("--reprob", type=float, default=0.0)
    aug.add_argument("--remode", default="pixel")
    aug.add_argument("--recount", type=int, default=1)
    aug.add_argument("--resplit", action="store_true")
    args = parser.parse_args()
    if args.generate:
        generate(args.data)

    import batchcast
    import torch
    from augmentation import FLAGS, announced
    from timm.data import create_dataset, create_loader

    options = {key: getattr(args, flag[2:].replace("-", "_")) for key, flag in FLAGS.items()}
    options = {k: v for k, v in options.items() if v is not None}  # create_loader's default
    dataset = create_dataset("", root=args.data, split="train", is_training=True)
    loader = create_loader(dataset, input_size=(3, args.img_size, args.img_size),
                           batch_size=args.batch_size, is_training=True,
                           use_prefetcher=args.prefetcher, num_workers=args.workers,
                           device=torch.device("cpu"), **options)
    if args.prefetcher:
        loader = loader.loader  # the uint8 batches, before timm's PrefetchLoader
    metadata = {"img_size": args.img_size, "source": "timm",
                "augmentation": announced(options, args.prefetcher)}
    producer = batchcast.Producer(loader, NAME, idle_timeout=args.idle_timeout,
                                  wait_for_consumers=args.trainers, metadata=metadata)
    print(f"producer: served {producer.run()} epochs", flush=True)


if __name__ == "__main__":
    main()
