"""The shared-native mode's producer: the `batchcast` binary, and the
`batchcast serve` command line that matches the torchvision pipeline with
whatever options that binary has."""

from __future__ import annotations

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_batchcast_bin(explicit: str | None) -> str | None:
    """--batchcast-bin, else what batchcast finds: $BATCHCAST_BIN, the
    workspace's release build, PATH, then the workspace's debug build (slow:
    for tests only)."""
    if explicit and os.path.isfile(explicit) and os.access(explicit, os.X_OK):
        return explicit
    try:
        from batchcast._experiment import find_binary
    except ImportError:
        return None
    return find_binary(REPO)


_SERVE_HELP: dict[str, str] = {}


def native_serve_argv(args, dataset: str, name: str, n: int, workers: int) -> list[str]:
    """`batchcast serve` over the dataset with the same transform as the
    torchvision pipeline (train: RandomResizedCrop + flip; float32 NCHW,
    ImageNet-normalised where the binary offers it). Options the binary does
    not have are left out: the trainers take uint8 NHWC or NCHW too."""
    binary = find_batchcast_bin(args.batchcast_bin)
    if binary is None:
        raise RuntimeError("no batchcast binary: build it with `cargo build --release -p batchcast-cli` "
                           "(target/release/batchcast), or pass --batchcast-bin / set $BATCHCAST_BIN")
    helptext = _SERVE_HELP.get(binary)
    if helptext is None:
        try:
            helptext = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                                      timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"{binary} serve --help failed: {e}") from e
        _SERVE_HELP[binary] = helptext
    argv = [binary, "serve", "--name", name, "--data", dataset, "--batch-size", str(args.batch_size),
            "--epochs", str(args.epochs), "--workers", str(max(1, workers)), "--window",
            str(args.window), "--consumers", str(n), "--idle-timeout", str(max(args.stall_timeout, args.timeout)), "--json"]
    if "--transform" in helptext:
        argv += ["--transform", "train"]
    for flag in ("--image-size", "--size"):
        if flag in helptext:
            argv += [flag, str(args.image_size)]
            break
    if "--dtype" in helptext:  # f32: ToTensor + ImageNet Normalize, as the torchvision pipeline
        argv += ["--dtype", "f32"]
    if "--layout" in helptext:
        argv += ["--layout", "nchw"]
    if "--output" in helptext:
        for value in ("f32-nchw-imagenet", "f32-nchw-normalized", "f32-nchw-norm", "float32-normalized",
                      "f32-nchw"):
            if value in helptext:
                argv += ["--output", value]
                break
    if "--seed" in helptext:
        argv += ["--seed", str(args.seed)]
    return argv + list(args.native_arg)
