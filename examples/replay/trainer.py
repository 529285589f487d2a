"""A trainer for plan.yaml: a nearest-class-mean model over each image's
mean colour (the synthetic classes differ by hue), trained online on the
workload's shared producer (``BATCHCAST_NAME``). Each batch is first
predicted, then learned from (prequential accuracy), so the accuracy
shows how a policy keeps up with the drifting class mix.

Under ``batchcast run`` it logs, per epoch, ``accuracy`` (over that
epoch) at the samples trained so far as its step (the dashboard's
experiment page draws it per policy: choose ``accuracy`` and x: step),
and records at the end ``figure/samples`` (samples trained),
``figure/accuracy`` (over the last epoch), ``figure/accuracy_all`` and
``figure/triggers``; it prints one line per epoch.
"""

from __future__ import annotations

import argparse

import numpy as np

import batchcast
from batchcast._figures import write_figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=5)
    args = ap.parse_args()
    loader = batchcast.Consumer(connect_timeout=60, format="numpy")
    sums: dict[int, np.ndarray] = {}
    counts: dict[int, int] = {}
    samples = correct_all = 0
    accuracy = 0.0
    for epoch in range(args.epochs):
        seen = correct = 0
        per_label: dict[int, int] = {}
        for images, labels in loader:
            feats = np.asarray(images, dtype=np.float64).reshape(len(labels), -1, 3).mean(axis=1)
            labels = np.asarray(labels)
            if sums:
                known = sorted(sums)
                centres = np.stack([sums[c] / counts[c] for c in known])
                dist = ((feats[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
                predicted = np.asarray(known)[dist.argmin(axis=1)]
                correct += int((predicted == labels).sum())
            for f, label in zip(feats, labels.tolist()):
                sums[label] = sums.get(label, np.zeros(3)) + f
                counts[label] = counts.get(label, 0) + 1
                per_label[label] = per_label.get(label, 0) + 1
            seen += len(labels)
        samples += seen
        correct_all += correct
        accuracy = correct / max(seen, 1)
        batchcast.log_metrics({"accuracy": accuracy}, step=samples)
        mix = dict(sorted(per_label.items()))
        print(
            f"epoch {epoch}: {seen} samples, accuracy {accuracy:.1%}, per label {mix}", flush=True
        )
    write_figures(
        {
            "samples": samples,
            "accuracy": accuracy,
            "accuracy_all": correct_all / max(samples, 1),
            "triggers": len(loader.triggers),
        }
    )
    loader.close()


if __name__ == "__main__":
    main()
