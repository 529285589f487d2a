"""The decision to page-lock a GPU consumer's arena, and the calls it makes,
with a stand-in for torch's CUDA runtime (no GPU needed; the real path has
not yet run on a GPU)."""

from __future__ import annotations

import types

import numpy as np

import batchcast
from batchcast import _pinned
from test_errors import run_in_thread

MAPS = """\
7f0000000000-7f0000010000 r--s 00000000 00:01 123  /memfd:batchcast:cifar (deleted)
7f0000010000-7f0000020000 r--p 00010000 00:01 123  /memfd:batchcast:cifar (deleted)
7f0000030000-7f0000040000 r--s 00000000 00:01 124  /memfd:batchcast:cifar10 (deleted)
7f0000050000-7f0000060000 rw-p 00000000 00:00 0
"""


class FakeCudart:
    def __init__(self, fail_at=None):
        self.registered, self.unregistered, self.fail_at = [], [], fail_at

    def cudaHostRegister(self, addr, size, flags):
        if self.fail_at is not None and len(self.registered) == self.fail_at:
            return types.SimpleNamespace(value=712)  # cudaErrorHostMemoryAlreadyRegistered
        self.registered.append((addr, size, flags))
        return types.SimpleNamespace(value=0)

    def cudaHostUnregister(self, addr):
        self.unregistered.append(addr)
        return 0


def fake_torch(cuda: bool):
    return types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: cuda,
                                                            cudart=FakeCudart))


def test_only_gpu_torch_consumers_pin():
    cuda = types.SimpleNamespace(type="cuda")
    assert _pinned.skip_reason(None, "torch", fake_torch(True)) == "the consumer delivers CPU tensors"
    assert _pinned.skip_reason(cuda, "numpy", fake_torch(True)) is not None
    assert _pinned.skip_reason(cuda, "torch", fake_torch(False)) == "CUDA is not available"
    assert _pinned.skip_reason(cuda, "torch", fake_torch(True)) is None


def test_the_arena_is_found_by_name_and_adjacent_mappings_merge():
    assert _pinned.arena_regions("cifar", MAPS) == [(0x7F0000000000, 0x20000)]
    assert _pinned.arena_regions("cifar10", MAPS) == [(0x7F0000030000, 0x10000)]
    assert _pinned.arena_regions("mnist", MAPS) == []


def test_registration_is_read_only_and_all_or_nothing():
    rt = FakeCudart()
    assert _pinned.pin_regions([(0x1000, 4096), (0x9000, 4096)], rt)
    assert [f for _, _, f in rt.registered] == [_pinned.REGISTER_READ_ONLY] * 2
    failing = FakeCudart(fail_at=1)
    assert not _pinned.pin_regions([(0x1000, 4096), (0x9000, 4096)], failing)
    assert failing.unregistered == [0x1000]
    assert not _pinned.pin_regions([], FakeCudart())


def test_a_cpu_consumer_reports_no_pinned_memory_and_its_arena_is_mapped(bc_dir):
    p = batchcast.Producer([np.arange(4)], "pin", slot_size=4096)
    c = batchcast.Consumer("pin", format="numpy")
    assert c.pin_memory is False
    with open("/proc/self/maps") as f:
        assert _pinned.arena_regions("pin", f.read())  # what a GPU consumer would register
    t = run_in_thread(p, epochs=1)
    assert sum(1 for _ in c) == 1
    t.join(10)
