"""The command line: parsed, then checked (a bad value stops the run with
argparse's usage message, before anything is started)."""

from __future__ import annotations

import argparse
import os
import tempfile

# The package's docstring is the benchmark's description: --help prints it.
from . import __doc__ as _OVERVIEW

MODES = ("independent", "shared-python", "shared-native", "tensorsocket", "tensorsocket-gpu", "ceiling")
SHARED_MODES = ("shared-python", "shared-native")
TENSORSOCKET_MODES = ("tensorsocket", "tensorsocket-gpu")
DEFAULT_MODES = MODES[:4] + ("ceiling",)
ROLES = ("trainer", "py-producer", "ts-producer", "preflight")


def _groups(p: argparse.ArgumentParser, flag: str, text: str, conv=str):
    """A list option in priority groups: `a,b/c` is [a, b, c] with a and b in
    group 0, c in group 1. Returns (the items, {item: its group})."""
    items, group = [], {}
    for g, part in enumerate(text.split("/")):
        for raw in part.split(","):
            if not raw.strip():
                continue
            try:
                item = conv(raw.strip())
            except ValueError:
                p.error(f"{flag}: bad value {raw.strip()!r}")
            if item in group:
                p.error(f"{flag}: {item} given twice")
            items.append(item)
            group[item] = g
    if not items:
        p.error(f"{flag}: nothing given")
    return items, group


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=_OVERVIEW.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(_OVERVIEW.split("\n\n")[1:]),
    )
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help="comma-separated subset of: " + ", ".join(MODES) + " (default: all but "
                        "tensorsocket-gpu). In --modes, --trainers and --model a `/` starts a "
                        "lower-priority group: see --budget")
    p.add_argument("--trainers", default="1,2,4", help="numbers of collocated trainers (default 1,2,4)")
    p.add_argument("--epochs", type=int, default=2, help="epochs each trainer trains (default 2)")
    p.add_argument("--images", type=int, default=1000, help="images in the dataset (default 1000)")
    p.add_argument("--classes", type=int, default=10, help="classes in the dataset (default 10)")
    p.add_argument("--image-size", type=int, default=None,
                   help="side of the crops fed to the model (default 112 on cpu, 224 on cuda)")
    p.add_argument("--workers", default="auto",
                   help="DataLoader workers per pipeline (per trainer in independent), native pipeline "
                        "threads in shared-native; auto (default): the usable cores split between "
                        "the trainers in independent (at least 1 each), all of them in shared modes")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--step-ms", type=float, default=None,
                   help="emulated accelerator: each training step is a sleep of this many ms "
                        "instead of the model's forward/backward")
    p.add_argument("--model", default=None,
                   help="the trained model(s), comma-separated: small, or a timm model name "
                        "(resnet18, resnet50, mobilenetv3_large_100, ...; torchvision's when timm "
                        "is not installed). Default small on cpu, resnet18 on cuda")
    p.add_argument("--warmup", type=int, default=3,
                   help="training steps on a synthetic batch before the measured part (CUDA "
                        "context, cuDNN autotuning; default 3)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of every cell, interleaved (the mode order rotated each repeat); the "
                        "table shows medians, the JSON every run too (default 1)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="the whole run's time limit: cells run in priority order (group by group, "
                        "each group's repeats together) and those that would not fit, estimated from "
                        "the cells so far, are skipped and named")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per trainer process (default 1)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N: where the trainers train")
    p.add_argument("--window", type=int, default=8, help="batchcast window, in producer batches (default 8)")
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "batchcast-bench-cache"),
                   help="where the generated dataset is kept and reused (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="dataset and training seed (default 0)")
    p.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    p.add_argument("--store", metavar="PATH",
                   help="the run store (SQLite) that `batchcast run` records every cell in, for "
                        "`batchcast ui --store PATH` (default: collocated-runs.sqlite beside --json, "
                        "else in bench/results/)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one (mode, N) cell may take in all before it is stopped (default 600)")
    p.add_argument("--stall-timeout", type=float, default=30.0,
                   help="a cell in which no trainer makes progress for this many seconds is stopped "
                        "and reported as a hang (default 30)")
    p.add_argument("--batchcast-bin", default=None,
                   help="the batchcast binary: `batchcast run`, which runs every cell, and "
                        "`batchcast serve` for shared-native (default: $BATCHCAST_BIN, "
                        "target/release/batchcast, then PATH)")
    p.add_argument("--native-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `batchcast serve` (repeatable), e.g. --native-arg=--output=u8-nhwc")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    # Internal: the child processes.
    p.add_argument("--role", choices=ROLES, help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role:
        return args
    args.modes, groups_modes = _groups(p, "--modes", args.modes)
    bad = [m for m in args.modes if m not in MODES]
    if bad:
        p.error(f"--modes: unknown {', '.join(bad)}; choose from {', '.join(MODES)}")
    args.trainers, groups_n = _groups(p, "--trainers", args.trainers, int)
    if min(args.trainers) < 1:
        p.error("--trainers needs comma-separated positive integers, e.g. 1,2,4")
    for name in ("epochs", "images", "classes", "batch_size", "threads", "window", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    if args.budget is not None and args.budget <= 0:
        p.error("--budget must be positive")
    if args.workers != "auto":
        try:
            args.workers = int(args.workers)
        except ValueError:
            p.error("--workers must be auto or a number >= 0")
        if args.workers < 0:
            p.error("--workers must be auto or a number >= 0")
    if args.images < args.classes:
        p.error("--images must be at least --classes")
    args.cuda = args.device.startswith("cuda")
    if not args.cuda and args.device != "cpu":
        p.error("--device must be cpu, cuda or cuda:N")
    if args.image_size is None:
        args.image_size = 224 if args.cuda else 112
    args.models, groups_models = _groups(p, "--model", args.model or ("resnet18" if args.cuda else "small"))
    args.model = ",".join(args.models)
    args.groups = {"mode": groups_modes, "n": groups_n, "model": groups_models}
    return args
