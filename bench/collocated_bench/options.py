"""The command line: parsed, then checked (a bad value stops the run with
argparse's usage message, before anything is started)."""

from __future__ import annotations

import argparse
import os
import tempfile

# The package's docstring is the benchmark's description: --help prints it.
from . import __doc__ as _OVERVIEW

MODES = ("independent", "shared-python", "shared-native", "tensorsocket")
SHARED_MODES = ("shared-python", "shared-native")
ROLES = ("trainer", "py-producer", "ts-producer")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=_OVERVIEW.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(_OVERVIEW.split("\n\n")[1:]),
    )
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated subset of: " + ", ".join(MODES) + " (default: all)")
    p.add_argument("--trainers", default="1,2,4", help="numbers of collocated trainers (default 1,2,4)")
    p.add_argument("--epochs", type=int, default=2, help="epochs each trainer trains (default 2)")
    p.add_argument("--images", type=int, default=1000, help="images in the dataset (default 1000)")
    p.add_argument("--classes", type=int, default=10, help="classes in the dataset (default 10)")
    p.add_argument("--image-size", type=int, default=None,
                   help="side of the crops fed to the model (default 112 on cpu, 224 on cuda)")
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader workers per pipeline (per trainer in independent), "
                        "native pipeline threads in shared-native (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--step-ms", type=float, default=None,
                   help="emulated accelerator: each training step is a sleep of this many ms "
                        "instead of the model's forward/backward")
    p.add_argument("--model", default=None, choices=("small", "resnet18", "resnet50"),
                   help="the trained model (default small on cpu, resnet18 on cuda)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per trainer process (default 1)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N: where the trainers train")
    p.add_argument("--window", type=int, default=8, help="batchcast window, in producer batches (default 8)")
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "batchcast-bench-cache"),
                   help="where the generated dataset is kept and reused (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="dataset and training seed (default 0)")
    p.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one (mode, N) cell may take in all before it is stopped (default 600)")
    p.add_argument("--stall-timeout", type=float, default=30.0,
                   help="a cell in which no trainer makes progress for this many seconds is stopped "
                        "and reported as a hang (default 30)")
    p.add_argument("--batchcast-bin", default=None,
                   help="the batchcast binary for shared-native (default: $BATCHCAST_BIN, "
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
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        p.error(f"--modes: unknown {', '.join(bad) or '(none given)'}; choose from {', '.join(MODES)}")
    args.modes = modes
    try:
        args.trainers = [int(t) for t in args.trainers.split(",") if t.strip()]
    except ValueError:
        p.error("--trainers needs comma-separated positive integers, e.g. 1,2,4")
    if not args.trainers or min(args.trainers) < 1:
        p.error("--trainers needs comma-separated positive integers, e.g. 1,2,4")
    for name in ("epochs", "images", "classes", "batch_size", "threads", "window"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        p.error("--workers must be >= 0")
    if args.images < args.classes:
        p.error("--images must be at least --classes")
    args.cuda = args.device.startswith("cuda")
    if not args.cuda and args.device != "cpu":
        p.error("--device must be cpu, cuda or cuda:N")
    if args.image_size is None:
        args.image_size = 224 if args.cuda else 112
    if args.model is None:
        args.model = "resnet18" if args.cuda else "small"
    return args
