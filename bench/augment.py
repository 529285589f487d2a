#!/usr/bin/env python3
"""Four trainers, four different augmentations, one JPEG dataset:
`python bench/augment.py --help`.

Each trainer reads one epoch of RandomResizedCrop(size_i, scale_i) +
RandomHorizontalFlip, sizes 128/160/192/224, as float32 NCHW in [0, 1]
(ToTensor), with no training step (the pipeline's own capacity):

  (a) four torchvision DataLoaders (ImageFolder + the torchvision
      transforms, `--workers` worker processes each);
  (b) four native pipelines (`batchcast serve --data DIR --image-size
      size_i`, `--workers` threads each), one per trainer;
  (c) one decoded stream (`batchcast serve --data DIR --decode-only
      --store-size 256`) and four consumers, each augmenting its own copy
      (`Consumer(transform=...)`, `--workers` threads each).

Figures: aggregate samples/s (all trainers' samples over the wall time of
the slowest) and CPU seconds per 1000 samples (every process of the
variant, from getrusage of the reaped children), median of `--repeats`,
the three variants side by side in one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

SIZES = [(128, (0.25, 1.0)), (160, (0.2, 1.0)), (192, (0.15, 1.0)), (224, (0.08, 1.0))]


def make_dataset(root: str, images: int) -> None:
    import numpy as np
    from PIL import Image

    marker = os.path.join(root, f".complete-{images}")
    if os.path.exists(marker):
        return
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(0)
    for i in range(images):
        d = os.path.join(root, f"class_{i % 10:02d}")
        os.makedirs(d, exist_ok=True)
        w, h = int(rng.integers(400, 600)), int(rng.integers(300, 450))
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 3 + i) % 256, (y * 2) % 256, (x ^ y) % 256], -1).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(d, f"{i:05d}.jpg"), quality=90)
    open(marker, "w").close()


def trainer(args) -> None:
    """One trainer process: read one epoch, print its samples."""
    size, scale = SIZES[args.index]
    n = 0
    if args.variant == "torchvision":
        import torch
        from torchvision import datasets, transforms

        torch.set_num_threads(1)
        tf = transforms.Compose([
            transforms.RandomResizedCrop(size, scale=scale),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
        ])
        loader = torch.utils.data.DataLoader(
            datasets.ImageFolder(args.dir, transform=tf), batch_size=64, shuffle=True, num_workers=args.workers
        )
        for images, _ in loader:
            n += len(images)
    else:
        import batchcast
        from batchcast import transforms as T

        if args.variant == "native":
            consumer = batchcast.Consumer(f"own{args.index}", connect_timeout=60)
        else:
            consumer = batchcast.Consumer(
                "decoded",
                connect_timeout=60,
                transform=T.Compose([T.RandomResizedCrop(size, scale=scale), T.RandomHorizontalFlip(),
                                     T.Normalize((0, 0, 0), (1, 1, 1))]),
                transform_threads=args.workers,
            )
        for images, _ in consumer:
            n += len(images)
    print(n, flush=True)


def run_variant(variant: str, args) -> tuple[float, float]:
    exe = args.batchcast
    env = dict(os.environ, BATCHCAST_DIR=args.socket_dir)
    producers = []
    common = ["--data", args.dir, "--batch-size", "64", "--workers", str(args.workers), "--epochs", "1"]
    if variant == "native":
        for i, (size, _) in enumerate(SIZES):
            producers.append(subprocess.Popen(
                [exe, "serve", "--name", f"own{i}", "--image-size", str(size), "--dtype", "f32",
                 "--consumers", "1", *common], env=env, stderr=subprocess.DEVNULL))
    elif variant == "decoded":
        producers.append(subprocess.Popen(
            [exe, "serve", "--name", "decoded", "--decode-only", "--store-size", "256",
             "--consumers", str(len(SIZES)), *common], env=env, stderr=subprocess.DEVNULL))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    trainers = [
        subprocess.Popen([sys.executable, __file__, "--role", "trainer", "--variant", variant, "--index", str(i),
                          "--dir", args.dir, "--workers", str(args.workers)],
                         env=env, stdout=subprocess.PIPE, text=True)
        for i in range(len(SIZES))
    ]
    samples = sum(int(t.communicate()[0].split()[-1]) for t in trainers)
    wall = time.monotonic() - start
    for p in producers:
        p.wait(timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if any(t.returncode for t in trainers) or samples != len(SIZES) * args.images:
        sys.exit(f"{variant}: trainers failed or read {samples} samples")
    return samples / wall, cpu / samples * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=800)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", default="/tmp/batchcast-augment-bench")
    p.add_argument("--batchcast", default=shutil.which("batchcast") or "target/release/batchcast")
    p.add_argument("--role", default="driver")
    p.add_argument("--variant")
    p.add_argument("--index", type=int)
    args = p.parse_args()
    if args.role == "trainer":
        trainer(args)
        return 0
    make_dataset(args.dir, args.images)
    args.socket_dir = os.path.join(args.dir + "-sockets")
    os.makedirs(args.socket_dir, exist_ok=True)
    labels = {"torchvision": "(a) 4 torchvision DataLoaders", "native": "(b) 4 native pipelines",
              "decoded": "(c) 1 decoded stream, 4 augmenters"}
    runs = {v: [] for v in labels}
    for r in range(args.repeats):
        for v in labels:
            runs[v].append(run_variant(v, args))
            print(f"  run {r + 1}: {labels[v]}: {runs[v][-1][0]:.0f} samples/s", file=sys.stderr)
    print(f"4 trainers x {args.images} JPEGs (~500x375), RandomResizedCrop 128/160/192/224 + flip, "
          f"float32; {args.workers} worker(s) each; {os.cpu_count()} cores; median of {args.repeats}")
    print(f"{'':38}{'samples/s':>10}{'CPU s/1000':>12}")
    med = {}
    for v, label in labels.items():
        med[v] = (statistics.median(x for x, _ in runs[v]), statistics.median(c for _, c in runs[v]))
        print(f"{label:38}{med[v][0]:10.0f}{med[v][1]:12.2f}")
    print(f"(c) vs (b): {med['decoded'][0] / med['native'][0]:.2f}x samples/s; "
          f"(c) vs (a): {med['decoded'][0] / med['torchvision'][0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
