#!/usr/bin/env python3
"""Host-to-device transport of a GPU consumer, against plain copies on the
same machine: how many GB/s a ``batchcast.Consumer(device="cuda:0")``
moves to the GPU, with the arena page-locked (the default for a GPU
consumer) and, for comparison, a pinned and a pageable ``torch`` tensor
copied in a loop. The consumer's figure excludes its waits for the
producer (``stats()["wait_seconds"]``), so it measures the consumer's own
path; the producer's rate is reported beside it.

    python3 scripts/gpu_transport.py --out transport.json [--batches 200]

Each batch is (uint8 [B, 3, 224, 224], int64 [B]), as a native pipeline
sends for 224 px crops. Writes JSON; exits 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def producer_role(name: str, batches: int, batch: int) -> None:
    import numpy as np

    import batchcast

    images = np.random.default_rng(0).integers(0, 255, size=(batch, 3, 224, 224), dtype=np.uint8)

    class Loader:
        def __len__(self) -> int:
            return batches

        def __iter__(self):
            for i in range(batches):
                yield images, np.arange(i * batch, (i + 1) * batch, dtype=np.int64)

    p = batchcast.Producer(Loader(), name, window=8, batch_size=batch, samples_per_epoch=batches * batch)
    print("ready", flush=True)
    t0 = time.perf_counter()
    p.run(epochs=1)
    print("producer", json.dumps({"seconds": time.perf_counter() - t0}), flush=True)


def consumer_run(name: str, batches: int, batch: int) -> dict:
    import torch

    import batchcast

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    prod = subprocess.Popen([sys.executable, __file__, "--role", "producer", "--name", name,
                             "--batches", str(batches), "--batch", str(batch)],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert prod.stdout is not None
        if prod.stdout.readline().strip() != "ready":
            raise RuntimeError("the producer did not start")
        c = batchcast.Consumer(name, device="cuda:0", connect_timeout=30)
        wrong = torch.zeros((), dtype=torch.int64, device="cuda:0")
        t0 = time.perf_counter()
        n = 0
        nbytes = 0
        for images, labels in c:
            wrong += (labels != torch.arange(n * batch, (n + 1) * batch, device="cuda:0")).sum()
            nbytes += images.numel() + labels.numel() * 8
            n += 1
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        stats = c.stats()
        pinned = c.pin_memory
        c.close()
        line = prod.stdout.readline()
        producer_s = json.loads(line.split(" ", 1)[1]) if line.startswith("producer ") else None
        busy = wall - stats["wait_seconds"]
        return {"batches": n, "wrong": int(wrong), "pinned": pinned, "wall_s": wall,
                "wait_s": stats["wait_seconds"], "gb_per_s_own_path": nbytes / busy / 1e9 if busy > 0 else None,
                "gb_per_s_delivered": nbytes / wall / 1e9, "producer": producer_s}
    finally:
        prod.kill()
        prod.wait()


def plain_copies(batches: int, batch: int) -> dict:
    import torch

    out = {}
    for kind in ("pinned", "pageable"):
        src = torch.randint(0, 255, (batch, 3, 224, 224), dtype=torch.uint8, pin_memory=kind == "pinned")
        src.to("cuda:0")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batches):
            src.to("cuda:0", non_blocking=True)
        torch.cuda.synchronize()
        out[kind] = {"gb_per_s": src.numel() * batches / (time.perf_counter() - t0) / 1e9}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="transport.json")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--name", default=f"transport-{os.getpid()}", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "producer":
        producer_role(a.name, a.batches, a.batch)
        return
    import torch

    if not torch.cuda.is_available():
        print("gpu_transport: no CUDA GPU here (torch.cuda.is_available() is False)", file=sys.stderr)
        sys.exit(2)
    doc = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "batch": a.batch,
           "bytes_per_batch": a.batch * 3 * 224 * 224 + a.batch * 8}
    doc["plain"] = plain_copies(a.batches, a.batch)
    doc["consumer"] = consumer_run(a.name, a.batches, a.batch)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
