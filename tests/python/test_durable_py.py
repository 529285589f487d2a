"""Durable epochs with a Python producer (`Producer(durable=True)`), with
real processes: a producer over a map-style dataset SIGKILLed three times
and restarted each time resumes where it stopped, and each consumer's log
of (epoch, index) equals that of an uninterrupted run exactly; a restart
with another seed is refused and the waiting consumers get the message; an
iterable loader resumes at the next epoch's start with a warning; a
stateful loader is resumed through its state_dict."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import batchcast
from conftest import kill_all

HERE = Path(__file__).resolve().parent
SAMPLES = 2000
BATCH = 4
SEED = 7
STEPS_MS = (0, 2, 5)


def role(bc_dir: Path, which: str, **options: Any) -> subprocess.Popen:
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, str(HERE / "durable_py_roles.py"), which,
                             json.dumps(options)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run(bc_dir: Path, tmp: Path, tag: str, kind: str, kills: List[int], seed: int = SEED,
        epochs: int = 2) -> Dict[str, Any]:
    """Three consumers and a producer of `kind` that kills itself after
    loading each count of `kills` samples (counted per process), restarted
    each time; returns the consumers' logs and the producers' stderr."""
    name = f"dpy-{tag}"
    common = dict(name=name, samples=SAMPLES, batch=BATCH, seed=seed, epochs=epochs)
    consumers = [role(bc_dir, "consumer", name=name, epochs=epochs, step_ms=ms,
                      log=str(tmp / f"{tag}-{ms}.json")) for ms in STEPS_MS]
    errs: List[str] = []
    procs: List[subprocess.Popen] = []
    try:
        for kill_at in [*kills, None]:
            p = role(bc_dir, "producer", kind=kind, consumers=3, kill_at=kill_at, **common)
            procs.append(p)
            out, err = p.communicate(timeout=120)
            errs.append(err)
            if kill_at is not None:
                assert p.returncode == -9, (p.returncode, err)
            elif p.returncode != 0:
                for c in consumers:
                    c.kill()
                why = [c.communicate()[1][-2000:] for c in consumers]
                raise AssertionError(f"the producer failed: {err}\nconsumers: {why}")
        for c in consumers:
            out, err = c.communicate(timeout=60)
            assert c.returncode == 0 and out.strip() == "done", err
    finally:
        kill_all([*procs, *consumers])
    logs = [json.loads((tmp / f"{tag}-{ms}.json").read_text()) for ms in STEPS_MS]
    return {"logs": logs, "stderr": errs}


def kills_at(batches: List[int]) -> List[int]:
    """Samples each producer process loads before it dies, for deaths at
    about these batches of the whole stream (the producer runs a window
    ahead of its consumers, so a restart loads some samples again)."""
    out, before = [], 0
    for b in batches:
        out.append((b - before) * BATCH + 1)
        before = b
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sampler", "stateful"])
def test_a_producer_killed_three_times_resumes_exactly(bc_dir, tmp_path, kind):
    reference = run(bc_dir, tmp_path, f"ref-{kind}", kind, [])
    for log in reference["logs"]:
        epochs = [[i for e, i in log if e == epoch] for epoch in (0, 1)]
        for ids in epochs:
            assert sorted(ids) == list(range(SAMPLES))
        assert epochs[0] != epochs[1], "each epoch has its own order"
    killed = run(bc_dir, tmp_path, f"kill-{kind}", kind, kills_at([100, 350, 700]))
    for ms, got, want in zip(STEPS_MS, killed["logs"], reference["logs"]):
        assert got == want, f"consumer stepping {ms} ms: {len(got)} rows, {len(want)} wanted"
    resumed = [e for e in killed["stderr"][1:] if "resumes its stream at epoch" in e]
    assert len(resumed) == 3, killed["stderr"]


def test_a_restart_with_another_seed_is_refused_and_consumers_get_why(bc_dir, tmp_path):
    name = "dpy-seed"
    common = dict(name=name, samples=SAMPLES, batch=BATCH, epochs=2, kind="sampler")
    c = role(bc_dir, "consumer", name=name, epochs=2, step_ms=0, log=str(tmp_path / "c.json"))
    try:
        p = role(bc_dir, "producer", consumers=1, kill_at=400, seed=SEED, **common)
        _, err = p.communicate(timeout=60)
        assert p.returncode == -9, err
        p = role(bc_dir, "producer", consumers=1, seed=SEED + 1, **common)
        _, err = p.communicate(timeout=60)
        assert p.returncode != 0
        assert "seed: then 7, now 8" in err and "fresh" in err, err
        _, cerr = c.communicate(timeout=60)
        assert c.returncode != 0
        assert "JoinRefused" in cerr and "seed: then 7, now 8" in cerr, cerr
    finally:
        for proc in (c, p):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.slow
def test_an_iterable_loader_resumes_at_the_next_epoch_with_a_warning(bc_dir, tmp_path):
    got = run(bc_dir, tmp_path, "iter", "iterable", kills_at([150]))
    warned = got["stderr"][1]
    assert "cannot resume epoch 0" in warned, warned
    assert "the stream resumes at epoch 1's start" in warned, warned
    assert "IterableDataset" in warned, warned
    for log in got["logs"]:
        first = [i for e, i in log if e == 0]
        assert first == list(range(len(first))) and 0 < len(first) < SAMPLES
        assert [i for e, i in log if e == 1] == list(range(SAMPLES))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torchdata") is None,
                    reason="torchdata is not installed")
def test_torchdatas_stateful_dataloader_resumes_exactly(bc_dir, tmp_path):
    reference = run(bc_dir, tmp_path, "ref-td", "torchdata", [], epochs=1)
    killed = run(bc_dir, tmp_path, "kill-td", "torchdata", kills_at([120]), epochs=1)
    for got, want in zip(killed["logs"], reference["logs"]):
        assert got == want


def test_a_loaders_state_is_kept_as_json_with_tensors_and_nothing_else():
    import torch

    from batchcast._resume import decode_state, encode_state

    state = {"epoch": 2, "pos": [1, 2.5, None, "x"], "gen": torch.arange(6, dtype=torch.uint8)}
    text = encode_state(state, "s")
    assert "\n" not in text
    back = decode_state(text)
    assert back["epoch"] == 2 and back["pos"] == [1, 2.5, None, "x"]
    assert torch.equal(back["gen"], state["gen"]) and back["gen"].dtype == torch.uint8
    with pytest.raises(TypeError, match=r"s\['obj'\] is a object.*never pickled"):
        encode_state({"obj": object()}, "s")
    with pytest.raises(TypeError, match="key 3"):
        encode_state({3: 1}, "s")


def test_a_corrupt_or_hostile_loader_state_is_refused_with_a_message():
    from batchcast._resume import Resume, decode_state

    tensor = '{"__tensor__":{"dtype":%s,"shape":%s,"data":"AAEC"}}'
    for text, why in [
        ("{not json", "Expecting"),
        (tensor % ('"load"', "[3]"), "not a torch tensor"),
        (tensor % ('"uint8"', "[2]"), "3 values has the shape"),
        (tensor % ('"uint8"', "[-3]"), "not a list of sizes"),
        (tensor % ('"uint8"', '"3"'), "not a list of sizes"),
        ('{"__tensor__":{"dtype":"uint8","shape":[3],"data":"!!"}}', "base64"),
    ]:
        with pytest.raises(ValueError, match=why):
            decode_state(text)

    class Stateful:
        loaded = None

        def state_dict(self) -> dict:
            return {}

        def load_state_dict(self, state: dict) -> None:
            self.loaded = state

    class Native:
        resumed = (3, 40, 2, tensor % ('"load"', "[3]"))

    loader = Stateful()
    with pytest.raises(batchcast.InvalidArgument, match=r"'p'.*nothing was reset.*fresh=True"):
        Resume(loader, None, None).restore(Native(), "p")
    assert loader.loaded is None


def test_how_each_loader_resumes_and_what_identifies_its_stream():
    import torch
    from torch.utils.data import DataLoader

    from batchcast._resume import Resume

    data = list(range(10))
    assert Resume(DataLoader(data, batch_size=2), None, 2).kind == "sampler"
    shuffled = Resume(DataLoader(data, batch_size=2, shuffle=True), None, 2)
    assert shuffled.kind == "epoch" and "seed=" in shuffled.why
    seeded = Resume(DataLoader(data, batch_size=2, shuffle=True), 7, 2)
    assert seeded.kind == "sampler"
    identity = seeded.identity("augment v2")
    assert "dataset_length=10" in identity and "seed=7" in identity
    assert "sampler=torch.utils.data.sampler.RandomSampler" in identity
    assert "identity=augment v2" in identity
    with pytest.raises(batchcast.InvalidArgument, match="one line"):
        seeded.identity("a\nb")
    # The order is a function of (seed, epoch), and a skip leaves out rows.
    def order(r, epoch, skip=0):
        return [int(i) for b in r.batches(epoch, skip) for i in b]

    again = Resume(DataLoader(data, batch_size=2, shuffle=True), 7, 2)
    assert order(seeded, 0) == order(again, 0) != order(again, 1)
    assert order(again, 1, skip=4) == order(seeded, 1)[4:]
    assert Resume(iter([torch.zeros(1)]), None, 1).kind == "epoch"


def test_fresh_without_durable_is_refused(bc_dir):
    with pytest.raises(batchcast.InvalidArgument, match="durable=True"):
        batchcast.Producer([[1, 2]], "dpy-fresh", fresh=True)
