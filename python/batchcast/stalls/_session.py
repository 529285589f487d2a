"""One ``batchcast stalls`` analysis: the modes in order, then the arithmetic.

A round: synthetic (which also shows which files the loader opens), cold
(the dataset's files evicted first), warm (every file read first), for
``--jobs`` the loader alone (what a shared producer does: no training
step), then,
when some ``--jobs`` N exceeds the free cores, two copies held to one core
(the cost of time-sharing), then ``--validate``: N copies with their own
loaders, and N copies reading one shared producer, each a workload of
``batchcast run`` recorded in the run store. ``--repeats`` runs R
rounds back to back and reports each figure's median; the K-process
synthetic run under torchrun (``nproc``) runs once, after them.
"""

import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from .. import _experiment
from .._barrier import make_barrier
from . import _analysis, _cache, _protocol
from ._report import SCHEMA_VERSION
from ._runner import StallsError, Store, can_pin, make_job, run_all, run_planned


@dataclass
class Options:
    command: Sequence[str]
    steps: Optional[int] = 30
    seconds: Optional[float] = None
    warmup: int = 5
    #: Rounds of every measurement (modes, time-sharing, --validate); each
    #: figure is the median of its rounds.
    repeats: int = 1
    jobs: list[int] = field(default_factory=list)
    nproc: int = 0
    validate: bool = False
    data: list[str] = field(default_factory=list)
    timeout: float = 300.0
    log: bool = True
    #: The run store ``--validate`` records its copies in (None: the
    #: default store of ``batchcast run``).
    store: Optional[str] = None
    #: The ``batchcast`` binary that runs them (None: found as
    #: :func:`batchcast._experiment.find_binary` says).
    runner: Optional[str] = None


def _say(opts: Options, msg: str) -> None:
    if opts.log:
        print(f"batchcast stalls: {msg}", file=sys.stderr, flush=True)


def _torchrun(command: Sequence[str], nproc: int) -> list[str]:
    if not command or not os.path.basename(command[0]).startswith("python"):
        raise StallsError(
            f"--nproc runs the script under torchrun, which needs the command to start with python (got {command[0]!r})"
        )
    return [
        command[0],
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        *command[1:],
    ]


def analyse(opts: Options) -> dict:
    if not opts.command:
        raise StallsError("no command: give the training command after --, e.g. -- python train.py")
    settings = {_protocol.WARMUP: str(opts.warmup)}
    if opts.steps is not None:
        settings[_protocol.STEPS] = str(opts.steps)
    if opts.seconds is not None:
        settings[_protocol.SECONDS] = str(opts.seconds)
    store = None
    if opts.validate:
        path = os.path.abspath(opts.store or _experiment.default_store())
        binary = opts.runner or _experiment.find_binary()
        if binary is None:
            raise StallsError(
                "--validate runs its copies with `batchcast run`, and no batchcast binary was"
                " found: put batchcast on PATH or set BATCHCAST_BIN to it"
            )
        store = Store(path, _experiment.experiment_name("stalls"), binary)
    base = tempfile.mkdtemp(prefix="batchcast-stalls-")
    try:
        report = _analyse_in(opts, base, settings, store)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if store is not None:
        _say(opts, _experiment.store_line(store.path))
    return report


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


def _analyse_in(opts: Options, base: str, settings: dict[str, str], store: Optional[Store]) -> dict:
    notes: list[str] = []
    rounds: list[dict[str, Any]] = []
    cache_info: dict[str, Any] = {}
    for r in range(opts.repeats):
        if opts.repeats > 1:
            _say(opts, f"round {r + 1} of {opts.repeats}")
        raw, cache_info = _modes(opts, base, settings, notes)
        _compare(opts, raw, base, settings, notes, store, r + 1)
        rounds.append(raw)
    ddp = None
    if opts.nproc > 1:
        _say(opts, f"running the synthetic mode with {opts.nproc} processes (torchrun)")
        job = make_job(
            "ddp",
            _torchrun(opts.command, opts.nproc),
            "synthetic",
            base,
            settings,
            ranks=opts.nproc,
        )
        ddp = _analysis.merge_ranks(run_all([job], opts.timeout)["ddp"])
    return _report(opts, rounds, ddp, notes, cache_info)


def _modes(
    opts: Options, base: str, settings: dict[str, str], notes: list[str]
) -> tuple[dict[str, Any], dict]:
    """One round of the single-process modes: synthetic, cold, warm, and
    for ``--jobs`` the loader alone."""
    raw: dict[str, Any] = {}

    def one(mode: str) -> dict:
        _say(opts, f"running the {mode} mode")
        job = make_job(mode, opts.command, mode, base, settings)
        res = run_all([job], opts.timeout)[mode][0]
        res["opened"] = _cache.read_opened(os.path.join(job.out, _protocol.OPENED_FILE))
        return res

    raw["synthetic"] = one("synthetic")
    files = _cache.files_under(opts.data) if opts.data else []
    if not files:
        files = _cache.files_under(_cache.dataset_roots(raw["synthetic"]["opened"]))
    size = _cache.total_bytes(files)
    cache_info = {
        "files": len(files),
        "bytes": size,
        "roots": opts.data or _cache.dataset_roots(raw["synthetic"]["opened"]),
    }
    if not files:
        _note(
            notes,
            "no dataset files seen (data generated in memory?): cold and warm are the same; name them with --data",
        )
        raw["warm"] = one("warm")
        if opts.jobs:
            raw["loader"] = one("loader")
        return raw, cache_info
    evicted, failed = _cache.evict(files)
    share = _cache.cached_share(files)
    if share is not None and share > 0.5:
        # DONTNEED skips pages that are locked at that moment (I/O in
        # flight, a process of the last round still closing): once more.
        evicted, failed = _cache.evict(files)
        share = _cache.cached_share(files)
    cache_info.update(evicted=evicted, cached_after_evict=share)
    if failed:
        _note(notes, f"could not evict every file ({failed})")
    if share is None:
        _note(notes, "cannot verify the eviction on this kernel (no RWF_NOWAIT)")
    elif share > 0.5:
        _note(
            notes,
            f"eviction did not work: {share:.0%} of the files stay cached (tmpfs? mapped elsewhere?)",
        )
    raw["cold"] = one("cold")
    if size <= _cache.available_bytes() // 2:
        _cache.warm(files)
        raw["warm"] = one("warm")
    else:
        _note(
            notes,
            f"the dataset ({size >> 20} MiB) does not fit in half the free memory: warm mode skipped",
        )
    if opts.jobs:
        # What the producer of --jobs would do: the loader alone, on the
        # cache as warm left it (or as cold did, when warm was skipped).
        raw["loader"] = one("loader")
    return raw, cache_info


def _cores(raw: dict[str, Any]) -> int:
    return int(raw["synthetic"].get("cpus") or os.cpu_count() or 1)


def _compare(
    opts: Options,
    raw: dict[str, Any],
    base: str,
    settings: dict[str, str],
    notes: list[str],
    store: Optional[Store],
    round_no: int,
) -> None:
    """After one round of modes: the cost of time-sharing a core (when some
    ``--jobs`` exceeds the free cores) and, with ``--validate``, the copies."""
    modes = [_analysis.figures(raw[m]) for m in ("synthetic", "cold", "warm") if m in raw]
    free = _analysis.free_cores(_cores(raw), modes)
    if any(n > free for n in opts.jobs):
        got = _timeshare(opts, "warm" if "warm" in raw else "cold", base, settings)
        if got is None:
            _note(
                notes,
                "cannot hold processes to a core here: the cost of more copies than cores is not measured,"
                " so own loaders may be predicted too fast for those",
            )
        else:
            raw["timeshare"] = got
    if opts.validate and store is not None:
        loader = _analysis.figures(raw["loader"]) if "loader" in raw else None
        raw["validate"] = {
            n: _validate(opts, n, base, settings, loader, store, round_no) for n in opts.jobs
        }


#: How long the copies of ``--validate`` are measured (unless ``--seconds``
#: says otherwise): a time window rather than a step count, so that the
#: copies, started together at a barrier, also stop together (a copy that
#: stopped early would leave the others more of the machine) and the window
#: is long enough for this machine's noise.
VALIDATE_SECONDS = 4.0


def _together(base: str, name: str, settings: dict[str, str], jobs: int) -> dict[str, str]:
    barrier = make_barrier(tempfile.mkdtemp(prefix=f"{name}-barrier-", dir=base), jobs)
    together = {k: v for k, v in settings.items() if k != _protocol.STEPS}
    together.setdefault(_protocol.SECONDS, str(VALIDATE_SECONDS))
    return dict(together, **{_protocol.BARRIER: barrier})


def _timeshare(opts: Options, mode: str, base: str, settings: dict[str, str]) -> Optional[dict]:
    """The ``mode`` (warm, or cold when warm was skipped) of two copies held
    to one core, measured together: what a copy's sample costs when a core
    switches between copies (:func:`_analysis.timeshared_cpu`). None where
    processes cannot be held to a core."""
    if not can_pin():
        return None
    core = max(os.sched_getaffinity(0))
    _say(opts, f"measuring the cost of time-sharing: 2 copies on core {core}")
    together = _together(base, "timeshare", settings, 2)
    jobs = [
        make_job(f"timeshare{i}", opts.command, mode, base, together, cpus=frozenset({core}))
        for i in range(2)
    ]
    got = [r[0] for r in run_all(jobs, opts.timeout * 2).values()]
    merged = dict(got[0])  # the waits are the first copy's
    merged["mode"] = "timeshare"
    merged["samples"] = sum(int(r["samples"]) for r in got)
    merged["steps"] = sum(int(r["steps"]) for r in got)
    merged["cpu_seconds"] = sum(float(r["cpu_seconds"]) for r in got)
    merged["seconds"] = max(float(r["seconds"]) for r in got)
    merged["core"] = core
    return merged


def _validate(
    opts: Options,
    jobs: int,
    base: str,
    settings: dict[str, str],
    loader: Optional[_analysis.ModeFigures],
    store: Store,
    round_no: int,
) -> dict[str, Any]:
    """The copies of ``--validate``, as two workloads of ``batchcast run``:
    ``own-N-rR`` (their own loaders) and ``shared-N-rR`` (one producer)."""
    _say(opts, f"validating: {jobs} copies with their own loaders")
    own_settings = _together(base, f"own{jobs}", settings, jobs)
    own = [make_job(f"own{i}", opts.command, "warm", base, own_settings) for i in range(jobs)]
    got = run_planned(own, f"own-{jobs}-r{round_no}", store, base, opts.timeout * 2)
    background = _analysis.background_cores([r[0] for r in got.values()])
    _say(opts, f"validating: {jobs} copies reading one shared producer")
    shared_settings = _together(base, f"shared{jobs}", settings, jobs)
    producer = make_job("producer", opts.command, "producer", base, shared_settings)
    readers = [
        make_job(f"shared{i}", opts.command, "consumer", base, shared_settings) for i in range(jobs)
    ]
    got_shared = run_planned(
        readers, f"shared-{jobs}-r{round_no}", store, base, opts.timeout * 2, producer
    )
    # Other processes while the readers ran, less the producer (not in the
    # readers' trees): it prepared each sample they read once, at the
    # loader mode's CPU per sample.
    read = sorted(_analysis.figures(r[0]).samples_per_s for r in got_shared.values())[
        len(got_shared) // 2
    ]
    producer_cores = read * loader.cpu_per_1000 / 1000.0 if loader is not None else 0.0
    background = max(
        background, _analysis.background_cores([r[0] for r in got_shared.values()], producer_cores)
    )
    copies: dict[str, list[dict[str, float]]] = {}
    for side, runs in (("independent", got), ("shared", got_shared)):
        copies[side] = []
        for r in runs.values():
            f = _analysis.figures(r[0])
            copies[side].append(
                {
                    "samples_per_s": f.samples_per_s,
                    "cpu_per_1000": f.cpu_per_1000,
                    "caught_up_after": r[0].get("caught_up_after", 0),
                }
            )
    total = {side: sum(c["samples_per_s"] for c in cs) for side, cs in copies.items()}
    return {
        "independent": total["independent"],
        "shared": total["shared"],
        "background_cores": background,
        "copies": copies,
    }


def _report(
    opts: Options,
    rounds: list[dict[str, Any]],
    ddp: Optional[dict],
    notes: list[str],
    cache_info: dict,
) -> dict:
    """The analysis from the rounds' medians (each mode's median run, each
    measured aggregate's median)."""
    first = rounds[0]
    modes: dict[str, _analysis.ModeFigures] = {
        m: _analysis.figures(_analysis.median_run([r[m] for r in rounds]))
        for m in ("synthetic", "cold", "warm")
        if m in first
    }
    comm_step = _analysis.figures(ddp).step_s if ddp else None
    stall_list = _analysis.stalls(modes, comm_step)
    kind = _analysis.classify(stall_list)
    cores = _cores(first)
    real = modes.get("warm") or modes["cold"]
    free = _analysis.free_cores(cores, list(modes.values()))
    ts_runs = [r["timeshare"] for r in rounds if "timeshare" in r]
    timeshare = _analysis.median_run(ts_runs) if ts_runs else None
    timeshared = _analysis.figures(timeshare) if timeshare else None
    loader_runs = [r["loader"] for r in rounds if "loader" in r]
    loader = _analysis.figures(_analysis.median_run(loader_runs)) if loader_runs else None
    predictions = [
        _analysis.predict(modes["synthetic"], real, free, n, timeshared, loader) for n in opts.jobs
    ]
    measured: dict[int, dict] = {}
    if opts.validate:
        for i, n in enumerate(opts.jobs):
            measured[n] = _analysis.median_measured([r["validate"][n] for r in rounds])
            # Checked against the cores other processes left free while the
            # copies ran (a build beside them changes the machine, not the model).
            at = max(1.0, cores - measured[n]["background_cores"])
            predictions[i] = _analysis.predict(modes["synthetic"], real, at, n, timeshared, loader)
    speedups = {
        n: m["shared"] / m["independent"] for n, m in measured.items() if m["independent"] > 0
    }
    cpu_saved = (
        max(0.0, 1 - modes["synthetic"].cpu_per_1000 / real.cpu_per_1000)
        if real.cpu_per_1000 > 0
        else 0.0
    )
    spread = {
        m: [_analysis.figures(r[m]).samples_per_s for r in rounds]
        for m in ("synthetic", "cold", "warm")
        if m in first
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "command": list(opts.command),
        "cores": cores,
        "free_cores": free,
        "repeats": len(rounds),
        "verdict": _analysis.verdict(kind, stall_list, predictions, speedups, cpu_saved),
        "regime": kind,
        "modes": {m: vars(f) for m, f in modes.items()},
        "spread": spread,
        "ddp": (vars(_analysis.figures(ddp)) | {"processes": opts.nproc}) if ddp else None,
        "timeshare": (vars(timeshared) | {"core": timeshare["core"]})
        if timeshare and timeshared
        else None,
        "loader": vars(loader) if loader else None,
        "stalls": [vars(s) for s in stall_list],
        "predictions": [
            {
                "jobs": p.jobs,
                "cores": p.cores,
                "independent": p.independent,
                "shared": p.shared,
                "speedup": p.speedup,
                "measured": measured.get(p.jobs),
            }
            for p in predictions
        ],
        "epochs": {m: first[m].get("epochs", []) for m in modes},
        "cache": cache_info,
        "notes": notes,
    }
