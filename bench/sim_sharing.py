#!/usr/bin/env python3
"""Data-sharing placement with `batchcast sim`: one data pipeline per
dataset and machine (`--data-sharing share`), and placement that prefers
machines already serving a job's dataset (`place`), against a pipeline per
job (`off`), on the published delay-scheduling simulator's traces
(github aakash-sharma/cluster-sim), whose newest ones are derived from the
Helios (SenseTime) logs and name each job's dataset.

    python3 bench/sim_sharing.py --cluster-sim PATH [--batchcast BIN] [--out DIR]

Traces: those at `--rev` whose every record names a dataset or a model
and its CPUs (`cpu_num`; without it a job loads with no CPU and sharing
changes nothing).
Dataset rule: the record's `dataset`; where it has none, its `model` (the
script writes it into the trace's copy); jobs of one dataset on one machine
may share a pipeline. Every run uses `--network standin` (the traces'
slowdowns are placeholders) and the published cluster file; the CPU demand
is the trace's `cpu_num` (Helios' requested CPUs), on machines of 64 cores
(the default) and of 16 (one per GPU of the published 16-GPU machine).
Written to DIR: summary.csv and summary.md. Standard library only.
"""

import json
from pathlib import Path

from sim_paper import HOUR, change, pct, run_sim, sweep

POLICIES = ["dally", "tiresias", "gandiva"]
SHARING = ["off", "share", "place"]
CORES = [64, 16]


def names_a_dataset(records):
    """Every record names a dataset or a model, and the CPUs it loads with."""
    return all(isinstance(r, dict) and (r.get("dataset") or r.get("model")) and r.get("cpu_num")
               for r in records)


def with_datasets(path):
    """Gives every record without a dataset its model's name; the count."""
    records = json.loads(path.read_text())
    n = 0
    for r in records:
        if not r.get("dataset"):
            r["dataset"] = r["model"]
            n += 1
    path.write_text(json.dumps(records))
    return n


def trace_rows(bin_, cluster, name, path):
    """One row per cores x sharing x policy on the trace at path."""
    from_model = with_datasets(path)
    datasets = len({r["dataset"] for r in json.loads(path.read_text())})
    rows = []
    for cores in CORES:
        for mode in SHARING:
            res, _ = run_sim(bin_, path, cluster, POLICIES,
                             ["--network", "standin", "--cpu-cores", str(cores),
                              "--data-sharing", mode])
            for p in POLICIES:
                s = res[p]
                rows.append({"trace": name, "datasets": datasets,
                             "dataset_from_model": from_model, "cores": cores,
                             "sharing": mode, "policy": p, "jobs": s["jobs"],
                             "makespan_h": s["makespan"] / HOUR,
                             "mean_jct_h": s["mean_jct"] / HOUR,
                             "cpu_overhead_job_h": s["cpu_overhead"] / HOUR,
                             "loading_core_h": s["loading_core_seconds"] / HOUR})
        print(f"{name} {cores} cores done", flush=True)
    return rows


def main():
    sweep(__doc__, "bench/results/sim-sharing", names_a_dataset, trace_rows, write_md)


METRICS = [("mean_jct_h", "mean JCT"), ("makespan_h", "makespan"),
           ("cpu_overhead_job_h", "CPU overhead"), ("loading_core_h", "loading core-h")]


def write_md(path, rows):
    by = {(r["trace"], r["cores"], r["sharing"], r["policy"]): r for r in rows}
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    lines = []
    for cores in CORES:
        lines.append(f"## {cores} cores per machine\n")
        lines.append("Figures with a pipeline per job (off), then the change with `share` "
                     "and with `place` against off (negative: less).\n")
        head = ["trace", "datasets", "policy"]
        for _, m in METRICS:
            head += [f"{m} off", f"{m} share Δ", f"{m} place Δ"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|---|---:|---|" + "---:|" * (len(head) - 3))
        for t in traces:
            for p in POLICIES:
                off = by[(t, cores, "off", p)]
                cells = [t, str(off["datasets"]), p]
                for k, _ in METRICS:
                    cells.append(f"{off[k]:.2f}")
                    for mode in ("share", "place"):
                        cells.append(pct(change(by[(t, cores, mode, p)][k], off[k])))
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    Path(path).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
