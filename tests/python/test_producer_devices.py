"""``Producer(device=...)``: the arena mirrored on each named GPU, each
batch copied there once before it is published, and the fallback to the
host path, with one warning, where that cannot be done. On the CPU the GPUs
are the host-memory stand-in (``BATCHCAST_DEVICE_STAND_IN``), which shows
the seams work and is no evidence of GPU behaviour (tests/python/
test_gpu_plane.py checks that on a GPU)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import batchcast

STAND_IN = "BATCHCAST_DEVICE_STAND_IN"


class Loader:
    """Eight batches of 16 ids and a 64-wide float row each."""

    def __len__(self) -> int:
        return 8

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(8):
            ids = np.arange(i * 16, (i + 1) * 16, dtype=np.int64)
            yield {"id": ids, "x": np.repeat(ids[:, None], 64, axis=1).astype(np.float32)}


def serve(name: str, **options: Any) -> batchcast.Producer:
    return batchcast.Producer(Loader(), name, wait_for_consumers=False, **options)


def test_each_batch_is_copied_once_to_each_gpu_named(bc_dir, monkeypatch):
    monkeypatch.setenv(STAND_IN, "2")
    with serve("mirrored", device=["cuda:1", "cuda:0"]) as p:
        assert p.run(epochs=2) == 2
        devices = p.devices
    assert [d["ordinal"] for d in devices] == [1, 0]
    assert devices[0]["device"] != devices[1]["device"]
    for d in devices:
        assert d["device"].startswith("GPU-")
        assert d["copies"] == 16, d  # 8 batches a epoch, 2 epochs, one copy each
        # Each copy holds a batch's arrays: 16 * 8 + 16 * 64 * 4 bytes, and the slot's header.
        assert d["bytes"] >= 16 * (16 * 8 + 16 * 64 * 4), d
        assert d["p50_seconds"] is not None and d["p99_seconds"] >= d["p50_seconds"], d


def test_one_gpu_named_twice_is_one_mirror_and_a_bad_name_is_refused(bc_dir, monkeypatch):
    monkeypatch.setenv(STAND_IN, "1")
    with pytest.raises(batchcast.InvalidArgument, match="twice"):
        serve("twice", device="cuda:0,cuda:0")
    with pytest.raises(batchcast.InvalidArgument, match="cuda:N"):
        serve("bad", device="gpu zero")
    with pytest.raises(batchcast.InvalidArgument, match="one string or a list"):
        serve("bad", device=0)


def test_a_gpu_that_cannot_be_served_falls_back_with_one_warning(bc_dir, monkeypatch, caplog):
    monkeypatch.setenv(STAND_IN, "1")
    with caplog.at_level(logging.WARNING, logger="batchcast"):
        with serve("invisible", device="cuda:1") as p:
            assert p.devices == []
            assert p.run(epochs=1) == 1
    said = [r.getMessage() for r in caplog.records if r.name == "batchcast"]
    assert len(said) == 1, said
    assert "cuda:1" in said[0] and "host path" in said[0] and "cuda:0=GPU-" in said[0], said[0]


def test_without_a_driver_the_warning_names_it(bc_dir, monkeypatch, caplog):
    monkeypatch.delenv(STAND_IN, raising=False)
    with caplog.at_level(logging.WARNING, logger="batchcast"):
        with serve("nodriver", device="cuda:0") as p:
            if p.devices:
                pytest.skip("this machine has a CUDA driver that shares memory")
            assert p.run(epochs=1) == 1
    said = [r.getMessage() for r in caplog.records if r.name == "batchcast"]
    assert len(said) == 1 and "libcuda" in said[0] and "host path" in said[0], said


def test_consumers_read_the_same_batches_from_a_mirrored_producer(bc_dir, monkeypatch):
    monkeypatch.setenv(STAND_IN, "1")
    p = batchcast.Producer(Loader(), "readers", device="cuda:0")
    t = threading.Thread(target=p.run, kwargs={"epochs": 1})
    t.start()
    try:
        with batchcast.Consumer("readers", format="numpy", connect_timeout=10) as c:
            ids = np.concatenate([b["id"] for b in c])
    finally:
        t.join(timeout=60)
    assert ids.tolist() == list(range(128))
    assert p.devices[0]["copies"] == 8
    p.close()
