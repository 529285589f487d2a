"""The whole run: a child process does its role; the runner checks torch,
the device and the models, makes the dataset, makes every run of the plan
(or skips it, past --budget) with `batchcast run` into the run store (one
experiment per benchmark run, one workload per cell), and reports: the JSON
after every run, so that a run cut short leaves what it measured, and the
table at the end, with the line that opens the store in the dashboard."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from batchcast._experiment import experiment_name, store_line

from .cells import RUNNER, blank_cell, run_cell
from .dataset import ensure_dataset
from .native import find_batchcast_bin
from .options import parse_args
from .plan import Budget, plan_runs
from .preflight import preflight
from .report import print_report, summarize_all, write_json
from .roles import ROLES

#: The store's file name in the results directory.
STORE_FILE = "collocated-runs.sqlite"


def default_store(args) -> str:
    """--store, else collocated-runs.sqlite beside --json, else in bench/results/."""
    if args.store:
        return os.path.abspath(args.store)
    where = (os.path.dirname(os.path.abspath(args.json)) if args.json
             else os.path.join(os.path.dirname(RUNNER), "results"))
    return os.path.join(where, STORE_FILE)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.spec))
        return 0

    def log(msg: str) -> None:
        if not args.quiet:
            print(f"[collocated] {msg}", file=sys.stderr, flush=True)

    run_start = time.monotonic()
    why, versions = preflight(args, RUNNER)
    if why:
        print(f"collocated.py: {why}", file=sys.stderr)
        return 2
    args.batchcast_bin_found = find_batchcast_bin(args.batchcast_bin)
    store, experiment = default_store(args), experiment_name("collocated")
    args.store_path, args.experiment = store, experiment
    dataset = ensure_dataset(args.cache_dir, args.images, args.classes, args.seed, log)
    log(f"dataset {dataset['path']}: {dataset['files']} JPEGs, mean {dataset['mean_file_kib']} KiB")
    runs = plan_runs(args)
    budget = Budget(args.budget, run_start)
    made = []
    workdir = tempfile.TemporaryDirectory(prefix="collocated-")
    for i, run in enumerate(runs):
        what = f"{run.model} {run.mode}, N={run.n}" + (f", repeat {run.repeat + 1}" if args.repeats > 1 else "")
        skip = budget.why_not(run)
        if skip:
            cell = blank_cell(run.mode, run.n, run.model)
            cell.update(repeat=run.repeat, status="skipped", error=skip)
        else:
            log(f"[{i + 1}/{len(runs)}] {what} ...")
            left = budget.left()
            started = time.monotonic()
            cell = run_cell(args, dataset, run, log, args.timeout if left is None else min(args.timeout, left),
                            experiment, store, workdir.name)
            budget.record(run, time.monotonic() - started)
            if cell["status"] == "ok":
                log(f"{what}: {cell['agg_samples_per_s']:.1f} samples/s aggregate, {cell['wall_s']:.1f} s"
                    + ("" if cell["exact"] else ", NOT EXACT"))
            else:
                log(f"{what}: {cell['status']}: {cell['error']}")
        made.append(cell)
        if args.json:
            write_json(args.json, args, dataset, versions, made, runs[i + 1:], run_start)
    if budget.exhausted:
        log(f"{sum(c['status'] == 'skipped' for c in made)} run(s) skipped: {budget.exhausted}")
    workdir.cleanup()
    print_report(args, dataset, versions, summarize_all(made, args), run_start,
                 store_line(store) if any(c.get("runs_in_store") for c in made) else None)
    if args.json:
        log(f"wrote {args.json}")
    return 0
