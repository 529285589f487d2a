"""The repeats of a cell, summed up: the cell the table shows is each
figure's median over its successful runs; lists (the trainers' reports,
batch shapes) come from the run whose aggregate throughput is the median
one (the lower of the two middle ones for an even count). A cell is exact
only if every run of it was; failed and skipped runs are named in its notes.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from .recorded import GPU_FIELDS

MEDIAN_FIELDS = (
    "wall_s", "agg_samples_per_s", "per_trainer_samples_per_s", "wait_share", "cpu_s",
    "cpu_s_per_1k_samples", "cpu_cores", "peak_mem_mb", "mem_trainers_mb", "mem_loading_mb",
    "shm_mb", "sum_peak_rss_mb", "setup_s", *GPU_FIELDS,
)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell from the runs (one per repeat made or skipped) of a
    (model, mode, N); `runs` is in the order they were made."""
    ok = [r for r in runs if r["status"] == "ok"]
    if not ok:  # the first real failure, else the skip
        cell = dict(next((r for r in runs if r["status"] != "skipped"), runs[0]))
    else:
        cell = dict(sorted(ok, key=lambda r: r["agg_samples_per_s"])[(len(ok) - 1) // 2])
        for key in MEDIAN_FIELDS:
            values = [r[key] for r in ok if r.get(key) is not None]
            cell[key] = median(values) if values else None
        cell["exact"] = all(r["exact"] for r in ok)
        cell["agg_samples_per_s_runs"] = [r["agg_samples_per_s"] for r in ok]
    cell.pop("repeat", None)
    cell["repeats_ok"], cell["repeats_made"] = len(ok), len(runs)
    notes: list[str] = []
    for r in runs:
        if r["status"] != "ok" and len(runs) > 1 and r["error"] != cell["error"]:
            first = (r["error"] or "").strip().splitlines()[:1]
            notes.append(f"repeat {r.get('repeat', 0) + 1}: {r['status']}: {first[0] if first else ''}")
        notes += [n for n in r["notes"] if n not in notes]
    cell["notes"] = notes
    return cell
