"""The whole run: a child process does its role; the runner checks the
device, makes the dataset, runs every (mode, N) cell and reports."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Optional

from .cells import run_cell
from .dataset import ensure_dataset
from .options import parse_args
from .report import add_speedups, evaluate_targets, print_report, setup_line, write_json
from .roles import ROLES
from .supervise import set_subreaper


def check_cuda(device: str) -> Optional[str]:
    """None if `device` is usable, else why not."""
    code = ("import torch,sys; ok=torch.cuda.is_available(); "
            "print(torch.__version__, torch.version.cuda, torch.cuda.device_count() if ok else 0)")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not start python to check CUDA: {e}"
    if r.returncode != 0:
        return f"importing torch failed:\n{r.stderr.strip()[-2000:]}"
    version, cuda, count = r.stdout.split()
    idx = int(device.split(":")[1]) if ":" in device else 0
    if int(count) == 0:
        return (f"--device {device} needs an NVIDIA GPU with CUDA, but torch.cuda.is_available() is False "
                f"(torch {version}, built for CUDA {cuda}); this is the GPU profile of the benchmark: run "
                f"it on a machine with a GPU, or use --device cpu")
    if idx >= int(count):
        return f"--device {device}: only {count} CUDA device(s) visible"
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.spec))
        return 0

    def log(msg: str) -> None:
        if not args.quiet:
            print(f"[collocated] {msg}", file=sys.stderr, flush=True)

    if args.cuda:
        why = check_cuda(args.device)
        if why:
            print(f"collocated.py: {why}", file=sys.stderr)
            return 2
    set_subreaper()
    dataset = ensure_dataset(args.cache_dir, args.images, args.classes, args.seed, log)
    log(f"dataset {dataset['path']}: {dataset['files']} JPEGs, mean {dataset['mean_file_kib']} KiB")
    cells = []
    run_start = time.monotonic()
    for n in args.trainers:
        for mode in args.modes:
            log(f"{mode}, N={n} ...")
            cell = run_cell(args, dataset, mode, n, log)
            cells.append(cell)
            if cell["status"] == "ok":
                log(f"{mode}, N={n}: {cell['agg_samples_per_s']:.1f} samples/s aggregate, "
                    f"{cell['wall_s']:.1f} s")
            else:
                log(f"{mode}, N={n}: {cell['status']}: {cell['error']}")
    order = {m: i for i, m in enumerate(args.modes)}
    cells.sort(key=lambda c: (order[c["mode"]], c["trainers"]))
    add_speedups(cells)
    targets = evaluate_targets(cells, args)
    setup = setup_line(args, dataset)
    print_report(setup, cells, targets, run_start)
    if args.json:
        write_json(args.json, args, dataset, setup, cells, targets)
        log(f"wrote {args.json}")
    return 0
