"""The GPU during a cell: utilisation, memory used and power, sampled every
0.5 s from NVML (pynvml, when importable: it also gives SM activity through
GPM on Hopper and newer) or else from `nvidia-smi --query-gpu ... -lms 500`.
A cell's figures are over its measured part only (GO to the last trainer's
end). Without a GPU, or without either tool, every figure is None and
`gpu_note` says why: never a made-up number."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from statistics import mean
from typing import Any, Dict, List, Optional, Tuple

from batchcast._native import proc_table

from .measure import CLK_TCK

INTERVAL_S = 0.5
FIELDS = ("gpu_util_pct", "gpu_mem_peak_mib", "gpu_power_w", "sm_active_pct")
QUERY = "utilization.gpu,memory.used,power.draw"

Sample = Tuple[float, Optional[float], Optional[float], Optional[float], Optional[float]]


def physical_gpu(device: str) -> str:
    """The index (or UUID) that NVML and nvidia-smi know the torch device
    `device` (cuda or cuda:N) by, through $CUDA_VISIBLE_DEVICES."""
    idx = int(device.split(":")[1]) if ":" in device else 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[idx] if idx < len(visible) else str(idx)


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


class _Nvml:
    """pynvml: one handle, read every tick; SM activity from two GPM samples."""

    def __init__(self, gpu: str):
        import pynvml

        pynvml.nvmlInit()
        self.nv = pynvml
        self.handle = (pynvml.nvmlDeviceGetHandleByUUID(gpu) if gpu.startswith(("GPU-", "MIG-"))
                       else pynvml.nvmlDeviceGetHandleByIndex(int(gpu)))
        self.gpm_prev = None
        try:
            self.gpm = bool(pynvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except Exception:  # noqa: BLE001 - an older driver or nvidia-ml-py: no SM activity
            self.gpm = False

    def read(self) -> Sample:
        nv, h = self.nv, self.handle
        util = nv.nvmlDeviceGetUtilizationRates(h).gpu
        mem = nv.nvmlDeviceGetMemoryInfo(h).used / 2**20
        power = nv.nvmlDeviceGetPowerUsage(h) / 1000
        return (time.monotonic(), float(util), mem, power, self._sm_active())

    def _sm_active(self) -> Optional[float]:
        if not self.gpm:
            return None
        nv = self.nv
        now = nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(self.handle, now)
        prev, self.gpm_prev = self.gpm_prev, now
        if prev is None:
            return None
        try:
            get = nv.c_nvmlGpmMetricsGet_t()
            get.version = nv.NVML_GPM_METRICS_GET_VERSION
            get.numMetrics = 1
            get.sample1, get.sample2 = prev, now
            get.metrics[0].metricId = getattr(nv, "NVML_GPM_METRIC_SM_UTIL", 2)
            nv.nvmlGpmMetricsGet(get)
            return float(get.metrics[0].value) if get.metrics[0].nvmlReturn == 0 else None
        finally:
            nv.nvmlGpmSampleFree(prev)

    def close(self) -> None:
        if self.gpm_prev is not None:
            self.nv.nvmlGpmSampleFree(self.gpm_prev)
        self.nv.nvmlShutdown()


class GpuSampler:
    """Samples one GPU from start() to stop(); figures(start, end) sums up
    the samples taken between two time.monotonic() instants."""

    def __init__(self, device: str, cuda: bool):
        self.samples: List[Sample] = []
        self.source: Optional[str] = None
        self.note: Optional[str] = None if cuda else f"no GPU (--device {device})"
        self.gpu = physical_gpu(device) if cuda else None
        self.proc: Optional[subprocess.Popen] = None
        self.nvml: Optional[_Nvml] = None
        self.stop_event = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.cpu_at_stop = 0.0

    def start(self) -> None:
        if self.gpu is None:
            return
        try:
            self.nvml = _Nvml(self.gpu)
            self.nvml.read()
            self.source, target = "nvml", self._poll_nvml
        except Exception:  # noqa: BLE001 - no pynvml, or no NVML: nvidia-smi then
            self.nvml = None
            smi = shutil.which("nvidia-smi")
            if smi is None:
                self.note = "neither pynvml nor nvidia-smi is available: GPU figures not measured"
                return
            self.proc = subprocess.Popen(
                [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms",
                 str(int(INTERVAL_S * 1000)), "-i", self.gpu],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.source, target = "nvidia-smi", self._read_smi
        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def _poll_nvml(self) -> None:
        while not self.stop_event.wait(INTERVAL_S):
            try:
                self.samples.append(self.nvml.read())
            except Exception as e:  # noqa: BLE001 - reported, sampling ends
                self.note = f"NVML sampling failed: {e}"
                return

    def _read_smi(self) -> None:
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 3 and _number(parts[0]) is not None:
                self.samples.append((time.monotonic(), _number(parts[0]), _number(parts[1]),
                                     _number(parts[2]), None))

    def pids(self) -> List[int]:
        """The sampler's own processes (nvidia-smi), not the mode's."""
        return [] if self.proc is None else [self.proc.pid]

    def own_cpu_s(self) -> float:
        """CPU seconds used so far by nvidia-smi (a child of the runner, so
        its CPU would otherwise be counted as the cell's)."""
        if self.proc is None:
            return 0.0
        return sum(proc_table().get(self.proc.pid, (0, 0, 0))[1:]) / CLK_TCK

    def stop(self) -> None:
        self.stop_event.set()
        self.cpu_at_stop = self.own_cpu_s()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        if self.thread is not None:
            self.thread.join(5)
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.nvml is not None:
            self.nvml.close()

    def figures(self, start: float, end: float) -> Dict[str, Any]:
        """Mean utilisation %, peak memory used (MiB, every process on the
        GPU), mean power (W) and mean SM activity % between start and end."""
        out: Dict[str, Any] = {k: None for k in FIELDS}
        window = [s for s in self.samples if start <= s[0] <= end]
        note = self.note
        if self.source is not None and not window:
            note = note or f"no {self.source} sample fell in the measured part ({end - start:.2f} s)"
        out.update(gpu_source=self.source, gpu_note=note, gpu_samples=len(window))
        for i, key in enumerate(FIELDS, start=1):
            values = [s[i] for s in window if s[i] is not None]
            if values:
                out[key] = max(values) if key == "gpu_mem_peak_mib" else mean(values)
        if self.source is not None and window and out["sm_active_pct"] is None:
            out["gpu_note"] = note or ("SM activity not measured (needs pynvml and a GPU with GPM)")
        return out
