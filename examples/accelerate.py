"""A learning-rate sweep of two Hugging Face Accelerate trainers that share
one data pipeline. accelerator.prepare() passes a batchcast.Consumer through
unchanged (it prepares DataLoaders only), so the Consumer is told the device
itself: batches arrive there.

    python examples/accelerate.py                     # producer + 2 trainers, 3 epochs each
    python examples/accelerate.py producer            # by hand, in separate terminals
    python examples/accelerate.py trainer --lr 0.1
"""

from __future__ import annotations

import argparse

from sweep import CLASSES, NAME, main


def train(args: argparse.Namespace) -> None:
    import torch
    from accelerate import Accelerator
    from torch import nn

    import batchcast

    accelerator = Accelerator()
    loader = batchcast.Consumer(NAME, batch_size=args.batch_size, connect_timeout=120,
                                device=accelerator.device)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for epoch in range(args.epochs):
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        print(f"lr={args.lr}: epoch {epoch}, {len(loader)} batches, loss {loss.item():.3f}",
              flush=True)


if __name__ == "__main__":
    main(train, sweep=[["--lr=0.1"], ["--lr=0.01"]])
