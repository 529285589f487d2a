#!/usr/bin/env python3
"""The GPU data plane against each consumer copying for itself, on one GPU:
N = 1, 2, 4, 8 consumer processes read the same stream, once from a
producer that mirrors its arena on the GPU (``Producer(device="cuda:0")``:
one host-to-device copy per batch, consumers read the mirror zero-copy)
and once from a producer on the host path (each consumer copies each batch
to the GPU itself, ``Consumer(device="cuda:0")`` as before the plane).
Per cell: delivered GB/s per consumer (median; its waits for the producer
excluded, and with them), the consumers' and the producer's CPU seconds per
GB, device memory in use (NVML, whole device) while they run, and, for the
mirror, the producer's host-to-device GB/s and its per-copy latency
p50/p99. Each consumer sums every batch on the GPU (a kernel reads it) and
checks its labels.

    python3 scripts/gpu_plane_bench.py --out plane.json [--consumers 1,2,4,8] [--batches 100]
    python3 scripts/gpu_plane_bench.py --cpu-rehearsal ...   # the host stand-in, tiny sizes

Writes JSON, rewritten after every cell (a run cut short keeps what it
measured); exits 2 without a GPU (unless rehearsing).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def producer_role(a: argparse.Namespace) -> None:
    import numpy as np

    import batchcast

    images = np.random.default_rng(0).integers(0, 255, size=(a.batch, 3, a.size, a.size), dtype=np.uint8)

    class Loader:
        def __len__(self) -> int:
            return a.batches

        def __iter__(self):
            for i in range(a.batches):
                yield images, np.arange(i * a.batch, (i + 1) * a.batch, dtype=np.int64)

    p = batchcast.Producer(Loader(), a.name, window=8, batch_size=a.batch, samples_per_epoch=a.batches * a.batch,
                           wait_for_consumers=a.consumers_n, device=a.mirror or None)
    print("ready", json.dumps({"devices": [d["device"] for d in p.devices]}), flush=True)
    t0, c0 = time.perf_counter(), cpu_seconds()
    p.run(epochs=1)
    out = {"seconds": time.perf_counter() - t0, "cpu_s": cpu_seconds() - c0, "devices": p.devices}
    print("producer", json.dumps(out), flush=True)


def consumer_role(a: argparse.Namespace) -> None:
    import torch

    import batchcast

    c = batchcast.Consumer(a.name, device=a.device, copy_on_write=a.copy_on_write, connect_timeout=60)
    path = c.stats().get("device_path")
    total = None
    wrong = None
    nbytes = 0
    n = 0
    t0, c0 = time.perf_counter(), cpu_seconds()
    for images, labels in c:
        s = images.sum(dtype=torch.int64)
        w = (labels != torch.arange(n * a.batch, (n + 1) * a.batch, device=labels.device)).sum()
        total = s if total is None else total + s
        wrong = w if wrong is None else wrong + w
        nbytes += images.numel() + labels.numel() * 8
        n += 1
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    stats = c.stats()
    c.close()
    busy = wall - stats["wait_seconds"]
    print("consumer", json.dumps({
        "batches": n, "wrong": int(wrong) if wrong is not None else None, "path": path,
        "bytes": nbytes, "wall_s": wall, "wait_s": stats["wait_seconds"], "cpu_s": cpu_seconds() - c0,
        "gb_per_s_own_path": nbytes / busy / 1e9 if busy > 0 else None, "gb_per_s": nbytes / wall / 1e9,
    }), flush=True)


def gpu_memory_mib() -> float | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def read_json_line(proc: subprocess.Popen, tag: str, deadline: float) -> dict:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"exited before its {tag!r} line (status {proc.poll()})")
        if line.startswith(tag + " "):
            return json.loads(line.split(" ", 1)[1])
    raise TimeoutError(f"no {tag!r} line in time")


def cell(a: argparse.Namespace, n: int, mirror: bool) -> dict:
    name = f"plane-{os.getpid()}-{n}-{int(mirror)}"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    common = ["--name", name, "--batches", str(a.batches), "--batch", str(a.batch), "--size", str(a.size)]
    before = gpu_memory_mib()
    procs = []
    deadline = time.monotonic() + a.cell_timeout
    try:
        prod = subprocess.Popen([sys.executable, HERE, "--role", "producer", *common, "--consumers-n", str(n),
                                 "--mirror", a.device if mirror else ""], stdout=subprocess.PIPE, text=True, env=env)
        procs.append(prod)
        ready = read_json_line(prod, "ready", deadline)
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, HERE, "--role", "consumer", *common, "--device", a.device,
                                           *(["--copy-on-write"] if a.copy_on_write else [])],
                                          stdout=subprocess.PIPE, text=True, env=env))
        during = None
        consumers = []
        for p in procs[1:]:
            consumers.append(read_json_line(p, "consumer", deadline))
            during = during or gpu_memory_mib()
        producer = read_json_line(prod, "producer", deadline)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    total_gb = sum(c["bytes"] for c in consumers) / 1e9
    out = {
        "consumers": n, "mirror": mirror, "served_devices": ready["devices"],
        "paths": sorted({c["path"] or "cpu" for c in consumers}),
        "wrong": sum(c["wrong"] or 0 for c in consumers),
        "gb_per_s_per_consumer_median": statistics.median(c["gb_per_s"] for c in consumers),
        "gb_per_s_own_path_median": statistics.median(c["gb_per_s_own_path"] or 0 for c in consumers),
        "consumer_cpu_s_per_gb": sum(c["cpu_s"] for c in consumers) / total_gb if total_gb else None,
        "producer_cpu_s": producer["cpu_s"], "producer_seconds": producer["seconds"],
        "device_memory_mib": {"before": before, "during": during},
    }
    for d in producer["devices"]:
        out["h2d"] = {"copies": d["copies"], "gb_per_s": d["bytes"] / d["seconds"] / 1e9 if d["seconds"] else None,
                      "pinned": d["pinned"], "p50_ms": (d["p50_seconds"] or 0) * 1e3,
                      "p99_ms": (d["p99_seconds"] or 0) * 1e3}
    return out


def link_nominal() -> dict:
    """The PCIe link's nominal rate from NVML (nvidia-smi), per direction."""
    per_lane = {"1": 0.25, "2": 0.5, "3": 0.985, "4": 1.969, "5": 3.938, "6": 7.563}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                              "--format=csv,noheader", "-i", "0"], capture_output=True, text=True, timeout=20,
                             check=True).stdout.strip()
        gen, width = (v.strip() for v in out.split(","))
        return {"gen": gen, "width": width, "gb_per_s": per_lane.get(gen, 0) * int(width)}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"status": "unknown"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="plane.json")
    ap.add_argument("--consumers", default="1,2,4,8")
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--copy-on-write", action="store_true", help="consumers take private device copies")
    ap.add_argument("--cell-timeout", type=float, default=60.0)
    ap.add_argument("--cpu-rehearsal", action="store_true")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--consumers-n", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--mirror", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "producer":
        return producer_role(a)
    if a.role == "consumer":
        return consumer_role(a)
    if a.cpu_rehearsal:
        os.environ.setdefault("BATCHCAST_DEVICE_STAND_IN", "1")
    else:
        import torch

        if not torch.cuda.is_available():
            print("gpu_plane_bench: no CUDA GPU here (torch.cuda.is_available() is False)", file=sys.stderr)
            sys.exit(2)
    doc: dict = {"link": link_nominal(), "batch": a.batch, "size": a.size, "cpu_rehearsal": a.cpu_rehearsal,
                 "bytes_per_batch": a.batch * 3 * a.size * a.size + a.batch * 8, "cells": []}
    for n in (int(x) for x in a.consumers.split(",")):
        for mirror in (True, False):
            try:
                doc["cells"].append(cell(a, n, mirror))
            except Exception as e:  # one failed cell is reported; the others still run
                doc["cells"].append({"consumers": n, "mirror": mirror, "error": f"{type(e).__name__}: {e}"})
            with open(a.out, "w") as f:
                json.dump(doc, f, indent=1)
            print(json.dumps(doc["cells"][-1]), flush=True)


if __name__ == "__main__":
    main()
