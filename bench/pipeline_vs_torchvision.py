#!/usr/bin/env python3
"""Native batchcast pipeline vs torchvision, same JPEGs, same run.

Runs the `pipeline-bench` binary (which generates, or reuses, a synthetic
ImageNet-like JPEG dataset and measures the native pipeline) and the
torchvision equivalent on the very same files:

    ImageFolder(dir, transform=Compose([RandomResizedCrop(size),
                                        RandomHorizontalFlip(),
                                        ToTensor()]))
    DataLoader(batch_size=64, shuffle=True, num_workers=W, persistent_workers=True)

with the same number of workers W as native worker threads. The native side
writes float32 NCHW in [0, 1], exactly what ToTensor() produces.

Two figures per side, each over one full epoch:
  - images/s (wall clock);
  - images per CPU-second: CPU time (user + system) actually consumed. For
    the native side, all threads of its process (getrusage, reported by the
    binary); for torchvision, the main process (which collates and receives
    batches) plus its worker processes (read from /proc/PID/stat before and
    after the epoch). This is the per-core figure: a DataLoader with W
    workers uses more than W cores' worth of CPU.
The two sides alternate for --rounds rounds (native, torchvision, native,
...) so load from other jobs on a shared machine hits both alike; medians
are reported, and the ratio of the medians.

Needs Linux (/proc), torch, torchvision and pillow. Usage:

    cargo build --release -p batchcast-pipeline --example pipeline-bench
    python bench/pipeline_vs_torchvision.py target/release/examples/pipeline-bench \
        [--images 2000] [--workers 1,2] [--rounds 5] [--batch 64] [--size 224] \
        [--dir DIR] [--json]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bench_binary", help="path to the pipeline-bench executable")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    p.add_argument("--rounds", type=int, default=5,
                   help="alternating rounds per worker count (one epoch per side each)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", help="dataset cache directory (default: the binary's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args()


def log(args, msg):
    if not args.json:
        print(msg, file=sys.stderr, flush=True)


def native_epoch(args, workers, seed):
    """One timed epoch of the native pipeline; (images/s, images/CPU-s, dataset info)."""
    cmd = [
        args.bench_binary, "--json",
        "--images", str(args.images),
        "--threads", str(workers),
        "--runs", "1",
        "--batch", str(args.batch),
        "--size", str(args.size),
        "--seed", str(seed),
        "--transform", "train",
        "--output", "f32-nchw",
    ]
    if args.dir:
        cmd += ["--dir", args.dir]
    # Generation progress (first call only) goes to stderr, which we let through.
    out = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)
    r = out["results"][0]
    return r["images_per_s"], r["images_per_cpu_s"], out


def process_cpu_seconds(pid):
    """utime + stime of one process (all its threads), or 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return 0.0
    fields = data[data.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:
            continue
        if int(data[data.rfind(")") + 2:].split()[1]) == pid:
            out.append(int(entry))
    return out


def tree_cpu_seconds():
    """CPU seconds of this process, its live children, and reaped children."""
    me = os.getpid()
    live = sum(process_cpu_seconds(p) for p in [me] + children(me))
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    # /proc/self counts this process; RUSAGE_CHILDREN adds children already
    # waited for (none while persistent workers live; the native bench
    # subprocess runs outside the measured window).
    return live + reaped.ru_utime + reaped.ru_stime


def make_loader(dataset_dir, workers, args):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the main process only receives batches
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
    ])
    dataset = datasets.ImageFolder(dataset_dir, transform=transform)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True,
                        num_workers=workers, persistent_workers=True)
    # Warm-up: start the worker processes and run a couple of batches.
    it = iter(loader)
    for _ in range(min(2, len(loader))):
        next(it)
    del it
    return len(dataset), loader


def torchvision_epoch(loader):
    cpu0, t0 = tree_cpu_seconds(), time.perf_counter()
    n = 0
    for images, _labels in loader:
        n += images.shape[0]
    elapsed, cpu = time.perf_counter() - t0, tree_cpu_seconds() - cpu0
    return n / elapsed, n / cpu


def main():
    args = parse_args()
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    if not workers or min(workers) < 1 or args.rounds < 1:
        sys.exit("--workers needs positive integers, e.g. 1,2; --rounds at least 1")
    # Generate (or reuse) the dataset before anything is timed.
    _, _, info = native_epoch(args, workers[0], args.seed)
    rows = []
    for w in workers:
        n_tv, loader = make_loader(info["dataset"], w, args)
        if n_tv != info["images"]:
            sys.exit(f"torchvision sees {n_tv} images, the native bench {info['images']}")
        nat, ref = [], []
        for r in range(args.rounds):
            nat.append(native_epoch(args, w, args.seed)[:2])
            ref.append(torchvision_epoch(loader))
            log(args, f"workers {w} round {r + 1}: native {nat[-1][0]:.1f} img/s "
                      f"{nat[-1][1]:.1f} img/CPU-s | torchvision {ref[-1][0]:.1f} img/s "
                      f"{ref[-1][1]:.1f} img/CPU-s")
        del loader
        med = lambda runs, i: statistics.median(x[i] for x in runs)  # noqa: E731
        row = {
            "workers": w,
            "native_images_per_s": med(nat, 0),
            "native_images_per_cpu_s": med(nat, 1),
            "torchvision_images_per_s": med(ref, 0),
            "torchvision_images_per_cpu_s": med(ref, 1),
            "native_runs": nat,
            "torchvision_runs": ref,
        }
        row["speedup"] = row["native_images_per_s"] / row["torchvision_images_per_s"]
        row["speedup_per_cpu"] = (row["native_images_per_cpu_s"]
                                  / row["torchvision_images_per_cpu_s"])
        rows.append(row)
    if args.json:
        print(json.dumps({"dataset": info["dataset"], "images": info["images"],
                          "batch": args.batch, "size": args.size, "rounds": args.rounds,
                          "results": rows}))
        return
    print(f"dataset {info['dataset']}: {info['images']} JPEGs, "
          f"mean {info['mean_file_bytes'] / 1024:.0f} KiB; RandomResizedCrop({args.size}) + "
          f"RandomHorizontalFlip + ToTensor, batch {args.batch}; medians of {args.rounds} "
          f"alternating epochs")
    print(f"{'workers':>7}  {'native img/s':>12}  {'tv img/s':>9}  {'ratio':>6}  "
          f"{'native img/CPU-s':>16}  {'tv img/CPU-s':>12}  {'ratio/CPU':>9}")
    for r in rows:
        print(f"{r['workers']:>7}  {r['native_images_per_s']:>12.1f}  "
              f"{r['torchvision_images_per_s']:>9.1f}  {r['speedup']:>5.2f}x  "
              f"{r['native_images_per_cpu_s']:>16.1f}  {r['torchvision_images_per_cpu_s']:>12.1f}  "
              f"{r['speedup_per_cpu']:>8.2f}x")


if __name__ == "__main__":
    main()
