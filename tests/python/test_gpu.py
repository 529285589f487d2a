"""The consumer's GPU path on a real CUDA GPU (``pytest -m gpu``; skipped,
with the reason, where there is none; scripts/gpu-check.sh runs them on a
GPU machine).

Real processes: a producer (tests/python/helpers.py ``produce_ids``, sample
ids in order) and trainers (``consume_gpu``) that run ahead of the GPU by
queueing GPU work before each batch, and check every batch on the GPU
against the ids the producer sent, without synchronising."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import HERE, Proc

torch = pytest.importorskip("torch")


def _no_gpu_reason() -> str:
    if not torch.cuda.is_available():
        return f"no CUDA GPU here (torch {torch.__version__}, CUDA {torch.version.cuda}: cuda.is_available() is False)"
    return ""


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_no_gpu_reason()), reason=_no_gpu_reason() or "-")]

N = 4096  # samples per epoch
IDS = N * (N - 1) // 2  # the sum of one epoch's ids
#: GPU cycles queued before each batch: the loop runs ahead of the GPU,
#: and each batch's copy waits behind this work.
CYCLES = 3_000_000


def produce(spawn, name: str, **options):
    options = {"n": N, "batch_size": 64, "width": 256, "window": 3, "max_lag": 0, **options}
    p = spawn("produce_ids", name=name, **options)
    p.expect("ready")
    return p


def report(proc: Proc) -> dict:
    return json.loads(proc.expect("gpu ", timeout=120))


def gpu_memory_used_mib() -> float:
    """Memory used on GPU 0, device-wide, from NVML (nvidia-smi), so that
    this process needs no CUDA context of its own."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return float(out.strip().splitlines()[0])


@pytest.mark.parametrize("batch_size", [64, 48, 100], ids=["same", "divides-not", "spans-slots"])
def test_every_batch_is_exact_while_the_loop_runs_ahead_of_the_gpu(spawn, batch_size):
    producer = produce(spawn, "ahead", epochs=2)
    trainer = spawn("consume_gpu", name="ahead", batch_size=batch_size, epochs=2, sleep_cycles=CYCLES)
    r = report(trainer)
    assert (r["samples"], r["wrong"], r["torn"], r["id_sum"]) == (2 * N, 0, 0, 2 * IDS), r
    assert r["pinned"], "the arena was not page-locked (see test_the_arena_is_page_locked_and_copies_are_async)"
    producer.expect("done")


def test_the_check_catches_a_slot_handed_back_at_to(spawn):
    """The check above, against the release the consumer had before its
    transfers: the lease goes back when ``.to()`` returns, the producer
    overwrites the slot, and the queued copy reads the wrong batch."""
    producer = produce(spawn, "early", epochs=1)
    trainer = spawn("consume_gpu", name="early", epochs=1, sleep_cycles=CYCLES, release_at_to=True)
    r = report(trainer)
    if not r["pinned"]:
        pytest.skip("the arena is not page-locked, so copies are synchronous and cannot be overwritten")
    assert r["wrong"] > 0, f"no overwritten batch seen: the check would not catch the bug ({r})"
    producer.expect("done")


def test_the_arena_is_page_locked_and_copies_are_async(spawn):
    import batchcast
    from batchcast import _pinned

    produce(spawn, "pin", epochs=1)
    # A producer that serves no GPU: the host path, which says so once.
    with pytest.warns(RuntimeWarning, match="serves no GPU"):
        c = batchcast.Consumer("pin", device="cuda:0", connect_timeout=30)
    with c:
        assert c.stats()["device_path"] == "host copy"
        if not c.pin_memory:
            with open("/proc/self/maps") as f:
                regions = _pinned.arena_regions("pin", f.read())
            codes = [torch.cuda.cudart().cudaHostRegister(a, n, _pinned.REGISTER_READ_ONLY) for a, n in regions]
            pytest.fail(f"cudaHostRegister of the arena failed: regions {regions}, results {codes}")
        it = iter(c)
        next(it)
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU work ahead of the next copy
        b = next(it)
        assert c.stats()["copies_in_flight"] >= 1, "the copy completed before the GPU reached it: not async"
        assert b["id"].is_cuda
        torch.cuda.synchronize()
        assert b["id"].tolist() == list(range(64, 128))
        assert c.stats()["copies_in_flight"] == 0


def test_a_killed_gpu_trainer_leaves_the_others_and_no_device_memory(spawn):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not on PATH: cannot read device memory through NVML")
    before = gpu_memory_used_mib()
    producer = produce(spawn, "kill", epochs=2, window=4, wait_for_consumers=2, max_lag="8batches")
    holder = spawn("consume_gpu", name="kill", epochs=2, hold=2)
    survivor = spawn("consume_gpu", name="kill", epochs=2, sleep_cycles=CYCLES)
    holder.expect("holding", timeout=120)
    during = gpu_memory_used_mib()
    holder.kill()
    r = report(survivor)
    assert (r["samples"], r["wrong"], r["torn"]) == (2 * N, 0, 0), r
    producer.expect("done")
    assert survivor.wait() == 0 and producer.wait() == 0
    after = gpu_memory_used_mib()
    print(f"GPU memory used: before {before} MiB, with two trainers {during} MiB, after {after} MiB")
    assert after <= before + 64, f"device memory not given back: {before} MiB before, {after} MiB after"


def _two_trainers(spawn_env: dict, name: str, bc_dir) -> list:
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1", **spawn_env)
    helpers = str(HERE / "helpers.py")
    procs = [Proc([sys.executable, helpers, "produce_ids",
                   json.dumps({"name": name, "n": N, "batch_size": 64, "width": 256, "window": 4,
                               "epochs": 2, "wait_for_consumers": 2})], env)]
    try:
        procs[0].expect("ready")
        for rank in range(2):
            procs.append(Proc([sys.executable, helpers, "consume_gpu",
                               json.dumps({"name": name, "epochs": 2, "sleep_cycles": CYCLES * (rank + 1)})], env))
        reports = [report(p) for p in procs[1:]]
        procs[0].expect("done")
        return reports
    finally:
        for p in procs:
            p.reap()


def test_two_trainers_share_one_gpu(bc_dir):
    for r in _two_trainers({}, "two", bc_dir):
        assert (r["samples"], r["wrong"], r["torn"], r["id_sum"]) == (2 * N, 0, 0, 2 * IDS), r


def test_two_trainers_share_one_gpu_under_mps(bc_dir):
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        pytest.skip("nvidia-cuda-mps-control is not installed")
    d = tempfile.mkdtemp(prefix="bc-mps-")
    mps = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(d, "pipe"), "CUDA_MPS_LOG_DIRECTORY": os.path.join(d, "log")}
    for v in mps.values():
        os.makedirs(v)
    env = dict(os.environ, **mps)
    started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=30)
    if started.returncode != 0:
        pytest.skip(f"a user-level MPS daemon could not start: {started.stderr.strip() or started.returncode}")
    try:
        for r in _two_trainers(mps, "mps", bc_dir):
            assert (r["samples"], r["wrong"], r["torn"], r["id_sum"]) == (2 * N, 0, 0, 2 * IDS), r
    finally:
        subprocess.run([control], input="quit\n", env=env, text=True, timeout=30)
        shutil.rmtree(d, ignore_errors=True)


# -- the device plane: a producer that mirrors its arena on GPU 0 -------------


@pytest.fixture(autouse=True)
def no_stand_in(monkeypatch):
    """The real GPU, never the stand-in (for the ``plane`` fixture's too)."""
    monkeypatch.delenv("BATCHCAST_DEVICE_STAND_IN", raising=False)


def _mirrored(plane, name: str, **options):
    p = plane("produce_mirrored", name=name, n=N, batch_size=64, width=256, device="cuda:0", **options)
    p.expect("ready")
    return p


def _plane_report(p) -> dict:
    r = json.loads(p.expect("plane ", timeout=120))
    print(f"{r['path']}: slots {r['slots']}")  # read_only_enforced, as the driver does it
    return r


def test_two_trainers_read_the_producers_device_slots_without_a_copy(plane):
    """Zero copy on the GPU: each batch's tensors lie in the mapped slots,
    checked by kernels queued behind GPU work, never synchronised: the
    deferred release keeps every slot until the work on it has run."""
    producer = _mirrored(plane, "gzero", wait_for_consumers=2, window=3, epochs=2)
    trainers = [plane("consume_on_device", name="gzero", n=N, epochs=2, copy_on_write=False, no_sync=True,
                      sleep_cycles=CYCLES * (k + 1)) for k in range(2)]
    for r in (_plane_report(t) for t in trainers):
        assert r["path"] == "device slots (zero copy)" and r["warnings"] == [], r
        assert (r["samples"], r["wrong"], r["id_sum"]) == (2 * N, 0, 2 * IDS), r
        assert r["inside"] == r["arrays"] > 0, r
    producer.expect("done")


def test_copy_on_write_keeps_an_in_place_write_on_the_gpu_private(plane):
    producer = _mirrored(plane, "gcow", wait_for_consumers=2, window=3)
    writer = plane("consume_on_device", name="gcow", n=N, write=True, no_sync=True, sleep_cycles=CYCLES)
    reader = plane("consume_on_device", name="gcow", n=N, no_sync=True)
    for r in (_plane_report(writer), _plane_report(reader)):
        assert r["path"] == "device slots (private copy)", r
        assert (r["samples"], r["wrong"], r["id_sum"], r["inside"]) == (N, 0, IDS, 0), r
    producer.expect("done")


def test_a_killed_trainer_on_the_device_plane_leaves_the_other_and_no_device_memory(plane):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not on PATH: cannot read device memory through NVML")
    before = gpu_memory_used_mib()
    producer = _mirrored(plane, "gkill", wait_for_consumers=2, window=4, max_lag="8batches", epochs=2)
    holder = plane("consume_on_device", stdin=True, name="gkill", n=N, epochs=2, copy_on_write=False, hold=2)
    survivor = plane("consume_on_device", name="gkill", n=N, epochs=2, copy_on_write=False, no_sync=True)
    holder.expect("holding", timeout=120)
    holder.kill()
    r = _plane_report(survivor)
    assert (r["samples"], r["wrong"], r["id_sum"]) == (2 * N, 0, 2 * IDS), r
    producer.expect("done")
    assert producer.wait() == 0
    after = gpu_memory_used_mib()
    assert after <= before + 64, f"device memory not given back: {before} MiB before, {after} MiB after"
