"""The collocated-training benchmark runner, bench/collocated.py (the
package bench/collocated_bench/), at a tiny size: every mode runs (or, where
it cannot, is reported as failed with its error instead of crashing or
hanging the runner), the JSON has every field, and the derived figures
(speedup, samples/s, CPU per 1000 samples) follow from the measured ones.
Speed is not asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "bench" / "collocated.py"

pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("PIL")


# The runner's package, bench/collocated_bench/ (RUNNER is its entry script).
sys.path.insert(0, str(ROOT / "bench"))
from collocated_bench import (  # noqa: E402 - after the path is set
    CELL_FIELDS, add_speedups, blank_cell, find_batchcast_bin, format_table)

# 24 images in batches of 8: 3 batches per epoch.
TINY = ["--images", "24", "--classes", "3", "--image-size", "32", "--batch-size", "8",
        "--epochs", "1", "--workers", "1", "--quiet"]


def _native_ready() -> bool:
    """A batchcast binary whose `serve` takes an image dataset."""
    binary = find_batchcast_bin(None)
    if binary is None:
        return False
    out = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30).stdout
    return "--data" in out and "--transform" in out


def _expected_status(mode: str) -> str:
    """What each mode must do here: "ok", or "fails" (reported with its error)."""
    if mode == "independent":
        return "ok"
    if mode == "shared-python":
        return "ok" if importlib.util.find_spec("batchcast") else "fails"
    if mode == "shared-native":
        return "ok" if importlib.util.find_spec("batchcast") and _native_ready() else "fails"
    # TensorSocket 0.0.5 sends loader batches in groups of 8 and never sends
    # an epoch's last partial group: with 3 batches per epoch it sends
    # nothing, and its consumers wait forever. The runner must stop the cell
    # (--stall-timeout) and report the hang.
    return "fails"


def _run(tmp: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(RUNNER), *TINY, "--cache-dir", str(tmp / "cache"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("collocated")
    out = tmp / "results.json"
    proc = _run(tmp, "--modes", "independent,shared-python,shared-native", "--trainers", "1,2",
                "--stall-timeout", "20", "--timeout", "120", "--json", str(out))
    assert proc.returncode == 0, f"runner failed:\n{proc.stdout}\n{proc.stderr}"
    with open(out) as f:
        return tmp, proc, json.load(f)


@pytest.fixture(scope="module")
def tensorsocket_run(main_run):
    tmp = main_run[0]
    out = tmp / "tensorsocket.json"
    proc = _run(tmp, "--modes", "tensorsocket", "--trainers", "1", "--stall-timeout", "10",
                "--timeout", "90", "--json", str(out))
    assert proc.returncode == 0, f"runner failed:\n{proc.stdout}\n{proc.stderr}"
    with open(out) as f:
        return proc, json.load(f)


def _check_cell(cell: dict) -> None:
    missing = [k for k in CELL_FIELDS if k not in cell]
    assert not missing, f"{cell['mode']} N={cell['trainers']}: missing {missing}"
    expected = _expected_status(cell["mode"])
    if expected == "ok":
        assert cell["status"] == "ok", f"{cell['mode']} N={cell['trainers']}: {cell['error']}"
    else:
        # Reported, with its error, not crashed.
        assert cell["status"] in ("failed", "timeout"), cell
        assert cell["error"] and cell["error"].strip()
        for k in ("agg_samples_per_s", "cpu_s_per_1k_samples", "peak_mem_mb", "speedup"):
            assert cell[k] is None
    if cell["status"] != "ok":
        return
    n = cell["trainers"]
    trainers = cell["trainer_results"]
    assert len(trainers) == n
    # Every sample of every epoch reaches every trainer (batchcast: the
    # epoch's tail included).
    assert cell["samples"] == cell["expected_samples"] == n * 24
    assert all(t["samples"] == 24 for t in trainers)
    assert all(s.startswith("torch.float32[3, 32, 32]") for t in trainers for s in t["shapes"])
    assert cell["agg_samples_per_s"] == pytest.approx(cell["samples"] / cell["wall_s"])
    assert cell["per_trainer_samples_per_s"] == pytest.approx(
        sum(t["samples"] / t["wall_s"] for t in trainers) / n)
    assert cell["wall_s"] >= max(t["wall_s"] for t in trainers) - 0.05
    assert 0 <= cell["wait_share"] <= 1
    assert cell["cpu_s"] > 0
    assert cell["cpu_s_per_1k_samples"] == pytest.approx(1000 * cell["cpu_s"] / cell["samples"])
    assert cell["peak_mem_mb"] > 0 and cell["mem_trainers_mb"] > 0
    assert cell["peak_mem_mb"] <= cell["mem_trainers_mb"] + cell["mem_loading_mb"] + 1e-6
    assert cell["sum_peak_rss_mb"] > 0


@pytest.mark.slow
def test_every_mode_runs_or_reports_its_failure(main_run, tensorsocket_run):
    _, proc, doc = main_run
    assert {"config", "machine", "dataset", "results", "targets", "setup"} <= doc.keys()
    cells = doc["results"] + tensorsocket_run[1]["results"]
    assert [(c["mode"], c["trainers"]) for c in cells] == [
        ("independent", 1), ("independent", 2), ("shared-python", 1), ("shared-python", 2),
        ("shared-native", 1), ("shared-native", 2), ("tensorsocket", 1)]
    for cell in cells:
        _check_cell(cell)
    # The table names every cell; failures with their error.
    table = proc.stdout + tensorsocket_run[0].stdout
    for cell in cells:
        line = next((row for row in table.splitlines()
                     if row.split()[:2] == [cell["mode"], str(cell["trainers"])]), None)
        assert line is not None, f"no row for {cell['mode']} N={cell['trainers']}:\n{table}"
        if cell["status"] != "ok":
            assert cell["status"].upper() in line
            assert cell["error"].strip().splitlines()[0][:40] in table


@pytest.mark.slow
def test_speedup_is_against_independent_at_the_same_n(main_run):
    cells = main_run[2]["results"]
    base = {c["trainers"]: c["agg_samples_per_s"] for c in cells if c["mode"] == "independent"}
    for c in cells:
        if c["status"] != "ok":
            assert c["speedup"] is None
            continue
        assert c["speedup"] == pytest.approx(c["agg_samples_per_s"] / base[c["trainers"]])
        if c["mode"] == "independent":
            assert c["speedup"] == pytest.approx(1.0)


@pytest.mark.slow
def test_a_hang_is_cut_short_and_reported(tensorsocket_run):
    proc, doc = tensorsocket_run
    (cell,) = doc["results"]
    if cell["status"] == "timeout":
        assert "no trainer made progress" in cell["error"]
    assert "TIMEOUT" in proc.stdout or "FAILED" in proc.stdout


@pytest.mark.slow
def test_the_dataset_cache_is_reused(main_run, tensorsocket_run):
    tmp = main_run[0]
    (ds,) = [p for p in (tmp / "cache").iterdir() if not p.name.startswith(".")]
    params = json.loads((ds / "params.json").read_text())
    assert params["params"]["images"] == 24 and params["files"] == 24
    # Both runs used the same directory: no second one, no leftovers.
    assert sorted(p.name for p in (tmp / "cache").iterdir() if not p.name.startswith(".")) == [ds.name]
    assert len(list((ds / "data").rglob("*.jpg"))) == 24


def test_speedup_arithmetic():
    def cell(mode, n, agg, status="ok"):
        c = blank_cell(mode, n)
        c.update(status=status, agg_samples_per_s=agg if status == "ok" else None)
        return c

    cells = [cell("independent", 1, 100.0), cell("independent", 4, 120.0),
             cell("shared-python", 1, 95.0), cell("shared-python", 4, 420.0),
             cell("shared-native", 4, 480.0), cell("tensorsocket", 4, None, status="timeout"),
             cell("shared-native", 2, 300.0)]
    add_speedups(cells)
    got = {(c["mode"], c["trainers"]): c["speedup"] for c in cells}
    assert got[("independent", 1)] == 1.0 and got[("independent", 4)] == 1.0
    assert got[("shared-python", 1)] == pytest.approx(0.95)
    assert got[("shared-python", 4)] == pytest.approx(3.5)
    assert got[("shared-native", 4)] == pytest.approx(4.0)
    assert got[("tensorsocket", 4)] is None
    assert got[("shared-native", 2)] is None  # no independent run at N=2


def test_failed_cells_show_their_error_in_the_table():
    ok = blank_cell("independent", 2)
    ok.update(status="ok", agg_samples_per_s=200.0, per_trainer_samples_per_s=100.0, wait_share=0.5,
              cpu_s_per_1k_samples=3.0, peak_mem_mb=1500.0, speedup=1.0)
    bad = blank_cell("tensorsocket", 2)
    bad.update(status="failed", error="producer exited with status 1:\nIndexError: list index out of range")
    table = format_table([ok, bad])
    assert "FAILED: producer exited with status 1:" in table
    assert "1.00x" in table and "50.0%" in table


def test_cuda_profile_fails_clearly_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    proc = _run(tmp_path, "--device", "cuda", "--trainers", "1", timeout=180)
    assert proc.returncode == 2
    assert "--device cuda needs an NVIDIA GPU with CUDA" in proc.stderr
    assert not (tmp_path / "cache").exists()  # fails before doing anything


@pytest.mark.slow
def test_every_cell_is_a_workload_of_the_run_store_with_its_figures(main_run):
    """The cells were run by `batchcast run`: the store the report names
    holds one workload per cell, a run per trainer with the figures the
    table was made from, and the shared producer's run."""
    import sqlite3

    _, proc, doc = main_run
    store = doc["store"]
    assert proc.stdout.rstrip().splitlines()[-1] == (
        f"runs recorded in {store}; see them with: batchcast ui --store {store}")
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        for cell in doc["results"]:
            workload = f"small/{cell['mode']}/N={cell['trainers']}/r1"
            runs = dict(db.execute(
                "SELECT r.name, r.id FROM runs r JOIN workloads w ON r.workload_id = w.id"
                " JOIN experiments e ON w.experiment_id = e.id WHERE e.name = ? AND w.name = ?",
                (doc["experiment"], workload)).fetchall())
            trainers = [f"trainer-{r}" for r in range(cell["trainers"])]
            shared = cell["mode"].startswith("shared-")
            assert sorted(runs) == sorted(trainers + (["data"] if shared else [])), workload
            for name, result in zip(trainers, cell["trainer_results"]):
                figures = dict(db.execute(
                    "SELECT substr(key, 8), value FROM metrics WHERE run_id = ? AND key LIKE 'figure/%'",
                    (runs[name],)).fetchall())
                assert figures["samples"] == result["samples"] == 24
                assert figures["wall_s"] == pytest.approx(result["wall_s"])
                assert figures["wait_s"] == pytest.approx(result["wait_s"])
                cpu = db.execute("SELECT max(value) FROM metrics WHERE run_id = ? AND key ="
                                 " 'proc/exit_cpu_seconds'", (runs[name],)).fetchone()[0]
                assert cpu is not None and cpu > 0
    finally:
        db.close()


def _run_of(name: str, cpu: float | None = None, figures: dict | None = None, **series) -> object:
    from batchcast._experiment import Run

    return Run(1, "w", name, "FINISHED", 0, None, figures or {}, "", cpu,
               {k.replace("__", "/"): v for k, v in series.items()})


def test_a_trainer_killed_before_the_go_is_the_cells_error_not_those_it_stopped_at_the_barrier():
    from collocated_bench.cells import Watch, _settle

    runs = [_run_of("trainer-0"), _run_of("trainer-1"), _run_of("trainer-2")]
    runs[0].status, runs[0].exit_code, runs[0].message = "FAILED", 1, "exited with status 1"
    runs[0].output = "trainer 0: a job (pid 42) ended before the start barrier b opened"
    runs[1].status, runs[1].exit_code, runs[1].message = "FAILED", None, "killed by signal 9"
    runs[2].status, runs[2].exit_code = "KILLED", None
    cell = blank_cell("independent", 3)
    _settle(cell, Watch("/nonexistent", "/nonexistent:3", 3, 120.0, 20.0), runs, 60.0)
    assert cell["status"] == "failed"
    assert cell["error"].startswith("trainer 1 killed by signal 9")


def test_cpu_is_counted_from_the_go_to_each_runs_end():
    from collocated_bench.recorded import cpu_figures

    runs = [
        _run_of("trainer-0", cpu=5.0, figures={"cpu_at_go": 3.0}),
        # The producer: its last sample at or before the go (ts 1000) counts as start-up.
        _run_of("data", cpu=2.0, proc__cpu_seconds=[(500, 0.2), (1000, 0.5), (1500, 1.5)]),
    ]
    got = cpu_figures(runs, {"trainer-0": {"cpu_at_go": 3.0}}, go_ms=1000)
    assert got["startup_cpu_s"] == pytest.approx(3.5)
    assert got["cpu_s"] == pytest.approx(7.0 - 3.5)


def test_memory_peaks_are_sums_over_the_runs_of_one_round():
    from collocated_bench.recorded import memory_figures

    mib = 2**20
    runs = [
        _run_of("trainer-0", proc__pss_bytes=[(1, 100 * mib), (2, 300 * mib)],
                proc__rss_bytes=[(1, 400 * mib)]),
        _run_of("trainer-1", proc__pss_bytes=[(1, 100 * mib), (2, 100 * mib)],
                proc__rss_bytes=[(1, 500 * mib)]),
        _run_of("data", proc__pss_bytes=[(1, 250 * mib), (2, 50 * mib)]),
    ]
    got = memory_figures(runs, ["trainer-0", "trainer-1"])
    assert got["peak_mem_mb"] == pytest.approx(450)  # round 1: 450, round 2: 450
    assert got["mem_trainers_mb"] == pytest.approx(400)  # round 2
    assert got["mem_loading_mb"] == pytest.approx(250)  # round 1
    assert got["peak_mem_mb"] <= got["mem_trainers_mb"] + got["mem_loading_mb"]
    assert got["sum_peak_rss_mb"] == pytest.approx(900)
    assert got["memory_samples"] == 2


def test_gpu_figures_are_the_listeners_samples_inside_the_measured_part(monkeypatch):
    from collocated_bench.recorded import gpu_figures

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    samples = {
        "gpu/0/util_gpu_percent": [(900, 5.0), (1100, 60.0), (1300, 80.0), (2000, 1.0)],
        "gpu/0/mem_used_bytes": [(1100, 1000 * 2**20), (1300, 3000 * 2**20), (2000, 9000 * 2**20)],
        "gpu/0/power_w": [(1100, 200.0), (1300, 300.0)],
        "gpu/0/DCGM_FI_PROF_SM_ACTIVE": [(1100, 0.5), (1300, 0.7)],
    }
    runs = [_run_of("trainer-0", **{k.replace("/", "__"): v for k, v in samples.items()}),
            _run_of("trainer-1", **{k.replace("/", "__"): v for k, v in samples.items()})]
    got = gpu_figures(runs, "cuda", 1000, 1500)
    assert got["gpu_util_pct"] == pytest.approx(70.0)
    assert got["gpu_mem_peak_mib"] == pytest.approx(3000.0)
    assert got["gpu_power_w"] == pytest.approx(250.0)
    assert got["sm_active_pct"] == pytest.approx(60.0)
    assert got["gpu_source"] == "nvml" and got["gpu_samples"] == 2 and got["gpu_note"] is None
    # Nothing inside the window: no figures, and the note says why.
    empty = gpu_figures(runs, "cuda", 1400, 1500)
    assert empty["gpu_util_pct"] is None and "no GPU sample fell" in empty["gpu_note"]
    # On the CPU: "no GPU", as the table shows it.
    assert gpu_figures(runs, None, 1000, 1500)["gpu_note"].startswith("no GPU")
