"""One run of a (model, mode, N) cell, as a workload of `batchcast run`:
the N trainers are its jobs, the mode's shared pipeline its Data (a
`batchcast serve` or a `batchcast.Producer`) or, for TensorSocket, one more
job. The runner starts, watches (CPU, memory, the GPU) and records them in
the run store; the trainers set up, meet at a start barrier, train, and
write their figures, which the runner records too. The cell's figures are
read back from the store; this module only watches the trainers' progress
files to cut a hang short (--stall-timeout) and a slow start-up."""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from typing import Any

from batchcast import _experiment
from batchcast._barrier import arrived, is_open, make_barrier

from .native import native_serve_argv
from .plan import Run, workers_for
from .recorded import GPU_FIELDS, SERIES, cpu_figures, gpu_figures, memory_figures
from .roles import FAILED_FILE, PROGRESS_FILE, RESULT_FILE

# The entry script: the child processes are it again, run with --role.
RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collocated.py")
#: The runner's listeners' period, seconds.
INTERVAL_S = 0.25
#: Seconds the shared producer gets to end by itself after the last trainer.
LINGER_S = 20.0
#: The job of a TensorSocket producer (the runner's shared producer is its Data run).
TS_PRODUCER = "producer"

# Keys every cell of the JSON output has (the test checks them).
CELL_FIELDS = (
    "model", "mode", "trainers", "status", "error", "notes", "workers", "samples", "expected_samples",
    "exact", "wall_s", "agg_samples_per_s", "per_trainer_samples_per_s", "wait_share",
    "cpu_s", "cpu_s_per_1k_samples", "cpu_cores", "peak_mem_mb", "mem_trainers_mb",
    "mem_loading_mb", "sum_peak_rss_mb", *GPU_FIELDS, "gpu_note", "speedup", "of_ceiling",
    "trainer_results",
)
# A trainer's figures that are counts.
_COUNTS = ("rank", "samples", "batches")


def blank_cell(mode: str, n: int, model: str | None = None) -> dict[str, Any]:
    """A cell with every field, none measured yet."""
    cell = {k: None for k in CELL_FIELDS}
    cell.update(model=model, mode=mode, trainers=n, notes=[], trainer_results=[])
    return cell


def _free_ports(n: int) -> list[int]:
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


def trainer_name(rank: int) -> str:
    return f"trainer-{rank}"


class Watch:
    """The trainers of a running cell, seen through their files: whether
    they all have reported (done), and whether the cell must be stopped
    (abort): a trainer failed, start-up took over its limit, or no trainer
    made progress for --stall-timeout after the go."""

    def __init__(self, out: str, barrier: str, n: int, startup_limit: float, stall_timeout: float):
        self.out, self.barrier, self.n = out, barrier, n
        self.startup_limit, self.stall_timeout = startup_limit, stall_timeout
        self.started = time.monotonic()
        self.go_seen: float | None = None
        self.progress = [0] * n
        self.last_progress: list[float | None] = [None] * n
        self.status, self.error = "ok", None

    def _file(self, pattern: str, rank: int) -> str:
        return os.path.join(self.out, pattern.format(rank=rank))

    def done(self) -> bool:
        return all(os.path.exists(self._file(RESULT_FILE, r)) for r in range(self.n))

    def read_progress(self) -> None:
        now = time.monotonic()
        for r in range(self.n):
            try:
                with open(self._file(PROGRESS_FILE, r)) as f:
                    got = int(f.read(32) or 0)
            except (OSError, ValueError):
                continue
            if got != self.progress[r] or self.last_progress[r] is None:
                self.progress[r], self.last_progress[r] = got, now

    def abort(self) -> bool:
        if any(os.path.exists(self._file(FAILED_FILE, r)) for r in range(self.n)):
            return True  # the run store says how it failed
        now = time.monotonic()
        if self.go_seen is None:
            if is_open(self.barrier):
                self.go_seen = now
            elif now - self.started > self.startup_limit:
                self.status, self.error = "timeout", (
                    f"start-up took over {self.startup_limit:g} s; {arrived(self.barrier)} of "
                    f"{self.n} trainers were ready")
                return True
            return False
        self.read_progress()
        last = max([self.go_seen] + [t for t in self.last_progress if t is not None])
        if now - last > self.stall_timeout and not self.done():
            so_far = ", ".join(f"trainer {r}: {p} samples" for r, p in enumerate(self.progress))
            self.status, self.error = "timeout", (
                f"hang: no trainer made progress for {self.stall_timeout:g} s (--stall-timeout); "
                f"so far {so_far}")
            return True
        return False


def _jobs(args, dataset: dict[str, Any], run: Run, cell: dict[str, Any], base: dict[str, Any],
          workload: str) -> list[_experiment.Job]:
    """The cell's jobs: N trainers, with the mode's shared pipeline as their
    Data (or, for TensorSocket, a job of its own). Raises RuntimeError when
    the pipeline cannot be made (no batchcast binary)."""
    me = [sys.executable, RUNNER]
    mode = run.mode
    env = {"PYTHONUNBUFFERED": "1"}
    listeners = ("process", "gpu") if args.cuda else ("process",)
    data: list[str] | None = None
    jobs = []
    if mode == "shared-python":
        data = me + ["--role", "py-producer", "--spec", json.dumps(dict(base, role="py-producer", threads=1))]
    elif mode == "shared-native":
        data = native_serve_argv(args, dataset["path"], base["name"], run.n, base["workers"])
        cell["notes"].append("serve: " + " ".join(data))
        if os.sep + "debug" + os.sep in data[0]:
            cell["notes"].append(f"{data[0]} is a debug build: its figures are not representative")
    elif mode in ("tensorsocket", "tensorsocket-gpu"):
        # TensorSocket 0.0.5 moves every batch to the GPU (a pool of 10
        # device slots shared by CUDA IPC) whenever its producer sees one:
        # `tensorsocket` hides the GPU from it (CPU shared memory, a copy in
        # each trainer), `tensorsocket-gpu` is its own set-up on a GPU machine.
        ts_env = dict(env)
        if mode == "tensorsocket":
            ts_env["CUDA_VISIBLE_DEVICES"] = ""
        elif not args.cuda:
            cell["notes"].append("no GPU: TensorSocket sends CPU tensors here, as in `tensorsocket`")
        spec = json.dumps(dict(base, role="ts-producer", threads=1))
        jobs.append(_experiment.Job(workload, TS_PRODUCER, me + ["--role", "ts-producer", "--spec", spec],
                                    ts_env, listeners=listeners))
    for rank in range(run.n):
        spec = dict(base, role="trainer", rank=rank, threads=args.threads, model=run.model,
                    step_ms=args.step_ms, warmup=args.warmup)
        jobs.append(_experiment.Job(workload, trainer_name(rank),
                                    me + ["--role", "trainer", "--spec", json.dumps(spec)], env,
                                    data=data, data_env=env, listeners=listeners))
    return jobs


def run_cell(args, dataset: dict[str, Any], run: Run, log, timeout: float, experiment: str,
             store: str, workdir: str) -> dict[str, Any]:
    """One run of the cell (run.model, run.mode, run.n) into `store` as a
    workload of `experiment`, cut short after `timeout` s."""
    mode, n = run.mode, run.n
    cell = blank_cell(mode, n, run.model)
    cell.update(repeat=run.repeat, workers=workers_for(args, mode, n) if mode != "ceiling" else 0,
                expected_samples=n * dataset["files"] * args.epochs)
    workload = f"{run.model}/{mode}/N={n}/r{run.repeat + 1}"
    out = tempfile.mkdtemp(prefix=f"{mode}-{n}-", dir=workdir)
    startup_limit = max(120.0, 4 * args.stall_timeout)  # interpreters, imports, model building
    barrier = make_barrier(os.path.join(out, "barrier"), n)
    base = {"data": dataset["path"], "images": dataset["files"], "image_size": args.image_size,
            "batch_size": args.batch_size, "workers": cell["workers"], "epochs": args.epochs,
            "seed": args.seed, "classes": args.classes, "cuda": args.cuda, "device": args.device,
            "name": f"bcbench-{os.getpid()}-{mode}-{n}", "n": n, "window": args.window,
            "idle_timeout": max(args.stall_timeout, args.timeout), "mode": mode, "out": out,
            "barrier": barrier, "startup_limit": startup_limit}
    if mode in ("tensorsocket", "tensorsocket-gpu"):
        base["ts_ports"] = _free_ports(4)
    try:
        jobs = _jobs(args, dataset, run, cell, base, workload)
    except RuntimeError as e:
        cell["status"], cell["error"] = "failed", str(e)
        return cell
    watch = Watch(out, barrier, n, startup_limit, args.stall_timeout)
    try:
        runs = _experiment.run_plan(jobs, experiment, store, out, timeout, args.batchcast_bin_found,
                                    done=watch.done, linger=LINGER_S, abort=watch.abort,
                                    interval=INTERVAL_S, series=SERIES)
    except _experiment.ExperimentError as e:
        cell["status"], cell["error"] = "failed", str(e)
        return cell
    runs = [r for r in runs if r.workload == workload]
    cell["runs_in_store"] = [r.id for r in runs]
    _settle(cell, watch, runs, timeout)
    if cell["status"] != "ok":
        _add_partial(cell, watch)
        return cell
    _add_figures(cell, args, dataset, runs, out, watch)
    return cell


def _tail(output: str, lines: int = 12) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def _settle(cell: dict[str, Any], watch: Watch, runs: list[_experiment.Run], timeout: float) -> None:
    """The cell's status and error from how its runs ended: the shared
    producer's failure first (the trainers fail or hang after it), then a
    trainer's, then the watch's or the time limit's."""
    by_name = {r.name: r for r in runs}
    feeder = by_name.get(_experiment.DATA_RUN) or by_name.get(TS_PRODUCER)
    label = {_experiment.DATA_RUN: "the shared producer", TS_PRODUCER: "producer (TensorProducer)"}

    def fail(kind: str, error: str | None) -> None:
        cell["status"], cell["error"] = kind, error

    fail("ok", None)
    if feeder is not None and (feeder.status == "FAILED" or feeder.exit_code not in (0, None)):
        why = (f"exited with status {feeder.exit_code}" if feeder.exit_code not in (0, None)
               else feeder.message or "failed")
        tail = _tail(feeder.output)
        return fail("failed", f"{label[feeder.name]} {why}" + (f":\n{tail}" if tail else " (no output)"))
    # A trainer that died by a signal first: the others fail at the start
    # barrier after it, and their error names it by pid only.
    ranks = sorted(range(cell["trainers"]),
                   key=lambda k: getattr(by_name.get(trainer_name(k)), "exit_code", None) is not None)
    for rank in ranks:
        r = by_name.get(trainer_name(rank))
        if r is None:
            return fail("failed", f"trainer {rank} was not run (see the run store)")
        if r.exit_code not in (0, None) or (r.status == "FAILED" and not r.figures):
            tail = _tail(r.output)
            why = f"exited with status {r.exit_code}" if r.exit_code is not None else (r.message or "failed")
            return fail("failed", f"trainer {rank} {why}" + (f":\n{tail}" if tail else " (no output)"))
    if watch.error is not None:
        return fail(watch.status, watch.error)
    if any(r.status == "TIMEOUT" for r in runs):
        return fail("timeout", f"the cell took longer than --timeout {timeout:g} s")
    for rank in range(cell["trainers"]):
        r = by_name[trainer_name(rank)]
        if "samples" not in r.figures:
            return fail("failed", f"trainer {rank} ended {r.status} without its figures in the run store"
                                  + (f" ({r.message})" if r.message else ""))
    if feeder is not None and feeder.status == "KILLED":
        cell["notes"].append(f"{label[feeder.name]} had not exited {LINGER_S:g} s after the last trainer "
                             "finished; killed")


def _add_partial(cell: dict[str, Any], watch: Watch) -> None:
    """For a cell stopped after the go (a hang, a time limit): how fast its
    trainers went until their last progress, in the JSON and a note."""
    watch.read_progress()
    last = [t for t in watch.last_progress if t is not None]
    if watch.go_seen is None or not last:
        return
    samples, wall = sum(watch.progress), max(last) - watch.go_seen
    cell["partial"] = {"samples": samples, "wall_s": wall,
                       "agg_samples_per_s": samples / wall if wall > 0 else None}
    if wall > 0:
        cell["notes"].append(f"until it stopped: {samples} samples in {wall:.1f} s, "
                             f"{samples / wall:.1f} samples/s aggregate")


def _trainer_result(run: _experiment.Run, out: str, rank: int) -> dict[str, Any]:
    """A trainer's report: its figures as the run store holds them, with
    what is no number (batch shapes, the loader's stats) from its file."""
    try:
        with open(os.path.join(out, RESULT_FILE.format(rank=rank))) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {}
    figures = dict(run.figures)
    for k in _COUNTS:
        if k in figures:
            figures[k] = int(figures[k])
    cpu = {"self": figures.pop("cpu_self", None), "children": figures.pop("cpu_children", None)}
    result.update(figures, cpu=cpu, run_id=run.id)
    return result


def _add_figures(cell: dict[str, Any], args, dataset: dict[str, Any], runs: list[_experiment.Run],
                 out: str, watch: Watch) -> None:
    """The cell's figures: the trainers' own (throughput, waits), and the
    CPU, memory and GPU the runner recorded, from the go to the last end."""
    n = cell["trainers"]
    by_name = {r.name: r for r in runs}
    names = [trainer_name(rank) for rank in range(n)]
    results = [_trainer_result(by_name[name], out, rank) for rank, name in enumerate(names)]
    cell["trainer_results"] = results
    go = min(r["go"] for r in results)
    go_wall, end_wall = min(r["go_wall"] for r in results), max(r["end_wall"] for r in results)
    samples = sum(r["samples"] for r in results)
    wall = max(r["end"] for r in results) - go
    cpu = cpu_figures(runs, {name: by_name[name].figures for name in names}, int(go_wall * 1000))
    cpu_s = cpu["cpu_s"]
    cell.update(
        samples=samples, wall_s=wall, cpu_s=cpu_s, setup_s=go - watch.started,
        agg_samples_per_s=samples / wall if wall > 0 else None,
        per_trainer_samples_per_s=sum(r["samples"] / r["wall_s"] for r in results) / n,
        wait_share=sum(r["wait_s"] / r["wall_s"] for r in results) / n,
        cpu_s_per_1k_samples=1000 * cpu_s / samples if samples else None,
        cpu_cores=cpu_s / wall if wall > 0 else None,
        startup_cpu_s=cpu["startup_cpu_s"],
    )
    cell.update(memory_figures(runs, names))
    cell.update(gpu_figures(runs, args.device if args.cuda else None, int(go_wall * 1000),
                            int(end_wall * 1000)))
    feeder = by_name.get(_experiment.DATA_RUN) or by_name.get(TS_PRODUCER)
    if feeder is not None:
        cell["producer_result"] = dict(feeder.figures, status=feeder.status, cpu_s=feeder.cpu_seconds,
                                       run_id=feeder.id)
    each = dataset["files"] * args.epochs
    cell["exact"] = all(r["samples"] == each for r in results)
    if not cell["exact"]:
        cell["notes"].append(
            "NOT EXACT: trainers got {} samples each, not the {} of {} epochs of {} images".format(
                "/".join(str(r["samples"]) for r in results), each, args.epochs, dataset["files"]))
    if samples == 0:
        cell["status"], cell["error"] = "failed", "the trainers received no samples"
