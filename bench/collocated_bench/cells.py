"""One run of a (model, mode, N) cell: the shared pipeline of the mode (if
any) and N trainers are started and set up, told to go together, and
supervised until the last trainer has reported; then the cell's figures are
derived from what the trainers report and what the runner measured (CPU,
memory, the GPU), and whether every trainer got every sample."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any, Dict, List, Optional

from .gpu import FIELDS as GPU_FIELDS, GpuSampler
from .measure import MemorySampler, cpu_children, descendants_cpu_s
from .native import native_serve_argv
from .plan import Run, workers_for
from .supervise import Supervisor

# The entry script: the child processes are it again, run with --role.
RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collocated.py")

# Keys every cell of the JSON output has (the test checks them).
CELL_FIELDS = (
    "model", "mode", "trainers", "status", "error", "notes", "workers", "samples", "expected_samples",
    "exact", "wall_s", "agg_samples_per_s", "per_trainer_samples_per_s", "wait_share",
    "cpu_s", "cpu_s_per_1k_samples", "cpu_cores", "peak_mem_mb", "mem_trainers_mb",
    "mem_loading_mb", "sum_peak_rss_mb", *GPU_FIELDS, "gpu_note", "speedup", "of_ceiling",
    "trainer_results",
)


def blank_cell(mode: str, n: int, model: Optional[str] = None) -> Dict[str, Any]:
    """A cell with every field, none measured yet."""
    cell = {k: None for k in CELL_FIELDS}
    cell.update(model=model, mode=mode, trainers=n, notes=[], trainer_results=[])
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
    elif mode in ("tensorsocket", "tensorsocket-gpu"):
        # TensorSocket 0.0.5 moves every batch to the GPU (a pool of 10
        # device slots shared by CUDA IPC) whenever its producer sees one:
        # `tensorsocket` hides the GPU from it (CPU shared memory, a copy in
        # each trainer), `tensorsocket-gpu` is its own set-up on a GPU machine.
        if mode == "tensorsocket":
            env = dict(env, CUDA_VISIBLE_DEVICES="")
        elif not args.cuda:
            cell["notes"].append("no GPU: TensorSocket sends CPU tensors here, as in `tensorsocket`")
        sup.start_producer("producer (TensorProducer)", me + ["--role", "ts-producer", "--spec",
                           json.dumps(dict(base, role="ts-producer", threads=1))], env)
    elif mode == "shared-native":
        try:
            argv = native_serve_argv(args, dataset["path"], name, n, base["workers"])
        except RuntimeError as e:
            sup.fail("failed", str(e))
            return
        cell["notes"].append("serve: " + " ".join(argv))
        if os.sep + "debug" + os.sep in argv[0]:
            cell["notes"].append(f"{argv[0]} is a debug build: its figures are not representative")
        sup.start_producer("batchcast serve", argv, env)


def run_cell(args, dataset: Dict[str, Any], run: Run, log, timeout: float) -> Dict[str, Any]:
    """One run of the cell (run.model, run.mode, run.n), cut short after `timeout` s."""
    mode, n = run.mode, run.n
    cell = blank_cell(mode, n, run.model)
    cell.update(repeat=run.repeat, workers=workers_for(args, mode, n) if mode != "ceiling" else 0,
                expected_samples=n * dataset["files"] * args.epochs)
    name = f"bcbench-{os.getpid()}-{mode}-{n}"
    base = {"data": dataset["path"], "images": dataset["files"], "image_size": args.image_size,
            "batch_size": args.batch_size, "workers": cell["workers"], "epochs": args.epochs,
            "seed": args.seed, "classes": args.classes, "cuda": args.cuda, "device": args.device,
            "name": name, "n": n, "window": args.window, "idle_timeout": max(args.stall_timeout, args.timeout), "mode": mode}
    if mode in ("tensorsocket", "tensorsocket-gpu"):
        base["ts_ports"] = _free_ports(4)
    sup = Supervisor(timeout, args.stall_timeout)
    gpu = GpuSampler(args.device, args.cuda)
    sampler = MemorySampler(lambda: [t.pid for t in sup.trainers], ignored_pids_fn=gpu.pids)
    cpu0 = cpu_children()
    startup_cpu: Optional[float] = None
    gpu_cpu_at_go = 0.0
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
                            model=run.model, step_ms=args.step_ms, warmup=args.warmup)
                sup.start_trainer(f"trainer {rank}", [sys.executable, RUNNER, "--role", "trainer",
                                                      "--spec", json.dumps(spec)], env)
            sup.pump(lambda: all(t.ready for t in sup.trainers))
        # 3. GO: the measured part starts. CPU already spent (interpreters,
        #    imports, model building) is subtracted.
        if sup.error is None:
            gpu.start()
            gpu_cpu_at_go = gpu.own_cpu_s()
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
        gpu.stop()
        sup.stop()
        mem = sampler.finish()
    cpu = cpu_children() - cpu0
    cell["status"], cell["error"] = sup.status, sup.error
    cell["setup_s"] = None if sup.go_at is None else sup.go_at - sup.started
    if sup.status != "ok":
        _add_partial(cell, sup)
        return cell
    cell.update(mem)
    sampler_cpu = gpu.cpu_at_stop - gpu_cpu_at_go  # nvidia-smi's, after GO: not the mode's
    _add_figures(cell, args, dataset, sup, cpu - startup_cpu - sampler_cpu, startup_cpu)
    if cell["status"] == "ok":
        cell.update(gpu.figures(sup.go_at, sup.go_at + cell["wall_s"]))
    return cell


def _add_partial(cell: Dict[str, Any], sup: Supervisor) -> None:
    """For a cell stopped after GO (a hang, a time limit): how fast its
    trainers went until their last progress, in the JSON and a note."""
    last = [t.last_progress for t in sup.trainers if t.last_progress is not None]
    if sup.go_at is None or not last:
        return
    samples, wall = sum(t.progress for t in sup.trainers), max(last) - sup.go_at
    cell["partial"] = {"samples": samples, "wall_s": wall,
                       "agg_samples_per_s": samples / wall if wall > 0 else None}
    if wall > 0:
        cell["notes"].append(f"until it stopped: {samples} samples in {wall:.1f} s, "
                             f"{samples / wall:.1f} samples/s aggregate")


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
        cpu_cores=cpu_measured / wall if wall > 0 else None,
        startup_cpu_s=startup_cpu,
    )
    if sup.producer is not None and isinstance(sup.producer.result, dict):
        cell["producer_result"] = sup.producer.result
    each = dataset["files"] * args.epochs
    cell["exact"] = all(r["samples"] == each for r in results)
    if not cell["exact"]:
        cell["notes"].append(
            "NOT EXACT: trainers got {} samples each, not the {} of {} epochs of {} images".format(
                "/".join(str(r["samples"]) for r in results), each, args.epochs, dataset["files"]))
    if samples == 0:
        cell["status"], cell["error"] = "failed", "the trainers received no samples"
