"""Every structure and dtype travels intact, to torch and to NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import batchcast
from helpers import roundtrip_batches


def as_torch(x):
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x.astype(x.dtype.newbyteorder("="))))
    return x.detach()


def assert_same(got, want, path="batch"):
    if isinstance(want, (np.ndarray, torch.Tensor)):
        assert isinstance(got, (np.ndarray, torch.Tensor)), path
        g, w = as_torch(got), as_torch(want)
        assert g.dtype == w.dtype, f"{path}: {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, path
        assert torch.equal(g, w), path
    elif isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want), path
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, (tuple, list)) and want and isinstance(want[0], (bool, int, float, str, np.generic)):
        assert type(got) is list, path  # per-sample lists come back as lists
        assert got == [v.item() if isinstance(v, np.generic) else v for v in want], path
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    else:
        raise AssertionError(f"{path}: unexpected {type(want)}")


def test_every_structure_and_dtype_round_trips_to_torch(spawn):
    producer = spawn("produce_roundtrip", name="rt", torch=True)
    with batchcast.Consumer("rt", connect_timeout=30) as c:
        want = roundtrip_batches(with_torch=True)
        got = list(c)
        assert len(got) == len(want) == len(c)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"batch {i}")
        assert isinstance(got[0], torch.Tensor)
    producer.expect("done")
    assert producer.wait() == 0


def test_every_structure_and_dtype_round_trips_to_numpy_read_only(spawn):
    producer = spawn("produce_roundtrip", name="rtn", torch=False)
    with batchcast.Consumer("rtn", connect_timeout=30, format="numpy") as c:
        want = roundtrip_batches(with_torch=False)
        got = list(c)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"batch {i}")
        arrays = [b for b in got if isinstance(b, np.ndarray)]
        assert len(arrays) > 10
        for a in arrays:
            assert not a.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                a[0] = 0
    producer.expect("done")
    assert producer.wait() == 0


def test_bfloat16_needs_torch_format(bc_dir):
    data = [torch.ones(4, dtype=torch.bfloat16)]
    with batchcast.Producer(data, "bf", wait_for_consumers=False, slot_size=1 << 16) as p:
        c = batchcast.Consumer("bf", format="numpy")
        it = iter(p)
        next(it)
        with pytest.raises(TypeError, match="bfloat16"):
            next(iter(c))
        c.close()


def test_a_batch_spanning_producer_batches_is_assembled_exactly(spawn):
    producer = spawn("produce_ids", name="span", n=300, batch_size=64, epochs=1)
    with batchcast.Consumer("span", batch_size=100, connect_timeout=30) as c:
        batches = list(c)
    assert [len(b["id"]) for b in batches] == [100, 100, 100]
    ids = torch.cat([b["id"] for b in batches])
    assert torch.equal(ids, torch.arange(300))
    assert batches[1]["name"] == [f"s{i}" for i in range(100, 200)]
    assert torch.equal(batches[2]["x"][:, 3], torch.arange(200, 300, dtype=torch.float32))
    producer.expect("done")


PARTIAL_IMPORT = r"""
import sys, threading, types
import numpy as np
import batchcast

# What sys.modules holds while another thread runs `import torch`: the
# module, without its names yet (a producer thread flattening batches then
# died of AttributeError: module 'torch' has no attribute 'Tensor').
for name in ("torch", "torch.utils.data", "PIL.Image"):
    sys.modules[name] = types.ModuleType(name)
data = [{"x": np.full((4, 3), i, dtype=np.float32), "y": np.arange(4)} for i in range(6)]
producer = batchcast.Producer(data, name=sys.argv[1], idle_timeout=30)
failed = []
def run():
    try:
        producer.run(epochs=1)
    except BaseException as e:
        failed.append(e)
t = threading.Thread(target=run)
t.start()
with batchcast.Consumer(sys.argv[1], batch_size=4, format="numpy", connect_timeout=30) as c:
    got = [int(b["x"][0, 0]) for b in c]
t.join()
assert not failed, failed
assert got == list(range(6)), got
print("ok")
"""


def test_a_module_that_another_thread_is_still_importing_is_not_a_batch_type(bc_dir, tmp_path):
    import subprocess
    import sys

    del bc_dir  # its BATCHCAST_DIR is the script's
    script = tmp_path / "partial.py"
    script.write_text(PARTIAL_IMPORT)
    proc = subprocess.run([sys.executable, str(script), "partial-import"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
