"""The stall arithmetic: per-mode figures, stalls, the sharing prediction, the verdict.

Pure functions over the JSON results of the modes, so that every number in
the report can be checked by hand (and is, in tests/python/test_stalls.py).

* **fetch stall** = cold step - warm step (reading the data from storage);
* **prep stall** = warm step - synthetic step (decoding and augmenting);
* **communication stall** = K-process synthetic step - 1-process synthetic
  step (Stash's interconnect stall; on one CPU machine it includes the
  processes' contention for cores);

each as seconds per step, per epoch (``len()`` steps) and as a share of the
step the script takes with its real loader (cold when measured, else warm).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional


def percentile(xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; 0 for no data."""
    if not xs:
        return 0.0
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass(frozen=True)
class ModeFigures:
    mode: str
    steps: int
    samples: int
    seconds: float
    steps_per_s: float
    samples_per_s: float
    step_s: float
    wait_mean: float
    wait_p50: float
    wait_p95: float
    cpu_per_1000: float  # CPU seconds of the process tree per 1000 samples
    batch_size: float
    epoch_steps: Optional[int]
    num_workers: int
    others_cores: float  # cores busy with other processes during the window


def figures(result: dict) -> ModeFigures:
    """Reduces one mode's raw result (as the marked script wrote it)."""
    steps = int(result["steps"])
    samples = int(result["samples"])
    seconds = max(float(result["seconds"]), 1e-9)
    waits = [float(w) for w in result.get("waits", [])]
    return ModeFigures(
        mode=str(result["mode"]),
        steps=steps,
        samples=samples,
        seconds=seconds,
        steps_per_s=steps / seconds,
        samples_per_s=samples / seconds,
        step_s=seconds / max(steps, 1),
        wait_mean=sum(waits) / len(waits) if waits else 0.0,
        wait_p50=percentile(waits, 50),
        wait_p95=percentile(waits, 95),
        cpu_per_1000=1000.0 * float(result["cpu_seconds"]) / max(samples, 1),
        batch_size=samples / max(steps, 1),
        epoch_steps=result.get("len"),
        num_workers=int(result.get("num_workers", 0) or 0),
        others_cores=float(result.get("others_cpu_seconds", 0.0)) / seconds,
    )


def median_run(runs: Sequence[dict]) -> dict:
    """Of several raw results of one mode, the run with the median
    samples/s (the lower median for an even count): one whole run, so that
    its figures (rate, waits, CPU) stay consistent with each other."""
    if not runs:
        raise ValueError("median_run of no runs")
    ranked = sorted(runs, key=lambda r: int(r["samples"]) / max(float(r["seconds"]), 1e-9))
    return ranked[(len(ranked) - 1) // 2]


def median_measured(rounds: Sequence[dict]) -> dict:
    """Of several rounds of ``--validate`` for one job count, the median of
    each aggregate (own loaders, shared, background cores); the copies'
    figures are the median own-loaders round's, and every round is kept."""
    if not rounds:
        raise ValueError("median_measured of no rounds")

    def med(key: str) -> float:
        xs = sorted(float(r[key]) for r in rounds)
        return xs[(len(xs) - 1) // 2]

    middle = sorted(rounds, key=lambda r: float(r["independent"]))[(len(rounds) - 1) // 2]
    return {
        "independent": med("independent"),
        "shared": med("shared"),
        "background_cores": med("background_cores"),
        "copies": middle["copies"],
        "rounds": [
            {k: r[k] for k in ("independent", "shared", "background_cores")} for r in rounds
        ],
    }


def merge_ranks(results: list[dict]) -> dict:
    """One result for K data-parallel ranks: the slowest rank's time (the
    step waits for it), samples and CPU summed over ranks."""
    slowest = max(results, key=lambda r: float(r["seconds"]) / max(int(r["steps"]), 1))
    merged = dict(slowest)
    merged["samples"] = sum(int(r["samples"]) for r in results)
    merged["cpu_seconds"] = sum(float(r["cpu_seconds"]) for r in results)
    return merged


@dataclass(frozen=True)
class Stall:
    name: str
    per_step_s: float
    per_epoch_s: Optional[float]
    share: float  # of the real step


def _stall(name: str, slow: float, fast: float, real_step: float, epoch: Optional[int]) -> Stall:
    per_step = max(0.0, slow - fast)
    return Stall(
        name,
        per_step,
        per_step * epoch if epoch else None,
        per_step / real_step if real_step > 0 else 0.0,
    )


def stalls(modes: dict[str, ModeFigures], comm_step_s: Optional[float] = None) -> list[Stall]:
    """Fetch, prep and (with a K-process run) communication stalls."""
    syn = modes["synthetic"]
    real = modes.get("cold") or modes["warm"]
    epoch = syn.epoch_steps
    out = []
    if "cold" in modes and "warm" in modes:
        out.append(_stall("fetch", modes["cold"].step_s, modes["warm"].step_s, real.step_s, epoch))
    if "warm" in modes:
        out.append(_stall("prep", modes["warm"].step_s, syn.step_s, real.step_s, epoch))
    elif "cold" in modes:
        out.append(_stall("fetch+prep", modes["cold"].step_s, syn.step_s, real.step_s, epoch))
    if comm_step_s is not None:
        out.append(_stall("communication", comm_step_s, syn.step_s, comm_step_s, epoch))
    return out


@dataclass(frozen=True)
class Prediction:
    jobs: int
    independent: float  # aggregate samples/s of N jobs, N loaders
    shared: float  # aggregate samples/s of N jobs reading one producer
    cores: float = 0.0  # the free cores it was predicted for

    @property
    def speedup(self) -> float:
        return self.shared / self.independent if self.independent > 0 else 0.0


def free_cores(cores: int, modes: Sequence[ModeFigures]) -> float:
    """The cores left to the script: all of them less what other processes
    used while the modes ran (the least seen), at least one."""
    busy = min((m.others_cores for m in modes), default=0.0)
    return max(1.0, cores - busy)


def background_cores(copies: Sequence[dict], known: float = 0.0) -> float:
    """Cores used by processes other than ``copies`` (raw results of copies
    measured together) and a ``known`` load beside them (a shared producer):
    the machine's busy rate less the copies' own, less ``known``."""
    if not copies:
        return 0.0
    busy = sorted(
        (float(r.get("others_cpu_seconds", 0.0)) + float(r["cpu_seconds"]))
        / max(float(r["seconds"]), 1e-9)
        for r in copies
    )[len(copies) // 2]
    own = sum(float(r["cpu_seconds"]) / max(float(r["seconds"]), 1e-9) for r in copies)
    return max(0.0, busy - own - known)


def timeshared_cpu(k_alone: float, k_timeshared: Optional[float], cores: float, jobs: int) -> float:
    """CPU seconds per sample of one of ``jobs`` copies on ``cores`` cores.

    Up to one copy per core, what a copy alone uses (``k_alone``). With more
    copies than cores, the cores switch between copies, which costs cache
    refills and leaves no idle core for the kernel's side work: a share
    ``min(1, (jobs - cores) / cores)`` of the cores runs two copies or more,
    and a copy there uses ``k_timeshared``, measured by running two copies
    on one core (:func:`batchcast.stalls` does, when ``jobs`` > ``cores``).
    Without that measurement, ``k_alone``.
    """
    if k_timeshared is None or cores <= 0 or jobs <= cores:
        return k_alone
    shared = min(1.0, (jobs - cores) / cores)
    return k_alone + (k_timeshared - k_alone) * shared


def predict(
    syn: ModeFigures,
    warm: ModeFigures,
    cores: float,
    jobs: int,
    timeshared: Optional[ModeFigures] = None,
    loader: Optional[ModeFigures] = None,
) -> Prediction:
    """Aggregate throughput of ``jobs`` collocated copies on ``cores`` cores
    (the free ones, :func:`free_cores`).

    Own loaders: each copy alone runs at the warm rate and uses the warm CPU
    per sample, or with more copies than cores what :func:`timeshared_cpu`
    says (``timeshared``: the warm mode of two copies on one core);
    together they cannot use more than ``cores``.

    One shared producer: each sample is prepared once for all copies, each
    copy runs at most at its synthetic rate, and all of it together cannot
    use more than ``cores``. The prep CPU per sample is the ``loader``
    mode's (the loader alone in its own process, which is what the producer
    is), else warm - synthetic CPU per sample. The difference of two figures
    carries the noise of both, and on the machines measured it came out 10
    to 20 % above what the loader alone costs, so the producer was predicted
    that much too slow.
    The producer's ``workers = max(1, num_workers)`` processes prepare on
    cores they share with the copies' training steps, and the copies wake
    together (they all wait for the same batch): the first ``cores -
    workers`` of them find an idle core, the rest spread over every core, so
    a share ``f = max(0, jobs - (cores - workers)) / (jobs x cores)`` of
    the copies' step CPU lands on each producer core, and each copy gets
    ``workers / (prep CPU + workers x jobs x f x synthetic CPU)`` samples/s,
    at most what the loader alone delivered.
    """
    k_warm = warm.cpu_per_1000 / 1000.0
    k_syn = syn.cpu_per_1000 / 1000.0
    k_prep = loader.cpu_per_1000 / 1000.0 if loader is not None else max(0.0, k_warm - k_syn)
    k_own = timeshared_cpu(
        k_warm, timeshared.cpu_per_1000 / 1000.0 if timeshared else None, cores, jobs
    )
    independent = min(jobs * warm.samples_per_s, cores / k_own if k_own > 0 else float("inf"))
    workers = max(1, warm.num_workers)
    landing = max(0.0, jobs - (cores - workers)) / (jobs * cores) if jobs > 0 and cores > 0 else 0.0
    busy = k_prep + workers * jobs * min(landing, 1.0 / cores) * k_syn
    producer_rate = workers / busy if busy > 0 else float("inf")
    if loader is not None:
        producer_rate = min(producer_rate, loader.samples_per_s)
    per_sample = k_syn + k_prep / jobs
    shared = min(
        jobs * syn.samples_per_s,
        jobs * producer_rate,
        cores / per_sample if per_sample > 0 else float("inf"),
    )
    return Prediction(jobs, independent, shared, cores)


def classify(stall_list: list[Stall], data_threshold: float = 0.2) -> str:
    """``fetch-bound``, ``prep-bound`` or ``compute-bound``: data-bound when
    fetch and prep together take at least ``data_threshold`` of the step."""
    by = {s.name: s.share for s in stall_list}
    fetch = by.get("fetch", 0.0)
    prep = by.get("prep", by.get("fetch+prep", 0.0))
    if fetch + prep < data_threshold:
        return "compute-bound"
    return "fetch-bound" if fetch > prep else "prep-bound"


def verdict(
    kind: str,
    stall_list: list[Stall],
    predictions: list[Prediction],
    measured: dict[int, float],
    cpu_saved: float,
) -> str:
    """The plain-words summary line. ``measured`` maps jobs to a measured
    speedup (``--validate``); ``cpu_saved`` is the share of CPU per sample
    that sharing would save each extra copy."""
    data = sum(s.share for s in stall_list if s.name in ("fetch", "prep", "fetch+prep"))
    parts = []
    if kind == "compute-bound":
        parts.append(f"compute-bound: only {data:.0%} of each step waits for data")
    else:
        parts.append(f"{kind}: {data:.0%} of each step waits for data")
    for p in predictions:
        m = measured.get(p.jobs)
        said = f"{p.speedup:.1f}x predicted" + (f", {m:.1f}x measured" if m is not None else "")
        parts.append(f"one shared pipeline for {p.jobs} jobs: {said}")
    if predictions and max(p.speedup for p in predictions) < 1.1:
        parts.append(f"sharing saves CPU ({cpu_saved:.0%} per sample per extra job) but not time")
    return "; ".join(parts)
