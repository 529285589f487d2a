"""``python -m batchcast.stalls [options] -- python train.py ARGS``
(what ``batchcast stalls`` runs)."""

import argparse
import json
import sys
from typing import Optional

from ._report import table
from ._runner import StallsError
from ._session import Options, analyse


def _jobs(text: str) -> list[int]:
    try:
        jobs = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--jobs takes numbers separated by commas, e.g. 2,4 (got {text!r})"
        ) from None
    if not jobs or any(j < 1 or j > 64 for j in jobs):
        raise argparse.ArgumentTypeError(f"--jobs: each number must be 1..64 (got {text!r})")
    return jobs


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(
        prog="batchcast stalls", description="Data-stall analysis of a training script."
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--steps", type=int, help="measured steps per mode, after the warm-up (default 30)"
    )
    g.add_argument("--seconds", type=float, help="measure each mode for this long instead")
    p.add_argument("--warmup", type=int, default=5, help="steps run before measuring (default 5)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run every measurement this many rounds, interleaved, and report medians (default 1;"
        " 3 on a busy or virtual machine, whose speed drifts by tens of percent)",
    )
    p.add_argument("--jobs", type=_jobs, default=[], help="predict N collocated copies, e.g. 2,4")
    p.add_argument(
        "--nproc", type=int, default=0, help="also run K data-parallel processes under torchrun"
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="run the --jobs copies and print measured beside predicted",
    )
    p.add_argument(
        "--data",
        action="append",
        default=[],
        help="the dataset's files or directory (default: what the loader opens)",
    )
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one mode may take (default 300)"
    )
    p.add_argument(
        "--store",
        help="the run store --validate records its copies in (default: $BATCHCAST_STORE,"
        " else $XDG_DATA_HOME/batchcast/runs.sqlite)",
    )
    # The binary whose `batchcast run` runs --validate's copies (what
    # `batchcast stalls` passes: itself); else found as _experiment says.
    p.add_argument("--runner", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    p.add_argument("--json-out", help="also write the JSON analysis to this file")
    a = p.parse_args(argv)
    if not command:
        p.error("give the training command after --, e.g. batchcast stalls -- python train.py")
    for name, v in (("--steps", a.steps), ("--nproc", a.nproc), ("--warmup", a.warmup)):
        if v is not None and v < 0 or (name == "--steps" and v == 0):
            p.error(f"{name} must be positive")
    if not 1 <= a.repeats <= 9:
        p.error(f"--repeats must be 1..9 (got {a.repeats})")
    if a.validate and not a.jobs:
        p.error("--validate checks the prediction for --jobs N: give --jobs too")
    opts = Options(
        command=command,
        steps=a.steps if a.steps is not None else (None if a.seconds else 30),
        seconds=a.seconds,
        warmup=a.warmup,
        repeats=a.repeats,
        jobs=a.jobs,
        nproc=a.nproc,
        validate=a.validate,
        data=a.data,
        timeout=a.timeout,
        store=a.store,
        runner=a.runner,
    )
    try:
        report = analyse(opts)
    except StallsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1) if a.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
