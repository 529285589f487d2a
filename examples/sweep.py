"""What the sweep examples share: a generated image dataset, its producer,
and a launcher that runs one producer and several trainers.

Each example (lightning.py, accelerate.py, timm/) is one file run three ways:

    python examples/lightning.py                      # the whole sweep: producer + 2 trainers
    python examples/lightning.py producer             # or by hand: the producer,
    python examples/lightning.py trainer --lr 0.1     # and any number of trainers
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Callable, List

# examples/lightning.py and examples/accelerate.py share their names with the
# libraries they use: once this module is imported, take the examples folder
# off the import path so that `import lightning` finds the library.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

NAME = "sweep-images"
IMG_SIZE = 32
CLASSES = 10


def generated_loader(samples: int, batch_size: int = 64, workers: int = 2):
    """A shuffled DataLoader over generated images: class c is a noisy image
    whose brightness encodes c, with a random flip drawn in the workers."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Generated(Dataset):
        def __len__(self) -> int:
            return samples

        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(i)
            label = i % CLASSES
            image = torch.rand(3, IMG_SIZE, IMG_SIZE, generator=g) * 0.5 + label / CLASSES / 2
            if torch.rand(1).item() < 0.5:
                image = image.flip(-1)
            return image, label

    return DataLoader(Generated(), batch_size=batch_size, shuffle=True, num_workers=workers,
                      persistent_workers=workers > 0)


def produce(args: argparse.Namespace) -> None:
    import batchcast

    loader = generated_loader(args.samples, workers=args.workers)
    producer = batchcast.Producer(loader, NAME, idle_timeout=args.idle_timeout,
                                  metadata={"img_size": IMG_SIZE, "classes": CLASSES})
    served = producer.run()  # serves while any trainer reads; ends idle_timeout after the last
    print(f"producer: served {served} epochs", flush=True)


def main(train: Callable[[argparse.Namespace], None], sweep: List[List[str]]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", nargs="?", default="sweep", choices=["sweep", "producer", "trainer"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--idle-timeout", type=float, default=60.0)
    args, _ = parser.parse_known_args()
    if args.role == "producer":
        produce(args)
    elif args.role == "trainer":
        train(args)
    else:
        common = [f"--epochs={args.epochs}", f"--samples={args.samples}"]
        script = sys.argv[0]
        # Trainers first: they wait for the producer (connect_timeout).
        trainers = [subprocess.Popen([sys.executable, script, "trainer", *common, *extra])
                    for extra in sweep]
        producer = subprocess.Popen([sys.executable, script, "producer", *common,
                                     f"--workers={args.workers}", "--idle-timeout=15"])
        codes = [t.wait() for t in trainers] + [producer.wait()]
        sys.exit(max(codes))
