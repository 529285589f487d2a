"""batchcast.SelectSampler: the selections of `batchcast serve --select`
for a map-style dataset whose loader a Producer owns, drawn by the native
Selection (the same samples, in the same order, as the CLI for a seed)."""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import batchcast  # noqa: E402
from conftest import HERE, Proc  # noqa: E402

# 10 classes of 1,000 ... 100 members, 5,000 samples.
SIZES = (1000, 900, 800, 700, 500, 400, 300, 200, 100, 100)
LABELS = [c for c, size in enumerate(SIZES) for _ in range(size)]


def test_label_balanced_20_gives_1000_per_epoch_100_per_class():
    s = batchcast.SelectSampler("label-balanced:20", labels=LABELS, seed=3)
    assert len(s) == 1000 and s.has_weights
    epochs = [list(s) for _ in range(3)]
    for idx in epochs:
        assert len(idx) == len(set(idx)) == 1000
        counts = Counter(LABELS[i] for i in idx)
        assert all(abs(counts[c] - 100) <= 1 for c in range(10)), counts
    assert epochs[0] != epochs[1]  # a fresh draw each epoch
    # A class's share of the dataset over its share of the selection.
    assert s.weight(0) == pytest.approx((1000 / 5000) / (100 / 1000))
    assert s.weights.shape == (5000,) and float(s.weights[-1]) == pytest.approx(0.2)


def test_rs2_25_without_replacement_serves_every_index_once_in_4_epochs():
    s = batchcast.SelectSampler("rs2:25", n=5000, seed=7)
    seen = [i for _ in range(4) for i in s]
    assert len(s) == 1250 and sorted(seen) == list(range(5000))
    assert not s.has_weights and s.weight(9) == 1.0


def test_scores_keep_50_gives_exactly_the_top_half(tmp_path):
    scores = np.random.default_rng(1).permutation(5000).astype(np.float32)
    path = tmp_path / "scores.npy"
    np.save(path, scores)
    s = batchcast.SelectSampler(f"scores={path},keep=50", n=5000)
    top = set(np.argsort(-scores)[:2500].tolist())
    for _ in range(2):
        assert set(s) == top
    with pytest.raises(batchcast.InvalidArgument, match="4999"):
        batchcast.SelectSampler(f"scores={path},keep=50", n=4999)
    given = batchcast.SelectSampler("scores=-,keep=50", n=5000, scores=scores)  # in memory
    assert set(given) == top
    with pytest.raises(batchcast.InvalidArgument, match="4999 entries"):
        batchcast.SelectSampler("scores=-,keep=50", n=5000, scores=scores[:4999])
    with pytest.raises(batchcast.InvalidArgument, match="finite"):
        batchcast.SelectSampler("scores=-,keep=50", n=2, scores=[1.0, float("nan")])
    with pytest.raises(batchcast.InvalidArgument, match="pass scores="):
        batchcast.SelectSampler("scores=-,keep=50", n=2)
    with pytest.raises(batchcast.InvalidArgument, match="scores=-,keep=P"):
        batchcast.SelectSampler("random:50", n=2, scores=[1.0, 2.0])


def test_epochs_advance_by_themselves_unless_set_epoch_says_which():
    a = batchcast.SelectSampler("random:10", n=500, seed=2)
    b = batchcast.SelectSampler("random:10", n=500, seed=2)
    first, second = list(a), list(a)
    assert first != second and a.epoch == 1
    b.set_epoch(1)
    assert list(b) == second and list(b) == list(a)  # both went on to epoch 2
    b.set_epoch(0)
    assert list(b) == first
    assert list(batchcast.SelectSampler("random:10", n=500, seed=3)) != first


def test_iter_from_several_threads_gives_each_call_its_own_epoch():
    sampler = batchcast.SelectSampler("random:10", n=200, seed=4)
    threads, calls = 8, 40
    start = threading.Barrier(threads)
    got: list[tuple[int, ...]] = []
    lock = threading.Lock()

    def work() -> None:
        start.wait()
        for _ in range(calls):
            order = tuple(iter(sampler))
            with lock:
                got.append(order)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(old)
    ref = batchcast.SelectSampler("random:10", n=200, seed=4)
    want = []
    for epoch in range(threads * calls):
        ref.set_epoch(epoch)
        want.append(tuple(ref))
    assert Counter(got) == Counter(want), "each epoch served exactly once"
    assert sampler.epoch is not None and list(sampler) == list(ref)


def test_specs_are_refused_with_the_clis_messages():
    with pytest.raises(batchcast.InvalidArgument, match="random:R.*scores=FILE,keep=P"):
        batchcast.SelectSampler("half", n=10)
    with pytest.raises(batchcast.InvalidArgument, match="serve_folder"):
        batchcast.SelectSampler("new-data", n=10)
    with pytest.raises(batchcast.InvalidArgument, match="serve_folder"):
        batchcast.SelectSampler("freshness:50", n=10)
    with pytest.raises(batchcast.InvalidArgument, match="labels="):
        batchcast.SelectSampler("label-balanced:20", n=10)
    with pytest.raises(batchcast.InvalidArgument, match="labels= .* or n="):
        batchcast.SelectSampler("random:20")
    with pytest.raises(batchcast.IoError):
        batchcast.SelectSampler("scores=/nonexistent.npy,keep=50", n=10)


def test_weighted_adds_each_samples_weight_as_one_more_leaf():
    labels = [0] * 30 + [1] * 10
    s = batchcast.SelectSampler("label-balanced:50", labels=labels)
    ds = [torch.tensor([float(i)]) for i in range(40)]
    x, w = next(iter(DataLoader(batchcast.Weighted(ds, s), batch_size=20, sampler=s)))
    assert w.dtype == torch.float32 and w.shape == (20,)
    for i, wi in zip(x[:, 0].long().tolist(), w.tolist()):
        assert wi == pytest.approx(s.weight(i))
        assert wi == pytest.approx((30 / 40) / (10 / 20) if labels[i] == 0 else (10 / 40) / (10 / 20))


def test_a_pickled_sampler_draws_the_same_epochs_and_weights():
    import pickle

    s = batchcast.SelectSampler("label-balanced:20", labels=LABELS, seed=3)
    first = list(s)
    copy = pickle.loads(pickle.dumps(s))
    assert copy.epoch == 0 and len(copy) == len(s)
    assert list(copy) == list(s)  # both draw epoch 1 next
    assert copy.weight(0) == s.weight(0) and copy.weight(4999) == s.weight(4999)
    copy.set_epoch(0)
    assert list(copy) == first


def test_weighted_works_in_spawned_dataloader_workers():
    labels = [0] * 30 + [1] * 10
    s = batchcast.SelectSampler("label-balanced:50", labels=labels, seed=1)
    ds = [torch.tensor([float(i)]) for i in range(40)]
    loader = DataLoader(
        batchcast.Weighted(ds, s),
        batch_size=20,
        sampler=s,
        num_workers=1,
        multiprocessing_context="spawn",
    )
    x, w = next(iter(loader))
    assert w.shape == (20,)
    for i, wi in zip(x[:, 0].long().tolist(), w.tolist()):
        assert wi == pytest.approx(s.weight(i))


def test_the_same_sequence_as_batchcast_serve_select_for_the_same_seed(tmp_path, bc_dir):
    Image = pytest.importorskip("PIL.Image")
    from test_serve_module import start

    sizes = (12, 6, 3)
    labels, k = [], 0
    for c, size in enumerate(sizes):
        (tmp_path / f"class_{c}").mkdir()
        for i in range(size):
            # Sample k is a flat grey of 10k+5: its index survives JPEG.
            img = np.full((16, 16, 3), 10 * k + 5, dtype=np.uint8)
            Image.fromarray(img).save(tmp_path / f"class_{c}" / f"{i:02}.jpg", quality=95)
            labels.append(c)
            k += 1
    spec, seed = "label-balanced:0.4286", 5
    proc = start(["--name", "cmp", "--json", "--data", str(tmp_path), "--decode-only", "--store-size", "8",
                  "--batch-size", "4", "--select", spec, "--seed", str(seed), "--epochs", "2"], bc_dir)
    served = []
    try:
        json.loads(proc.stdout.readline())
        with batchcast.Consumer("cmp", connect_timeout=30) as c:
            for _ in range(2):
                epoch = []
                for images, _lab in c:
                    means = np.asarray(images).reshape(len(images), -1).mean(axis=1)
                    epoch.extend(int(round((m - 5) / 10)) for m in means)
                served.append(epoch)
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.communicate()
    s = batchcast.SelectSampler(spec, labels=labels, seed=seed)
    assert served == [list(s), list(s)]


def test_a_producer_over_the_sampler_decodes_only_the_selected_once_for_two_consumers(bc_dir):
    import os

    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    o = {"name": "selsamp", "n": 5000, "sizes": SIZES, "spec": "label-balanced:20", "seed": 4,
         "batch_size": 64, "consumers": 2, "epochs": 2, "count": 1000}

    def start(role):
        return Proc([sys.executable, str(HERE / "select_sampler_roles.py"), role, json.dumps(o)], env)

    procs = [start("produce")]
    try:
        procs[0].expect("ready")
        procs += [start("consume"), start("consume")]
        got = [json.loads(p.expect("got ", timeout=120)) for p in procs[1:]]
        calls = json.loads(procs[0].expect("calls ", timeout=120))
        assert [p.wait() for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            p.reap()
    s = batchcast.SelectSampler("label-balanced:20", labels=LABELS, seed=4)
    expected = [list(s), list(s)]
    assert got[0] == got[1] == expected
    # The decode work: __getitem__ ran once per selected sample per epoch,
    # 2,000 calls instead of 10,000.
    want = Counter(i for e in expected for i in e)
    assert sum(calls) == 2000
    assert {i: n for i, n in enumerate(calls) if n} == dict(want)
