"""Checks made before anything is started, in one child process (the
runner itself never imports torch): the CUDA device is usable, every
--model exists; and the versions and the GPU that the report names."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

#: The start of the child's one line of report on its stdout.
_REPORT = "preflight "


def preflight_main(spec: dict[str, Any]) -> None:
    """The child: reports versions, CUDA and the unknown models."""
    import importlib.metadata as md

    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    for pkg in ("torchvision", "timm", "batchcast", "tensorsocket"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    if spec["cuda"] and out["gpus"]:
        idx = int(spec["device"].split(":")[1]) if ":" in spec["device"] else 0
        if idx < out["gpus"]:
            out["gpu"] = torch.cuda.get_device_name(idx)
    unknown = []
    for name in spec["models"]:
        if name == "small":
            continue
        if out["timm"]:
            import timm

            if not timm.is_model(name):
                unknown.append(name)
        else:
            from torchvision import models

            if not callable(getattr(models, name, None)):
                unknown.append(name)
    out["unknown_models"] = unknown
    print(_REPORT + json.dumps(out), flush=True)


def preflight(args, runner: str) -> tuple[str | None, dict[str, Any]]:
    """(None, the versions) if the run can go ahead, else (why not, {})."""
    spec = {"cuda": args.cuda, "device": args.device, "models": args.models}
    try:
        r = subprocess.run([sys.executable, runner, "--role", "preflight", "--spec", json.dumps(spec)],
                           capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not start python to check torch and CUDA: {e}", {}
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith(_REPORT)), None)
    if r.returncode != 0 or line is None:
        return f"importing torch failed:\n{r.stderr.strip()[-2000:]}", {}
    info = json.loads(line[len(_REPORT):])
    if args.cuda:
        idx = int(args.device.split(":")[1]) if ":" in args.device else 0
        if info["gpus"] == 0:
            return (f"--device {args.device} needs an NVIDIA GPU with CUDA, but torch.cuda.is_available() is "
                    f"False (torch {info['torch']}, built for CUDA {info['cuda']}); this is the GPU profile of "
                    f"the benchmark: run it on a machine with a GPU, or use --device cpu"), {}
        if idx >= info["gpus"]:
            return f"--device {args.device}: only {info['gpus']} CUDA device(s) visible", {}
    if info["unknown_models"]:
        where = f"timm {info['timm']}" if info["timm"] else "torchvision (timm is not installed)"
        return f"--model: {', '.join(info['unknown_models'])}: no such model in {where}", {}
    return None, info
