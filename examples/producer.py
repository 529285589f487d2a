"""The data side of a shared pipeline: load, decode and augment each batch
once, and serve it to every training process on this machine.

    python examples/producer.py --epochs 3 &
    python examples/consumer.py --lr 0.05 &     # as many trainers as you like,
    python examples/consumer.py --lr 0.01       # each with its own settings

The dataset is made on the fly (a CIFAR-10-sized synthetic image set whose
classes are learnable), so the example needs nothing but torch and batchcast.
Ctrl-C stops the producer cleanly: its consumers finish their epoch loop.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch.utils.data import DataLoader, Dataset

import batchcast


class SyntheticImages(Dataset):
    """`size` 3x32x32 images in 10 classes: each class is a colour and a
    stripe frequency, plus noise. Sample i is the same on every call."""

    def __init__(self, size: int = 4096, train: bool = True) -> None:
        self.size = size
        self.train = train

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        label = i % 10
        x = torch.linspace(0, 2 * math.pi * (1 + label % 5), 32)
        stripes = torch.sin(x)[None, None, :].expand(3, 32, 32)
        colour = torch.tensor([label / 9, 1 - label / 9, (label % 3) / 2])[:, None, None]
        image = colour * 0.5 + stripes * 0.5 + 0.3 * torch.randn(3, 32, 32, generator=g)
        if self.train:  # augmentation, drawn in the DataLoader workers
            if torch.rand(1).item() < 0.5:
                image = image.flip(-1)
            dx, dy = torch.randint(-2, 3, (2,)).tolist()
            image = torch.roll(image, shifts=(dy, dx), dims=(1, 2))
        return image, label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="cifar", help="the name consumers connect to")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=1,
                    help="wait for this many consumers before the first batch")
    args = ap.parse_args()

    loader = DataLoader(
        SyntheticImages(args.images),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        generator=torch.Generator().manual_seed(0),
    )
    producer = batchcast.Producer(loader, name=args.name, wait_for_consumers=args.consumers)
    print(f"producer {args.name!r}: {producer.samples_per_epoch} samples per epoch in batches of "
          f"{producer.batch_size}; waiting for {args.consumers} consumer(s)", flush=True)
    try:
        producer.run(epochs=args.epochs)
    except KeyboardInterrupt:
        print("interrupted: consumers were told the stream ended", flush=True)
        return
    print("done", flush=True)


if __name__ == "__main__":
    main()
