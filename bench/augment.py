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

The JPEGs are photo-like (smooth shapes at several scales and sensor
noise, ~80 KB for ~500x375): decoding them costs what decoding photographs
costs, unlike flat synthetic patterns.

Figures, in the steady state (each trainer's window starts after its first
SKIP_BATCHES batches: interpreter start-up is not the pipeline's cost, and
a producer fills its window while its trainer starts): aggregate samples/s
(every trainer's window samples over the span from the first window's start
to the last one's end) and CPU seconds per 1000 samples (the trainers' own
CPU in their windows, DataLoader workers included, plus the producers'
share of theirs, from wait4), median of `--repeats`, the three variants
side by side in one run. Each run also prints the producers' and the
trainers' part of the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

#: Batches each trainer reads before its measured window starts.
SKIP_BATCHES = 10
SIZES = [(128, (0.25, 1.0)), (160, (0.2, 1.0)), (192, (0.15, 1.0)), (224, (0.08, 1.0))]


def photo_like(g, h: int, w: int):
    """An HxW RGB uint8 image with a photograph's statistics as far as a
    JPEG codec sees them: smooth shapes at several scales (a 1/f-like
    spectrum) plus sensor noise; ~80 KB at quality 90 for ~500x375
    (ImageNet's training JPEGs average ~110 KB). Flat synthetic patterns
    compress to a third of that and decode 2-3x faster, which would
    understate what decoding costs."""
    import torch
    import torch.nn.functional as F

    x = torch.full((1, 3, h, w), 110.0)
    for k, amp in ((96, 45.0), (24, 28.0), (6, 16.0), (2, 14.0)):
        small = torch.randn(1, 3, h // k + 2, w // k + 2, generator=g)
        x += amp * F.interpolate(small, (h, w), mode="bicubic", align_corners=False)
    x += 6.0 * torch.randn(1, 3, h, w, generator=g)
    return x[0].clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()


def make_dataset(root: str, images: int) -> None:
    import torch
    from PIL import Image

    marker = os.path.join(root, f".complete-photo-{images}")
    if os.path.exists(marker):
        return
    shutil.rmtree(root, ignore_errors=True)
    print(f"making {images} photo-like JPEGs in {root} (once)", file=sys.stderr)
    g = torch.Generator().manual_seed(0)
    for i in range(images):
        d = os.path.join(root, f"class_{i % 10:02d}")
        os.makedirs(d, exist_ok=True)
        h = int(torch.randint(300, 451, (1,), generator=g))
        w = int(torch.randint(400, 601, (1,), generator=g))
        Image.fromarray(photo_like(g, h, w)).save(os.path.join(d, f"{i:05d}.jpg"), quality=90)
    open(marker, "w").close()


def trainer(args) -> None:
    """One trainer process: read one epoch; print its figures as JSON. Its
    window starts after its first SKIP_BATCHES batches: Python and torch
    start-up are not the pipeline's cost, and a producer fills its window
    of 8 batches while the trainer starts, which would then come at once."""
    size, scale = SIZES[args.index]
    state = {"n": 0, "batches": 0, "first": 0, "t0": None, "c0": 0.0}

    def seen(n: int) -> None:
        state["n"] += n
        state["batches"] += 1
        if state["batches"] == SKIP_BATCHES:
            state.update(t0=time.monotonic(), c0=time.process_time(), first=state["n"])

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
            seen(len(images))
        del loader
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
            seen(len(images))
    t1, c1 = time.monotonic(), time.process_time()
    # DataLoader workers (reaped with the loader): their whole CPU time.
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"samples": state["n"], "window_samples": state["n"] - state["first"], "t0": state["t0"],
                      "t1": t1, "cpu": c1 - state["c0"] + kids.ru_utime + kids.ru_stime}), flush=True)


def _reap(p: subprocess.Popen) -> float:
    """Waits for a child; its CPU seconds (user + system)."""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def run_variant(variant: str, args) -> tuple[float, float]:
    """Aggregate samples/s over the trainers' common window (first batch of
    the first to start, last batch of the last to end) and CPU seconds per
    1000 samples (trainers' windows + the producers' share)."""
    exe = args.batchcast
    env = dict(os.environ, BATCHCAST_DIR=args.socket_dir)
    producers = []
    common = ["--data", args.dir, "--batch-size", "64", "--epochs", "1"]
    if variant == "native":
        for i, (size, _) in enumerate(SIZES):
            producers.append(subprocess.Popen(
                [exe, "serve", "--name", f"own{i}", "--image-size", str(size), "--dtype", "f32",
                 "--workers", str(args.workers), "--consumers", "1", *common], env=env, stderr=subprocess.DEVNULL))
    elif variant == "decoded":
        producers.append(subprocess.Popen(
            [exe, "serve", "--name", "decoded", "--decode-only", "--store-size", "256",
             "--workers", str(args.producer_workers), "--consumers", str(len(SIZES)), *common],
            env=env, stderr=subprocess.DEVNULL))
    trainers = [
        subprocess.Popen([sys.executable, __file__, "--role", "trainer", "--variant", variant, "--index", str(i),
                          "--dir", args.dir, "--workers", str(args.workers)],
                         env=env, stdout=subprocess.PIPE, text=True)
        for i in range(len(SIZES))
    ]
    outs = [t.communicate()[0] for t in trainers]
    if any(t.returncode for t in trainers):
        sys.exit(f"{variant}: a trainer failed")
    figs = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    producer_cpu = sum(_reap(p) for p in producers)
    samples = sum(f["samples"] for f in figs)
    if samples != len(SIZES) * args.images:
        sys.exit(f"{variant}: trainers read {samples} samples, not {len(SIZES) * args.images}")
    window = sum(f["window_samples"] for f in figs)
    wall = max(f["t1"] for f in figs) - min(f["t0"] for f in figs)
    cpu = sum(f["cpu"] for f in figs) + producer_cpu * window / samples
    print(f"    {variant}: CPU s/1000 of producers {producer_cpu / samples * 1000:.3f}, "
          f"of trainers {sum(f['cpu'] for f in figs) / window * 1000:.3f}", file=sys.stderr)
    return window / wall, cpu / window * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=3000, help="JPEGs (each trainer reads all once; default 3000)")
    p.add_argument("--workers", type=int, default=1,
                   help="decode/augment threads of each trainer's own pipeline, and of each augmenter (default 1)")
    p.add_argument("--producer-workers", type=int, default=os.cpu_count(),
                   help="threads of the one decoded stream's producer (default: every core; it decodes for all)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", default="torchvision,native,decoded",
                   help="which to run, comma-separated (default all three: torchvision,native,decoded)")
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
    chosen = args.variants.split(",")
    if unknown := set(chosen) - set(labels):
        p.error(f"unknown --variants {sorted(unknown)}; choose from {list(labels)}")
    labels = {v: label for v, label in labels.items() if v in chosen}
    runs = {v: [] for v in labels}
    for r in range(args.repeats):
        for v in labels:
            runs[v].append(run_variant(v, args))
            print(f"  run {r + 1}: {labels[v]}: {runs[v][-1][0]:.0f} samples/s", file=sys.stderr)
    print(f"4 trainers x {args.images} JPEGs (photo-like, ~500x375, ~80 KB), RandomResizedCrop 128/160/192/224 + flip, "
          f"float32; {args.workers} worker(s) each, the decoded stream's producer {args.producer_workers}; "
          f"{os.cpu_count()} cores; median of {args.repeats}; steady state (after each trainer's first {SKIP_BATCHES} batches)")
    print(f"{'':38}{'samples/s':>10}{'CPU s/1000':>12}")
    med = {}
    for v, label in labels.items():
        med[v] = (statistics.median(x for x, _ in runs[v]), statistics.median(c for _, c in runs[v]))
        print(f"{label:38}{med[v][0]:10.0f}{med[v][1]:12.2f}")
    ratios = [f"(c) vs ({k}): {med['decoded'][0] / med[v][0]:.2f}x samples/s"
              for k, v in (("b", "native"), ("a", "torchvision")) if "decoded" in med and v in med]
    if ratios:
        print("; ".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
