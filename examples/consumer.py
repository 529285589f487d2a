"""A training script fed by examples/producer.py instead of its own
DataLoader. Start as many as you like (a learning-rate sweep, several
architectures): each gets every sample of every epoch, at its own pace and
batch size, while the images are loaded and augmented once, by the producer.

    python examples/consumer.py --lr 0.05 --batch-size 64
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def small_cnn(num_classes: int = 10) -> nn.Module:
    """A torchvision-style CNN, small enough for a CPU."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, num_classes),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="cifar")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)

    # ---- The two-line change --------------------------------------------
    # Before: every training process ran its own data pipeline:
    #     loader = DataLoader(SyntheticImages(4096), batch_size=args.batch_size,
    #                         shuffle=True, num_workers=2)
    # After: it reads the shared producer's batches from shared memory.
    import batchcast
    loader = batchcast.Consumer(args.name, batch_size=args.batch_size, connect_timeout=60)
    # -----------------------------------------------------------------------

    model = small_cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    print(f"lr={args.lr} batch_size={args.batch_size}: {len(loader)} batches per epoch", flush=True)
    for epoch in range(args.epochs):
        model.train()
        t0, seen, correct, total_loss = time.perf_counter(), 0, 0, 0.0
        for images, labels in loader:
            # Batches are read-only views of shared memory. Out-of-place ops
            # (.to(), arithmetic) are free; to modify a batch in place, clone
            # it first: images = images.clone(); images.sub_(0.5)
            images, labels = images.to(device, non_blocking=True), labels.to(device)
            opt.zero_grad(set_to_none=True)
            logits = model(images)
            loss = loss_fn(logits, labels)
            loss.backward()
            opt.step()
            seen += len(labels)
            correct += (logits.argmax(1) == labels).sum().item()
            total_loss += loss.item() * len(labels)
        stats = loader.stats()
        print(f"epoch {epoch}: loss {total_loss / seen:.3f}, accuracy {correct / seen:.1%}, "
              f"{seen / (time.perf_counter() - t0):.0f} samples/s, "
              f"{stats['wait_seconds']:.1f} s waiting for data so far", flush=True)
    loader.close()


if __name__ == "__main__":
    main()
