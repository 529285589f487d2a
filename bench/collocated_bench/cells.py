"""One (mode, N) cell: the shared pipeline of the mode (if any) and N
trainers are started and set up, told to go together, and supervised until
the last trainer has reported; then the cell's figures are derived from what
the trainers report and what the runner measured (CPU, memory)."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any, Dict, List, Optional

from .measure import MemorySampler, cpu_children, descendants_cpu_s
from .native import native_serve_argv
from .supervise import Supervisor

# The entry script: the child processes are it again, run with --role.
RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collocated.py")

# Keys every cell of the JSON output has (the test checks them).
CELL_FIELDS = (
    "mode", "trainers", "status", "error", "notes", "samples", "expected_samples",
    "wall_s", "agg_samples_per_s", "per_trainer_samples_per_s", "wait_share",
    "cpu_s", "cpu_s_per_1k_samples", "peak_mem_mb", "mem_trainers_mb",
    "mem_loading_mb", "sum_peak_rss_mb", "speedup", "trainer_results",
)


def blank_cell(mode: str, n: int) -> Dict[str, Any]:
    """A cell with every field, none measured yet."""
    cell = {k: None for k in CELL_FIELDS}
    cell.update(mode=mode, trainers=n, notes=[], trainer_results=[])
    return cell


def _free_ports(n: int) -> List[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _start_producer(sup: Supervisor, cell: Dict[str, Any], args, dataset: Dict[str, Any],
                    base: Dict[str, Any], env) -> None:
    """The mode's shared pipeline, if it has one."""
    me = [sys.executable, RUNNER]
    mode, name, n = base["mode"], base["name"], base["n"]
    if mode == "shared-python":
        sup.start_producer("producer (batchcast.Producer)", me + ["--role", "py-producer", "--spec",
                           json.dumps(dict(base, role="py-producer", threads=1))], env)
    elif mode == "tensorsocket":
        sup.start_producer("producer (TensorProducer)", me + ["--role", "ts-producer", "--spec",
                           json.dumps(dict(base, role="ts-producer", threads=1))], env)
    elif mode == "shared-native":
        try:
            argv = native_serve_argv(args, dataset["path"], name, n)
        except RuntimeError as e:
            sup.fail("failed", str(e))
            return
        cell["notes"].append("serve: " + " ".join(argv))
        if os.sep + "debug" + os.sep in argv[0]:
            cell["notes"].append(f"{argv[0]} is a debug build: its figures are not representative")
        sup.start_producer("batchcast serve", argv, env)


def run_cell(args, dataset: Dict[str, Any], mode: str, n: int, log) -> Dict[str, Any]:
    cell = blank_cell(mode, n)
    cell["expected_samples"] = n * dataset["files"] * args.epochs
    name = f"bcbench-{os.getpid()}-{mode}-{n}"
    base = {"data": dataset["path"], "image_size": args.image_size, "batch_size": args.batch_size,
            "workers": args.workers, "epochs": args.epochs, "seed": args.seed, "classes": args.classes,
            "cuda": args.cuda, "device": args.device, "name": name, "n": n, "window": args.window,
            "idle_timeout": args.stall_timeout, "mode": mode}
    if mode == "tensorsocket":
        base["ts_ports"] = _free_ports(4)
    sup = Supervisor(args.timeout, args.stall_timeout)
    sampler = MemorySampler(lambda: [t.pid for t in sup.trainers])
    cpu0 = cpu_children()
    startup_cpu: Optional[float] = None
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        sampler.start()
        # 1. The shared pipeline, if any.
        _start_producer(sup, cell, args, dataset, base, env)
        producer = sup.producer
        if producer is not None:
            sup.pump(lambda: producer.ready)
        # 2. The trainers: each imports torch, builds its model (and its
        #    DataLoader in independent), says READY and waits.
        if sup.error is None:
            for rank in range(n):
                spec = dict(base, role="trainer", rank=rank, threads=args.threads,
                            model=args.model, step_ms=args.step_ms)
                sup.start_trainer(f"trainer {rank}", [sys.executable, RUNNER, "--role", "trainer",
                                                      "--spec", json.dumps(spec)], env)
            sup.pump(lambda: all(t.ready for t in sup.trainers))
        # 3. GO: the measured part starts. CPU already spent (interpreters,
        #    imports, model building) is subtracted.
        if sup.error is None:
            startup_cpu = descendants_cpu_s()
            sup.go(producer_too=mode != "shared-native")
            sup.pump(lambda: all(t.result is not None for t in sup.trainers))
        # 4. The trainers are done; the producer should finish by itself.
        if sup.error is None and producer is not None:
            if producer.reap(20) is None:
                cell["notes"].append(f"{producer.label} had not exited 20 s after the last trainer "
                                     "finished; killed")
    except KeyboardInterrupt:
        sup.fail("failed", "interrupted")
        raise
    finally:
        sup.stop()
        mem = sampler.finish()
    cpu = cpu_children() - cpu0
    cell["status"], cell["error"] = sup.status, sup.error
    cell["setup_s"] = None if sup.go_at is None else sup.go_at - sup.started
    if sup.status != "ok":
        return cell
    cell.update(mem)
    _add_figures(cell, args, dataset, sup, cpu - startup_cpu, startup_cpu)
    return cell


def _add_figures(cell: Dict[str, Any], args, dataset: Dict[str, Any], sup: Supervisor,
                 cpu_measured: float, startup_cpu: float) -> None:
    """The cell's figures, from the trainers' reports and the CPU measured
    from GO to the end."""
    n = cell["trainers"]
    results = [t.result for t in sup.trainers]
    cell["trainer_results"] = results
    samples = sum(r["samples"] for r in results)
    wall = max(r["end"] for r in results) - sup.go_at
    cell.update(
        samples=samples, wall_s=wall, cpu_s=cpu_measured,
        agg_samples_per_s=samples / wall if wall > 0 else None,
        per_trainer_samples_per_s=sum(r["samples"] / r["wall_s"] for r in results) / n,
        wait_share=sum(r["wait_s"] / r["wall_s"] for r in results) / n,
        cpu_s_per_1k_samples=1000 * cpu_measured / samples if samples else None,
        startup_cpu_s=startup_cpu,
    )
    if sup.producer is not None and isinstance(sup.producer.result, dict):
        cell["producer_result"] = sup.producer.result
    short = [r for r in results if r["samples"] != dataset["files"] * args.epochs]
    if short:
        cell["notes"].append(
            "trainers got {} samples each, not the {} of {} epochs of {} images".format(
                "/".join(str(r["samples"]) for r in results), dataset["files"] * args.epochs,
                args.epochs, dataset["files"]))
    if samples == 0:
        cell["status"], cell["error"] = "failed", "the trainers received no samples"
