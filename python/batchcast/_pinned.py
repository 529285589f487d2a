"""Page-locking a consumer's arena for asynchronous copies to a GPU.

With ``device="cuda:N"`` every batch is copied to the GPU with
``.to(device, non_blocking=True)``. From pageable memory that copy is
staged through a driver buffer and is synchronous; from page-locked
(pinned) memory it is one asynchronous DMA. So a consumer on a GPU
registers its read-only mapping of the producer's arena with CUDA, once, as
page-locked host memory (``cudaHostRegister`` with the read-only flag,
through ``torch.cuda.cudart()``), and falls back quietly to pageable copies
where that fails (no CUDA, an old driver, a locked-memory limit).

The mapping is found by its name in ``/proc/self/maps``
(``/memfd:batchcast:NAME``): the arena is mapped at connection, before any
batch. tests/python/test_gpu.py checks it on a real GPU (``pytest -m gpu``);
the CPU suite tests the decision and the calls with a stand-in for the CUDA
runtime.
"""

from __future__ import annotations

from typing import Any

__all__ = ["skip_reason", "arena_regions", "pin_regions", "REGISTER_READ_ONLY"]

#: cudaHostRegisterReadOnly: the arena is mapped read-only (CUDA >= 11.1).
REGISTER_READ_ONLY = 0x08


def skip_reason(device: Any, fmt: str, torch_mod: Any) -> str | None:
    """Why pinning does not apply (None: try it)."""
    if device is None or getattr(device, "type", str(device)) != "cuda":
        return "the consumer delivers CPU tensors"
    if fmt != "torch":
        return 'format is not "torch"'
    if torch_mod is None or not torch_mod.cuda.is_available():
        return "CUDA is not available"
    if not hasattr(torch_mod.cuda, "cudart"):
        return "this torch has no CUDA runtime bindings"
    return None


def arena_regions(name: str, maps: str) -> list[tuple[int, int]]:
    """``(start, length)`` of each mapping of producer ``name``'s arena in
    ``maps`` (the text of ``/proc/self/maps``), adjacent ones merged."""
    target = f"/memfd:batchcast:{name}"
    spans: list[tuple[int, int]] = []
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6:
            continue
        path = parts[5]
        if path != target and path != f"{target} (deleted)":
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if spans and spans[-1][0] + spans[-1][1] == lo:
            spans[-1] = (spans[-1][0], spans[-1][1] + hi - lo)
        else:
            spans.append((lo, hi - lo))
    return spans


def _ok(result: Any) -> bool:
    value = getattr(result, "value", result)
    try:
        return int(value) == 0
    except (TypeError, ValueError):
        return False


def pin_regions(regions: list[tuple[int, int]], cudart: Any) -> bool:
    """Registers every region, or none: on the first failure the ones
    already registered are unregistered. True when all were registered."""
    if not regions:
        return False
    done: list[int] = []
    for start, length in regions:
        try:
            ok = _ok(cudart.cudaHostRegister(start, length, REGISTER_READ_ONLY))
        except Exception:
            ok = False
        if not ok:
            for addr in done:
                try:
                    cudart.cudaHostUnregister(addr)
                except Exception:
                    pass
            return False
        done.append(start)
    return True


def try_pin(name: str, device: Any, fmt: str) -> bool:
    """Pins the arena of consumer ``name`` if it applies; quietly False
    where it does not or fails."""
    import sys

    torch_mod = sys.modules.get("torch")
    if torch_mod is None or skip_reason(device, fmt, torch_mod) is not None:
        return False
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
        return pin_regions(arena_regions(name, maps), torch_mod.cuda.cudart())
    except Exception:
        return False
