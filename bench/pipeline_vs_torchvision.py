#!/usr/bin/env python3
"""Native batchcast pipeline vs torchvision, same JPEGs, same run.

Runs the `pipeline-bench` binary (which generates, or reuses, a synthetic
ImageNet-like JPEG dataset and measures the native pipeline), then runs the
torchvision equivalent on the very same files:

    ImageFolder(dir, transform=Compose([RandomResizedCrop(size),
                                        RandomHorizontalFlip(),
                                        ToTensor()]))
    DataLoader(batch_size=64, shuffle=True, num_workers=W)

with the same number of workers W as native worker threads, and prints both
throughputs (images/s, median of several epochs) and their ratio. The native
side writes float32 NCHW in [0, 1], exactly what ToTensor() produces.

Needs torch, torchvision and pillow importable. Usage:

    cargo build --release -p batchcast-pipeline
    python bench/pipeline_vs_torchvision.py target/release/examples/pipeline-bench \
        [--images 2000] [--workers 1,2] [--runs 3] [--batch 64] [--size 224] \
        [--dir DIR] [--json]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bench_binary", help="path to the pipeline-bench executable")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    p.add_argument("--runs", type=int, default=3, help="timed epochs per worker count")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", help="dataset cache directory (default: the binary's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args()


def run_native(args, workers):
    cmd = [
        args.bench_binary,
        "--json",
        "--images", str(args.images),
        "--threads", ",".join(str(w) for w in workers),
        "--runs", str(args.runs),
        "--batch", str(args.batch),
        "--size", str(args.size),
        "--seed", str(args.seed),
        "--transform", "train",
        "--output", "f32-nchw",
    ]
    if args.dir:
        cmd += ["--dir", args.dir]
    # Generation progress goes to stderr, which we let through.
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def run_torchvision(dataset_dir, workers, args):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the main process only receives batches
    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(args.size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
        ]
    )
    dataset = datasets.ImageFolder(dataset_dir, transform=transform)
    results = []
    for w in workers:
        loader = DataLoader(
            dataset,
            batch_size=args.batch,
            shuffle=True,
            num_workers=w,
            persistent_workers=True,
        )
        # Warm-up: start the worker processes and run a couple of batches.
        it = iter(loader)
        for _ in range(min(2, len(loader))):
            next(it)
        del it
        runs = []
        for _ in range(args.runs):
            start = time.perf_counter()
            n = 0
            for images, _labels in loader:
                n += images.shape[0]
            runs.append(n / (time.perf_counter() - start))
            if not args.json:
                print(f"torchvision workers {w}: {runs[-1]:.1f} images/s", file=sys.stderr)
        results.append({"workers": w, "images_per_s": statistics.median(runs), "runs": runs})
        del loader
    return len(dataset), results


def main():
    args = parse_args()
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    if not workers or min(workers) < 1:
        sys.exit("--workers needs positive integers, e.g. 1,2")
    native = run_native(args, workers)
    n_tv, tv = run_torchvision(native["dataset"], workers, args)
    if n_tv != native["images"]:
        sys.exit(f"torchvision sees {n_tv} images, the native bench {native['images']}")

    rows = []
    for nat, ref in zip(native["results"], tv):
        rows.append(
            {
                "workers": ref["workers"],
                "native_images_per_s": nat["images_per_s"],
                "torchvision_images_per_s": ref["images_per_s"],
                "speedup": nat["images_per_s"] / ref["images_per_s"],
            }
        )
    if args.json:
        print(json.dumps({"dataset": native["dataset"], "images": native["images"],
                          "batch": args.batch, "size": args.size, "runs": args.runs,
                          "results": rows, "native": native, "torchvision": tv}))
        return
    print(f"dataset {native['dataset']}: {native['images']} JPEGs, "
          f"mean {native['mean_file_bytes'] / 1024:.0f} KiB; RandomResizedCrop({args.size}) + "
          f"RandomHorizontalFlip + ToTensor, batch {args.batch}, median of {args.runs} epochs")
    print(f"{'workers':>7}  {'native img/s':>12}  {'torchvision img/s':>17}  {'speedup':>7}")
    for r in rows:
        print(f"{r['workers']:>7}  {r['native_images_per_s']:>12.1f}  "
              f"{r['torchvision_images_per_s']:>17.1f}  {r['speedup']:>6.2f}x")


if __name__ == "__main__":
    main()
