"""scripts/gpu_listener_check.py (issue 29 section 3) rehearsed without a GPU:
its JSON has every step, GPU rows say "no GPU" with a reason instead of
numbers, the CPU listeners really recorded; and its NVML-vs-nvidia-smi
comparison judges synthetic samples right."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "gpu_listener_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_listener_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def cli(request) -> str:
    """$BATCHCAST_BIN, else this checkout's release build, else the debug build."""
    release = ROOT / "target" / "release" / "batchcast"
    if os.environ.get("BATCHCAST_BIN") or not release.exists():
        return request.getfixturevalue("batchcast_bin")
    return str(release)


def test_cpu_rehearsal_writes_every_step_and_no_gpu_numbers(cli: str, tmp_path: Path) -> None:
    out = tmp_path / "listener.json"
    env = dict(os.environ, CHECK_NO_TORCH="1")  # busy-Python jobs: no torch import on a slow CPU
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(SCRIPT), "--cpu-rehearsal", "--batchcast-bin", cli, "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 60, "the rehearsal should take seconds"
    assert "collocated:" in r.stderr and "done in" in r.stderr  # progress on stderr
    d = json.loads(out.read_text())
    assert d["finished"] is True
    steps = d["steps"]
    assert list(steps) == ["env", "mig", "collocated", "overhead", "mps"]
    assert steps["env"]["mode"] == "cpu-rehearsal" and steps["env"]["gpu"]["status"] == "no GPU"
    col = steps["collocated"]
    assert {n: r["status"] for n, r in col["runs"].items()} == {"trainer-1": "FINISHED", "trainer-2": "FINISHED"}
    for name, groups in col["key_groups"].items():
        assert {"proc", "sys"} <= set(groups), (name, groups)  # the process and system listeners recorded
        assert "gpu" not in groups  # and nothing pretends to be a GPU
    for row in (col["nvml_vs_nvidia_smi"], col["gpm"], steps["mig"], steps["mps"],
                steps["overhead"]["gpu_listener_idle_job"]):
        assert row["status"] == "no GPU" and row["reason"], row
    assert "NVML" in col["nvml_vs_nvidia_smi"]["reason"]  # the listener's own event says why
    assert "pass" not in col["nvml_vs_nvidia_smi"]
    busy = steps["overhead"]["collocated_listeners_2_training_jobs"]
    assert 0 <= busy["percent_of_one_core"] < 100 and busy["wall_s"] >= 1


def test_bad_binary_is_refused_at_once(tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(SCRIPT), "--cpu-rehearsal", "--batchcast-bin", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "no batchcast binary" in r.stderr and "cargo build --release" in r.stderr
    assert time.monotonic() - t0 < 5 and not (tmp_path / "x.json").exists()


def test_comparison_passes_within_10_percent_and_fails_beyond() -> None:
    mod = _load()
    mib = 2**20

    def runs(power: float) -> dict:
        m = {"gpu/0/power_w": power, "gpu/0/util_gpu_percent": 98.0, "gpu/0/mem_used_bytes": 12000.0 * mib,
             "gpu/0/clock_sm_mhz": 1980.0, "gpu/0/DCGM_FI_PROF_SM_ACTIVE": 0.8}
        metrics = {k: [(100.0 + t, v) for t in range(40)] for k, v in m.items()}
        lines = [{"event": "train_start", "t": 105.0}, {"event": "train_end", "t": 135.0}]
        return {"trainer-1": {"lines": lines, "metrics": metrics}, "trainer-2": {"lines": lines, "metrics": metrics}}

    smi = [{"t": 100.5 + t, "power.draw": 300.0, "utilization.gpu": 97.0, "memory.used": 12000.0,
            "clocks.sm": 1980.0} for t in range(40)]
    ok = mod.compare_gpu(runs(310.0), smi)
    assert ok["pass"] is True and ok["metrics"]["power_w"]["rel_diff"] == pytest.approx(10 / 310, abs=1e-3)
    assert ok["window"].startswith("common training window") and ok["window_s"] == 28
    assert ok["gpm"]["trainer-1"]["DCGM_FI_PROF_SM_ACTIVE"]["mean"] == pytest.approx(0.8) and ok["gpm_plausible"]
    lopsided = runs(310.0)  # the runs on one GPU disagree on its activity
    lopsided["trainer-2"]["metrics"] = dict(lopsided["trainer-1"]["metrics"], **{
        "gpu/0/DCGM_FI_PROF_SM_ACTIVE": [(100.0 + t, 0.01) for t in range(40)]})
    assert mod.compare_gpu(lopsided, smi)["gpm_plausible"] is False
    bad = mod.compare_gpu(runs(400.0), smi)
    assert bad["pass"] is False and bad["metrics"]["power_w"]["pass"] is False
    assert bad["metrics"]["mem_used_mib"]["pass"] is True
    empty = mod.compare_gpu(runs(310.0), [])
    assert empty["pass"] is False and empty["metrics"]["power_w"]["rel_diff"] is None
