"""The report: speedups against `independent`, the targets, the table, the
setup line, the notes, and the JSON document."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List

from .options import SHARED_MODES
from .procfs import read_kb


def add_speedups(cells: List[Dict[str, Any]]) -> None:
    """speedup = aggregate samples/s of the cell / that of `independent` at
    the same N (None where either is missing)."""
    base = {c["trainers"]: c["agg_samples_per_s"] for c in cells
            if c["mode"] == "independent" and c["status"] == "ok"}
    for c in cells:
        b = base.get(c["trainers"])
        c["speedup"] = (c["agg_samples_per_s"] / b) if (b and c["status"] == "ok"
                                                        and c["agg_samples_per_s"]) else None


def evaluate_targets(cells: List[Dict[str, Any]], args) -> List[str]:
    """The brief's targets, as lines (reported, not asserted)."""
    lines = []
    ns = sorted({c["trainers"] for c in cells})
    lo, hi = ns[0], ns[-1]
    ok = {(c["mode"], c["trainers"]): c for c in cells if c["status"] == "ok"}
    target_n = 4 if 4 in ns else hi
    for mode in SHARED_MODES:
        if mode not in args.modes:
            continue
        c = ok.get((mode, target_n))
        if c is None or c["speedup"] is None:
            lines.append(f"{mode}: throughput target not evaluated (no successful {mode} and independent "
                         f"cells at N={target_n})")
        else:
            lines.append(f"{mode} at N={target_n}: {c['speedup']:.2f}x the aggregate throughput of "
                         f"independent (target >= 3x: {'met' if c['speedup'] >= 3 else 'NOT met'})")
        if hi > lo and (mode, lo) in ok and (mode, hi) in ok:
            a, b = ok[(mode, lo)], ok[(mode, hi)]
            r = b["cpu_s_per_1k_samples"] / a["cpu_s_per_1k_samples"]
            lines.append(f"{mode}: CPU s per 1000 samples {a['cpu_s_per_1k_samples']:.2f} at N={lo}, "
                         f"{b['cpu_s_per_1k_samples']:.2f} at N={hi} ({r:.2f}x; target: does not grow: "
                         f"{'met' if r <= 1.10 else 'NOT met'})")
            per_trainer = b["mem_trainers_mb"] / hi
            growth = b["peak_mem_mb"] - a["peak_mem_mb"]
            own = b["mem_trainers_mb"] - a["mem_trainers_mb"]
            lines.append(f"{mode}: peak memory {a['peak_mem_mb']:.0f} MB at N={lo}, {b['peak_mem_mb']:.0f} MB "
                         f"at N={hi}: +{growth:.0f} MB, of which the trainers' own processes +{own:.0f} MB "
                         f"({per_trainer:.0f} MB each); the loading side {a['mem_loading_mb']:.0f} -> "
                         f"{b['mem_loading_mb']:.0f} MB (target: grows only by the trainers' own: "
                         f"{'met' if b['mem_loading_mb'] <= 1.10 * a['mem_loading_mb'] + 16 else 'NOT met'})")
    if args.step_ms is None and not args.cuda:
        lines.append(f"note: the model trains on the same {os.cpu_count()} CPU cores that load the data, so "
                     "this run is not loading-bound; the throughput target applies to a loading-bound setup "
                     "(--step-ms)")
    return lines


def _fmt(x, spec: str, suffix: str = "") -> str:
    return "-" if x is None else format(x, spec) + suffix


def format_table(cells: List[Dict[str, Any]]) -> str:
    head = ("mode", "N", "samples/s", "per trainer", "data wait", "CPU s/1k", "peak mem", "speedup")
    sub = ("", "", "aggregate", "samples/s", "share", "samples", "MB", "vs indep.")
    widths = (14, 3, 10, 12, 10, 9, 9, 10)
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))),
           "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(sub, widths)))]
    for c in cells:
        if c["status"] != "ok":
            first = (c["error"] or "").strip().splitlines()[0] if c["error"] else ""
            out.append(f"{c['mode']:<14}  {c['trainers']:>3}  {c['status'].upper()}: {first[:90]}")
            continue
        vals = (c["mode"], str(c["trainers"]), _fmt(c["agg_samples_per_s"], ".1f"),
                _fmt(c["per_trainer_samples_per_s"], ".1f"), _fmt(100 * c["wait_share"], ".1f", "%"),
                _fmt(c["cpu_s_per_1k_samples"], ".2f"), _fmt(c["peak_mem_mb"], ".0f"),
                _fmt(c["speedup"], ".2f", "x"))
        out.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths))))
    return "\n".join(out)


def machine_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        info["mem_total_gib"] = round(read_kb("/proc/meminfo", ("MemTotal",))["MemTotal"] / 2**20, 1)
    except (OSError, KeyError):
        pass
    return info


def setup_line(args, dataset: Dict[str, Any]) -> str:
    """One line: what was trained, on what data, with how many workers."""
    return (f"{args.model if args.step_ms is None else f'emulated accelerator, {args.step_ms:g} ms/step'} "
            f"on {args.device}; {dataset['files']} JPEGs ({dataset['mean_file_kib']} KiB mean), "
            f"{args.image_size}px crops, batch {args.batch_size}, {args.epochs} epochs, "
            f"{args.workers} workers per pipeline, {args.threads} torch thread(s) per trainer; "
            f"{machine_info().get('cpus')} CPUs")


def print_report(setup: str, cells: List[Dict[str, Any]], targets: List[str], run_start: float) -> None:
    """The report on stdout: setup, table, notes (failures in full), targets,
    and the run's total time since `run_start` (time.monotonic())."""
    print(setup)
    print(format_table(cells))
    notes = [f"{c['mode']} N={c['trainers']}: {c['status']}: {c['error']}" for c in cells if c["status"] != "ok"]
    notes += [f"{c['mode']} N={c['trainers']}: {note}" for c in cells for note in c["notes"]
              if not note.startswith("serve: ")]
    if notes:
        print("\nnotes:")
        for note in notes:
            print("  " + note.replace("\n", "\n    "))
    print("\ntargets:")
    for line in targets:
        print("  " + line)
    print(f"\ntotal {time.monotonic() - run_start:.0f} s")


def write_json(path: str, args, dataset: Dict[str, Any], setup: str, cells: List[Dict[str, Any]],
               targets: List[str]) -> None:
    """Every figure: the configuration, the machine, the dataset, every cell, the targets."""
    doc = {
        "config": {k: getattr(args, k) for k in (
            "modes", "trainers", "epochs", "images", "classes", "image_size", "workers", "batch_size",
            "step_ms", "model", "threads", "device", "window", "seed", "timeout", "stall_timeout")},
        "machine": machine_info(), "dataset": dataset, "setup": setup,
        "results": cells, "targets": targets,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
