#!/usr/bin/env python3
"""A Tune sweep on a local two-node Ray cluster, with per-trial loaders
against one shared producer per node: `python bench/ray_sweep.py --help`.

Each trial reads `--epochs` epochs of `--samples` samples; making a sample
costs `--work-us` microseconds of CPU (a stand-in for decoding and
augmenting an image) and each batch a `--step-ms` sleep (a stand-in for the
GPU step). Both variants run the same trials on the same cluster; the
figures are aggregate samples/s (all trials' samples over the time from
the first trial's first batch to the last trial's end) and the CPU
seconds of the sweep's processes (this driver and everything it started:
the Ray cluster, its workers, the trials, the producers) per 1000 samples, median of `--repeats` runs, side by side in one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time


def tree_cpu_ticks(root: int) -> dict:
    """Own CPU ticks (user + system) of `root` and each of its descendants."""
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        cpu[pid] = int(fields[11]) + int(fields[12])
    out = {}
    for pid, ticks in cpu.items():
        p = pid
        while p not in (0, 1) and p != root:
            p = parent.get(p, 0)
        if p == root:
            out[pid] = ticks
    return out


class TreeCpu:
    """CPU seconds used by this process and everything it starts (the Ray
    cluster, its workers, trials and producers), sampled every 0.2 s: a
    process's last sample counts, so those that end are not lost (a
    process living less than 0.2 s may be)."""

    def __init__(self) -> None:
        self.start = tree_cpu_ticks(os.getpid())
        self.last = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.last.update(tree_cpu_ticks(os.getpid()))

    def seconds(self) -> float:
        self._stop.set()
        self._thread.join()
        self.last.update(tree_cpu_ticks(os.getpid()))
        ticks = sum(t - self.start.get(pid, 0) for pid, t in self.last.items())
        return ticks / os.sysconf("SC_CLK_TCK")


class Work:
    """A map-style dataset whose samples cost CPU to make."""

    def __init__(self, samples: int, work_us: int) -> None:
        self.samples, self.work_us = samples, work_us

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, i: int):
        import numpy as np

        end = time.thread_time() + self.work_us / 1e6
        while time.thread_time() < end:
            pass
        return np.full(64, i, dtype=np.int64)


def loader_factory(samples: int, work_us: int, batch: int):
    def make():
        import torch.utils.data as tud

        return tud.DataLoader(Work(samples, work_us), batch_size=batch, shuffle=True, num_workers=0)

    return make


def trainable(config):
    from ray import tune

    import batchcast.ray

    make = loader_factory(config["samples"], config["work_us"], config["batch"])
    if config["shared"]:
        loader = batchcast.ray.consumer(make, sweep=config["sweep"], idle_timeout=5, num_cpus=0)
    else:
        loader = make()
    rows, start = 0, None
    for _ in range(config["epochs"]):
        for batch in loader:
            start = start or time.time()
            rows += len(batch)
            time.sleep(config["step_ms"] / 1000)
    tune.report({"rows": rows, "start": start, "end": time.time()})


def one_sweep(args, shared: bool, tag: str) -> tuple[float, float]:
    from ray import tune

    config = {
        "samples": args.samples,
        "work_us": args.work_us,
        "batch": args.batch,
        "epochs": args.epochs,
        "step_ms": args.step_ms,
        "shared": shared,
        "sweep": tag,
        "i": tune.grid_search(list(range(args.trials))),
    }
    meter = TreeCpu()
    results = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space=config,
        run_config=tune.RunConfig(storage_path=args.storage, verbose=0),
    ).fit()
    cpu = meter.seconds()
    rows = sum(r.metrics.get("rows", 0) for r in results)
    # From the first batch of any trial to the end of the last: Tune's
    # start-up of the trials is the same for both and left out.
    wall = max(r.metrics["end"] for r in results) - min(r.metrics["start"] for r in results)
    errors = [r.error for r in results if r.error]
    if errors or rows != args.trials * args.epochs * args.samples:
        sys.exit(f"the sweep did not complete: {rows} rows, errors: {errors}")
    return rows / wall, cpu / rows * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--work-us", type=int, default=1000)
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--storage", default="/tmp/batchcast-ray-bench")
    args = p.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    per_node = max(1, (args.trials + 1) // 2)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": per_node, "include_dashboard": False})
    cluster.add_node(num_cpus=per_node)
    ray.init(address=cluster.address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster.wait_for_nodes()
    try:
        figures = {"per-trial DataLoader": [], "shared producer per node": []}
        for r in range(args.repeats):
            for shared, label in ((False, "per-trial DataLoader"), (True, "shared producer per node")):
                figures[label].append(one_sweep(args, shared, f"bench{r}"))
                print(f"  run {r + 1}: {label}: {figures[label][-1][0]:.0f} samples/s", file=sys.stderr)
    finally:
        ray.shutdown()
        cluster.shutdown()

    print(
        f"Tune sweep, {args.trials} trials x {args.epochs} epochs x {args.samples} samples, "
        f"{args.work_us} us CPU per sample, {args.step_ms} ms step per batch of {args.batch}; "
        f"2 Ray nodes on this machine ({os.cpu_count()} cores); median of {args.repeats}"
    )
    print(f"{'':28}{'samples/s':>12}{'CPU s/1000':>12}")
    med = {}
    for label, runs in figures.items():
        rate = statistics.median(x for x, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        med[label] = (rate, cpu)
        print(f"{label:28}{rate:12.0f}{cpu:12.2f}")
    (ra, ca), (rb, cb) = med["per-trial DataLoader"], med["shared producer per node"]
    print(f"sharing: {rb / ra:.2f}x aggregate samples/s, {ca / cb:.2f}x less CPU per sample")
    return 0


if __name__ == "__main__":
    sys.exit(main())
