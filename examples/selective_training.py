"""Two trainers on one producer, each choosing the samples worth a step for
its own model (batchcast.select), and watching its own embeddings for drift.

The producer loads and augments every image once; each trainer runs a
forward pass over every batch it receives, keeps a quarter of it (by loss,
or by the entropy of its predictions), and trains on batches of 64 chosen
samples, assembled on its own device. A DriftTrigger compares the model's
penultimate activations window by window, and a PerformanceTrigger watches
its accuracy on the batches before it trains on them; where either fires, a
continual training loop would retrain (here it is reported).

    python examples/selective_training.py             # producer + 2 trainers
    python examples/selective_training.py producer    # or by hand
    python examples/selective_training.py trainer --select margin --ratio 0.5
"""

from __future__ import annotations

import argparse
import sys

from sweep import CLASSES, IMG_SIZE, NAME, main


def train(args: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F
    from torch import nn

    import batchcast
    from batchcast.select import METHODS, Downsampler, DriftTrigger, PerformanceTrigger

    own = argparse.ArgumentParser()
    own.add_argument("--select", default="loss", choices=METHODS)
    own.add_argument("--ratio", type=float, default=0.25)
    own.add_argument("--drift-threshold", type=float, default=0.5)
    own.add_argument("--accuracy-threshold", type=float, default=0.05)
    opts, _ = own.parse_known_args(sys.argv[1:])
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    body = nn.Sequential(nn.Flatten(), nn.Linear(3 * IMG_SIZE * IMG_SIZE, 64), nn.ReLU()).to(device)
    head = nn.Linear(64, CLASSES).to(device)
    opt = torch.optim.SGD([*body.parameters(), *head.parameters()], lr=args.lr, momentum=0.9)

    # Batches arrive on `device`; the selection cuts them there.
    loader = batchcast.Consumer(NAME, batch_size=args.batch_size, device=str(device), connect_timeout=60)
    select = Downsampler(opts.select, ratio=opts.ratio, batch_size=args.batch_size)
    drift = DriftTrigger(window=4 * args.batch_size, threshold=opts.drift_threshold)
    performance = PerformanceTrigger(window=4 * args.batch_size, threshold=opts.accuracy_threshold)
    tag = f"select={opts.select}"

    def step(images: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> float:
        loss = (F.cross_entropy(head(body(images)), labels, reduction="none") * weights).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for epoch in range(args.epochs):
        seen, trained, correct, losses = 0, 0, 0, []
        for images, labels in loader:
            with torch.no_grad():
                h = body(images)
                logits = head(h)
            right = logits.argmax(1) == labels
            seen += len(labels)
            correct += int(right.sum())
            if drift.update(h):
                print(f"{tag}: drift {drift.distance:.3f} in epoch {epoch} (retrain here)", flush=True)
            if performance.update(right):
                print(f"{tag}: accuracy {performance.accuracy:.1%} in epoch {epoch} (retrain here)",
                      flush=True)
            for (x, y), w in select((images, labels), logits, labels, embeddings=h):
                losses.append(step(x, y, w))
                trained += len(y)
        rest = select.flush()
        if rest is not None:
            (x, y), w = rest
            losses.append(step(x, y, w))
            trained += len(y)
        print(f"{tag}: epoch {epoch}: trained on {trained} of {seen} samples, loss "
              f"{sum(losses) / max(len(losses), 1):.3f}, accuracy before the step {correct / seen:.1%}, "
              f"triggers so far: {drift.fired} drift, {performance.fired} accuracy", flush=True)
    loader.close()


if __name__ == "__main__":
    main(train, sweep=[["--select=loss"], ["--select=entropy"]])
