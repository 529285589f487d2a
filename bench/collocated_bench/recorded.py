"""A cell's CPU, memory and GPU figures, from what `batchcast run`'s
listeners recorded in the run store for each of its runs (the trainers,
and the shared producer: the workload's Data or its TensorSocket job).

CPU: each run's CPU seconds at its end (the kernel's count, or the last
sample), less what it had used at the go: a trainer's own count then (its
`cpu_at_go` figure), else the run's last sample before the go. Memory: the
process listener's proportional set size (PSS) of each run's process tree,
summed over the runs sampled in one round; a shared page counts once in all.
The GPU: the GPU listener's samples (NVML) inside the measured part.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from statistics import mean
from typing import Any

from batchcast._experiment import CPU_SECONDS, Run

#: The metrics whose samples a cell reads back.
PSS, RSS = "proc/pss_bytes", "proc/rss_bytes"
SERIES = ("proc/", "gpu/")
#: The GPU figures of a cell.
GPU_FIELDS = ("gpu_util_pct", "gpu_mem_peak_mib", "gpu_power_w", "sm_active_pct")
# The GPU listener's fields (gpu/<index>/<field>) behind each figure, and
# the factor to the figure's unit.
_GPU_KEYS = {
    "gpu_util_pct": ("util_gpu_percent", 1.0),
    "gpu_mem_peak_mib": ("mem_used_bytes", 1 / 2**20),
    "gpu_power_w": ("power_w", 1.0),
    "sm_active_pct": ("DCGM_FI_PROF_SM_ACTIVE", 100.0),
}
MB = 1 / 2**20


def cpu_figures(runs: Sequence[Run], trainers: dict[str, dict[str, float]], go_ms: int) -> dict[str, Any]:
    """CPU seconds of every run from the go to its end (`cpu_s`), and what
    they had used before (`startup_cpu_s`)."""
    total = startup = 0.0
    for r in runs:
        if r.cpu_seconds is None:
            continue
        total += r.cpu_seconds
        own = trainers.get(r.name, {}).get("cpu_at_go")
        if own is None:
            before = [v for ts, v in r.series.get(CPU_SECONDS, []) if ts <= go_ms]
            own = before[-1] if before else 0.0
        startup += own
    return {"cpu_s": total - startup, "startup_cpu_s": startup}


def _by_round(runs: Sequence[Run], key: str) -> dict[int, float]:
    """The sum over `runs` of `key`, per listener round (its timestamp)."""
    sums: dict[int, float] = {}
    for r in runs:
        for ts, v in r.series.get(key, []):
            sums[ts] = sums.get(ts, 0.0) + v
    return sums


def memory_figures(runs: Sequence[Run], trainer_names: Sequence[str]) -> dict[str, Any]:
    """Peak memory of the cell (PSS of every run's process tree, summed per
    round), of its trainers' trees, and of the rest (the producer's)."""
    total = _by_round(runs, PSS)
    own = _by_round([r for r in runs if r.name in trainer_names], PSS)
    rest = {ts: v - own.get(ts, 0.0) for ts, v in total.items()}
    peak = lambda d: max(d.values(), default=0.0) * MB  # noqa: E731 - a one-line helper
    processes = _by_round(runs, "proc/processes")
    return {
        "peak_mem_mb": peak(total), "mem_trainers_mb": peak(own), "mem_loading_mb": peak(rest),
        "shm_mb": None,
        "sum_peak_rss_mb": sum(max((v for _, v in r.series.get(RSS, [])), default=0.0) for r in runs) * MB,
        "processes_seen": int(max(processes.values(), default=0)), "memory_samples": len(total),
    }


def _gpu_index(device: str, recorded: list[str]) -> str | None:
    """The NVML index of the torch device `device` among the GPUs recorded
    (through $CUDA_VISIBLE_DEVICES; the only one recorded, if one)."""
    idx = int(device.split(":")[1]) if ":" in device else 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    want = visible[idx] if idx < len(visible) else str(idx)
    if want in recorded:
        return want
    return recorded[0] if len(recorded) == 1 else None


def gpu_figures(runs: Sequence[Run], device: str | None, start_ms: int, end_ms: int) -> dict[str, Any]:
    """Mean utilisation %, peak memory used (MiB, every process on the
    GPU), mean power (W) and mean SM activity % between the go and the last
    trainer's end, from the GPU listener's samples of the trainers' GPU.
    `device` None: the cell ran on the CPU."""
    out: dict[str, Any] = {k: None for k in GPU_FIELDS}
    if device is None:
        out.update(gpu_source=None, gpu_note="no GPU (--device cpu)", gpu_samples=0)
        return out
    samples: dict[str, dict[int, float]] = {}  # key -> ts -> value (one round: one value)
    for r in runs:
        for key, points in r.series.items():
            if key.startswith("gpu/"):
                samples.setdefault(key, {}).update(points)
    recorded = sorted({k.split("/")[1] for k in samples})
    index = _gpu_index(device, recorded)
    if index is None:
        note = "the GPU listener recorded no samples (no NVML?)" if not recorded else (
            f"the GPU of --device {device} is not among those recorded ({', '.join(recorded)})")
        out.update(gpu_source=None, gpu_note=note, gpu_samples=0)
        return out
    rounds = set()
    for field, (name, scale) in _GPU_KEYS.items():
        window = [v * scale for ts, v in samples.get(f"gpu/{index}/{name}", {}).items()
                  if start_ms <= ts <= end_ms]
        rounds.update(ts for ts in samples.get(f"gpu/{index}/{name}", {}) if start_ms <= ts <= end_ms)
        if window:
            out[field] = max(window) if field == "gpu_mem_peak_mib" else mean(window)
    note = None
    if not rounds:
        note = f"no GPU sample fell in the measured part ({(end_ms - start_ms) / 1000:.2f} s)"
    elif out["sm_active_pct"] is None:
        note = "SM activity not measured (needs a GPU with GPM)"
    out.update(gpu_source="nvml", gpu_note=note, gpu_samples=len(rounds))
    return out
