"""The producer describes its stream; a consumer reads it (consumer.spec)
and refuses one that is not what it expects (expect=), naming both sides."""

from __future__ import annotations

import numpy as np
import pytest

import batchcast
from test_errors import run_in_thread


def _images(n=4, bs=2, dtype=np.uint8, size=8):
    return [(np.zeros((bs, 3, size, size), dtype), np.arange(bs)) for _ in range(n // bs)]


META = {"img_size": 64, "transform": "RandomResizedCrop(64)"}


def test_a_consumer_reads_what_the_producer_sends(bc_dir):
    p = batchcast.Producer(_images(), "desc", metadata=META, batch_size=2)
    t = run_in_thread(p, epochs=1)
    c = batchcast.Consumer("desc", format="numpy")
    spec = c.spec
    assert spec.structure == "(uint8[3, 8, 8], int64[])"
    assert spec.arrays["batch[0]"] == ("uint8", (3, 8, 8))
    assert str(spec.arrays["batch[1]"]) == "int64[]"
    assert (spec.batch_size, spec.samples_per_epoch) == (2, 4)
    assert spec.metadata == META
    assert sum(1 for _ in c) == 2
    t.join(10)


def test_status_shows_the_stream(bc_dir):
    with batchcast.Producer(_images(), "st", metadata=META, wait_for_consumers=False) as p:
        it = iter(p)
        next(it)  # one batch published
        stream = p.status()["stream"]
        assert stream["structure"] == "(uint8[3, 8, 8], int64[])"
        assert '"img_size": 64' in stream["metadata"]
        it.close()


def test_expect_mismatch_in_metadata_names_both_sides(bc_dir):
    p = batchcast.Producer(_images(), "meta", metadata=META, window=2)
    t = run_in_thread(p, epochs=1000)  # outlives the refused consumers
    with pytest.raises(batchcast.StreamMismatch) as e:
        batchcast.Consumer("meta", expect={"img_size": 96})
    msg = str(e.value)
    assert "expects img_size=96" in msg and "announces img_size=64" in msg and "'meta'" in msg
    assert isinstance(e.value, ValueError)
    with pytest.raises(batchcast.StreamMismatch, match="no 'crop' in its metadata"):
        batchcast.Consumer("meta", expect={"crop": 1})
    ok = batchcast.Consumer("meta", format="numpy", expect={"img_size": 64})
    assert ok.spec.metadata["img_size"] == 64
    ok.close()
    p.close()
    t.join(10)


def test_expect_mismatch_in_dtype_and_shape_names_both_sides(bc_dir):
    p = batchcast.Producer(_images(), "dt", window=2)
    t = run_in_thread(p, epochs=1000)  # outlives the refused consumers
    with pytest.raises(batchcast.StreamMismatch) as e:
        batchcast.Consumer("dt", expect={"batch[0]": {"dtype": "float32"}})
    assert "expects batch[0]={'dtype': 'float32'}" in str(e.value)
    assert "announces batch[0]=uint8[3, 8, 8]" in str(e.value)
    with pytest.raises(batchcast.StreamMismatch, match=r"uint8\[3, 8, 8\]"):
        batchcast.Consumer("dt", expect={"batch[0]": "uint8[3, 96, 96]"})
    ok = batchcast.Consumer("dt", format="numpy", expect={"batch[0]": "uint8[3, 8, 8]"})
    assert next(iter(ok))[0].shape == (2, 3, 8, 8)
    ok.close()
    p.close()
    t.join(10)


def test_array_expectations_wait_for_the_first_batch_of_a_fixed_slot_producer(bc_dir):
    p = batchcast.Producer(_images(), "late", slot_size=1 << 16)
    c = batchcast.Consumer("late", format="numpy", expect={"batch[0]": {"shape": (3, 96, 96)}})
    assert c.spec.structure is None  # welcomed before any batch was planned
    t = run_in_thread(p, epochs=1)
    with pytest.raises(batchcast.StreamMismatch, match=r"sends batch\[0\]=uint8\[3, 8, 8\]"):
        next(iter(c))
    c.close()
    t.join(10)


def test_metadata_must_be_a_small_json_dict(bc_dir):
    with pytest.raises(TypeError, match="JSON"):
        batchcast.Producer(_images(), "bad", metadata={"f": object()})
    with pytest.raises(TypeError, match="dict"):
        batchcast.Producer(_images(), "bad", metadata=["x"])
    with pytest.raises(batchcast.InvalidArgument, match="65536"):
        batchcast.Producer(_images(), "bad", metadata={"x": "y" * 70000})
    batchcast.Producer(_images(), "bad").close()  # the name was freed each time
