"""batchcast.select: each trainer's own batch-then-sample selection, checked
against brute-force computations on a tiny MLP, its zero-copy rule, and two
real trainers choosing different subsets of one producer's stream."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import batchcast  # noqa: E402
from batchcast.select import (  # noqa: E402
    Accumulator,
    Downsampler,
    DriftTrigger,
    PerformanceTrigger,
    choose,
    keep_count,
    scores,
    take,
)
from conftest import HERE, Proc  # noqa: E402

ROOT = HERE.parent.parent
CLASSES = 5


def tiny_mlp(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, CLASSES))


def data(n: int = 64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randint(0, CLASSES, (n,), generator=g)


def top(values, k):
    """Brute force: the positions of the k largest values, ascending."""
    return sorted(sorted(range(len(values)), key=lambda i: -values[i])[:k])


def softmax(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    return [v / sum(e) for v in e]


def test_ratio_25_of_64_keeps_the_top_16_by_loss():
    model = tiny_mlp()
    x, y = data()
    with torch.no_grad():
        chosen = Downsampler("loss", ratio=0.25, batch_size=64).select(model(x), y)
        # One sample at a time, as a loop over the batch would compute it.
        losses = [F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).item() for i in range(64)]
    assert chosen.indices.tolist() == top(losses, 16)
    assert chosen.weights.tolist() == [1.0] * 16


@pytest.mark.parametrize("metric", ["least_confidence", "entropy", "margin"])
def test_each_uncertainty_metric_equals_its_brute_force_value(metric):
    model = tiny_mlp(1)
    x, _ = data(seed=1)
    with torch.no_grad():
        logits = model(x)
    expected = []
    for row in logits.tolist():
        p = softmax(row)
        if metric == "least_confidence":
            expected.append(1 - max(p))
        elif metric == "entropy":
            expected.append(-sum(v * math.log(v) for v in p))
        else:
            a, b = sorted(p, reverse=True)[:2]
            expected.append(1 - (a - b))
    got = scores(metric, logits)
    assert got.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert Downsampler(metric, 0.25, 64).select(logits).indices.tolist() == top(expected, 16)


def test_gradnorm_equals_autograds_per_sample_last_layer_gradient_norm():
    model = tiny_mlp(2)
    x, y = data(seed=2)
    body, last = model[:2], model[2]
    h = body(x).detach()
    logits = last(h)
    by_logits, by_weight = [], []
    for i in range(len(x)):
        z = last(h[i:i + 1])
        loss = F.cross_entropy(z, y[i:i + 1], reduction="sum")
        (g_z,) = torch.autograd.grad(loss, z, retain_graph=True)
        (g_w,) = torch.autograd.grad(loss, last.weight)
        by_logits.append(g_z.norm().item())
        by_weight.append(g_w.norm().item())
    assert scores("gradnorm", logits, y).tolist() == pytest.approx(by_logits, rel=1e-5)
    assert scores("gradnorm", logits, y, embeddings=h).tolist() == pytest.approx(by_weight, rel=1e-5)
    chosen = Downsampler("gradnorm", 0.25, 64).select(logits, y, embeddings=h)
    assert chosen.indices.tolist() == top(by_weight, 16)


def test_importance_sampling_weights_each_drawn_sample_by_one_over_n_p():
    score = torch.rand(64, generator=torch.Generator().manual_seed(3)) + 0.1
    chosen = choose(score, 16, importance=True, generator=torch.Generator().manual_seed(4))
    idx = chosen.indices.tolist()
    assert idx == sorted(set(idx)) and len(idx) == 16
    p = score / score.sum()
    assert chosen.weights.tolist() == pytest.approx([1 / (64 * float(p[i])) for i in idx], rel=1e-5)
    uniform = choose(torch.zeros(64), 16, importance=True, generator=torch.Generator().manual_seed(4))
    assert len(set(uniform.indices.tolist())) == 16 and uniform.weights.tolist() == [1.0] * 16


def test_importance_sampling_fills_keep_when_most_scores_are_zero():
    # A confident model: 60 of 64 losses are exactly 0.0, and 16 are kept.
    score = torch.zeros(64)
    score[[3, 17, 40, 62]] = torch.tensor([0.5, 1.0, 2.0, 0.25])
    chosen = choose(score, 16, importance=True, generator=torch.Generator().manual_seed(5))
    idx = chosen.indices.tolist()
    assert idx == sorted(set(idx)) and len(idx) == 16
    p = 0.999 * score / score.sum() + 0.001 / 64
    assert chosen.weights.tolist() == pytest.approx([1 / (64 * float(p[i])) for i in idx], rel=1e-4)
    # The positive scores hold almost all the mass: every one of them is drawn.
    assert {3, 17, 40, 62} <= set(idx)


def test_a_ratio_that_cannot_fill_batches_is_refused_naming_both_sizes():
    assert keep_count(0.25, 64) == 16
    named = r"0\.3 keeps 19\.2 of a 64-sample batch.*e\.g\. 0\.296875 \(19\) or 0\.3125 \(20\)"
    with pytest.raises(ValueError, match=named):
        Downsampler("loss", ratio=0.3, batch_size=64)
    with pytest.raises(ValueError, match="fraction in"):
        keep_count(25, 64)
    with pytest.raises(ValueError, match="unknown selection method 'rho'"):
        Downsampler("rho", 0.25, 64)
    with pytest.raises(ValueError, match="importance sampling is defined for"):
        Downsampler("entropy", 0.25, 64, importance=True)


def tree(x, y, start):
    """A batch as batchcast delivers them: a tuple holding a dict with a
    per-sample list."""
    n = len(x)
    ids = range(start, start + n)
    return (x, {"y": y, "id": torch.tensor(list(ids)), "name": [f"s{i}" for i in ids]})


def test_the_accumulator_emits_one_64_sample_batch_after_4_source_batches():
    model = tiny_mlp(5)
    select = Downsampler("loss", 0.25, 64)
    expected_ids, expected_x = [], []
    for k in range(4):
        x, y = data(seed=10 + k)
        batch = tree(x, y, 64 * k)
        with torch.no_grad():
            logits = model(x)
        idx = select.select(logits, y).indices
        expected_ids += (64 * k + idx).tolist()
        expected_x.append(x[idx])
        out = select(batch, logits, y)
        assert len(out) == (1 if k == 3 else 0)
    (xs, rest), w = out[0]
    assert rest["id"].tolist() == expected_ids  # exactly the selected, in order
    assert rest["name"] == [f"s{i}" for i in expected_ids]
    assert torch.equal(xs, torch.cat(expected_x)) and xs.shape == (64, 8)
    assert w.tolist() == [1.0] * 64 and select.flush() is None


def y_of(n):
    return torch.zeros(n, dtype=torch.int64)


def test_the_accumulator_carries_a_remainder_and_flushes_it():
    acc = Accumulator(64)
    out = [acc.add(tree(*data(24, seed=k), 24 * k)) for k in range(3)]
    assert [len(o) for o in out] == [0, 0, 1] and acc.pending == 8
    (_, full), _ = out[2][0]
    assert full["id"].tolist() == list(range(64))
    (x, rest), w = acc.flush()
    assert rest["id"].tolist() == list(range(64, 72)) and rest["name"][0] == "s64"
    assert x.shape == (8, 8) and len(w) == 8 and acc.flush() is None
    with pytest.raises(ValueError, match="same structure"):
        acc.add({"other": torch.zeros(2)})
    assert take({"x": x, "n": [7, 8, 9, 10, 11, 12, 13, 14]}, [0, 2])["n"] == [7, 9]
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match=r"batch\[0\]: cannot select rows of ndarray.*format=\"torch\""):
        take((np.zeros((4, 2)), y_of(4)), [1])


def test_selection_is_an_index_select_on_the_batchs_device_never_a_copy(monkeypatch):
    # On the meta device a tensor has no bytes: any copy to or through the
    # CPU raises, so a selection that stays there did not make one.
    x = torch.empty(64, 3, 32, 32, device="meta")
    y = torch.empty(64, dtype=torch.int64, device="meta")
    idx = torch.tensor([1, 5, 9], device="meta")
    xs, ys = take((x, y), idx)
    assert xs.device.type == "meta" and xs.shape == (3, 3, 32, 32) and ys.shape == (3,)
    # Nor does it clone a leaf, bring it to the CPU or densify it.
    for name in ("clone", "cpu", "contiguous", "numpy", "copy_"):
        monkeypatch.setattr(torch.Tensor, name, _refuse(name), raising=True)
    xs, ys = take((x, y), idx)
    assert xs.device.type == "meta"


def _refuse(name):
    def refused(self, *a, **k):
        raise AssertionError(f"take() called Tensor.{name}")

    return refused


def test_selection_from_a_consumers_shared_batch_leaves_it_untouched(spawn):
    producer = spawn("produce_ids", name="sel-shm", n=256, batch_size=64, width=16)
    producer.expect("ready")
    c = batchcast.Consumer("sel-shm", connect_timeout=30)
    batch = next(iter(c))
    x = batch["x"]
    before = hashlib.sha256(x.numpy().tobytes()).hexdigest()
    idx = torch.tensor([3, 7, 60])
    chosen = take(batch, idx)
    lo, hi = x.data_ptr(), x.data_ptr() + x.numel() * x.element_size()
    picked = chosen["x"]
    assert picked.device == x.device
    assert not lo <= picked.data_ptr() < hi  # fresh memory, not a view of the slot
    assert picked.untyped_storage().nbytes() == 3 * 16 * 4  # only the chosen rows
    assert chosen["id"].tolist() == [3, 7, 60] and chosen["name"] == ["s3", "s7", "s60"]
    assert hashlib.sha256(x.numpy().tobytes()).hexdigest() == before
    c.close()


@pytest.mark.gpu
def test_on_a_gpu_the_selection_stays_on_the_gpu(spawn):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    producer = spawn("produce_ids", name="sel-gpu", n=256, batch_size=64, width=16)
    producer.expect("ready")
    c = batchcast.Consumer("sel-gpu", device="cuda:0", connect_timeout=30)
    batch = next(iter(c))
    chosen = take(batch, torch.tensor([3, 7, 60], device="cuda:0"))
    assert chosen["x"].device == batch["x"].device and chosen["x"].data_ptr() != batch["x"].data_ptr()
    assert chosen["id"].tolist() == [3, 7, 60]
    c.close()


def test_two_trainers_choose_different_subsets_of_samples_made_once(bc_dir):
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    n, bs = 512, 64

    def start(role, **o):
        return Proc([sys.executable, str(HERE / "select_roles.py"), role, json.dumps(o)], env)

    procs = [start("produce_counted", name="sel-two", n=n, batch_size=bs, consumers=2)]
    try:
        procs[0].expect("ready")
        procs += [start("consume_selecting", name="sel-two", batch_size=bs, ratio=0.25, n=n, seed=s)
                  for s in (1, 2)]
        chose = [json.loads(p.expect("chose ")) for p in procs[1:]]
        made = json.loads(procs[0].expect("made "))
        assert made == [1] * n  # the producer made every sample once
        for c in chose:
            assert c["seen"] == list(range(n))  # each trainer saw every sample
            assert len(c["trained"]) == n // 4 and len(set(c["trained"])) == n // 4
            assert set(c["trained"]) <= set(range(n))
        assert set(chose[0]["trained"]) != set(chose[1]["trained"])
        assert [p.wait() for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            p.reap()


def test_the_drift_trigger_fires_once_when_the_embeddings_shift():
    g = torch.Generator().manual_seed(6)
    trigger = DriftTrigger(window=128, threshold=0.3)
    fired = [trigger.update(torch.randn(64, 8, generator=g)) for _ in range(8)]
    assert fired == [False] * 8 and trigger.fired == 0 and trigger.distance < 0.3
    shifted = [trigger.update(torch.randn(64, 8, generator=g) + 2) for _ in range(8)]
    assert shifted == [False, True] + [False] * 6 and trigger.fired == 1
    means = DriftTrigger(window=100, threshold=1.0, metric="mean")
    assert not means.update(torch.randn(100, 4, generator=g))
    assert means.update(torch.randn(100, 4, generator=g) + 3) and means.distance > 5
    with pytest.raises(ValueError, match="unknown drift metric"):
        DriftTrigger(10, 0.1, metric="kl")


def test_the_performance_trigger_fires_on_each_window_below_its_threshold():
    trigger = PerformanceTrigger(window=100, threshold=0.8)
    good, bad = torch.arange(50) % 10 != 0, torch.arange(50) % 2 == 0  # 90% and 50% right
    assert [trigger.update(good) for _ in range(4)] == [False] * 4 and trigger.accuracy == 0.9
    assert [trigger.update(bad) for _ in range(4)] == [False, True, False, True]
    assert trigger.accuracy == 0.5 and trigger.fired == 2
    assert trigger.update(torch.cat([bad] * 4)) and trigger.fired == 4  # two windows in one batch
    with pytest.raises(ValueError, match=r"threshold must be an accuracy in \(0, 1\]"):
        PerformanceTrigger(10, 80)


def test_the_selection_example_trains_from_a_producer(bc_dir):
    # The example's roles started by hand: its producer waits for trainers
    # as long as they take to start, and stops once both have finished.
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    script = str(ROOT / "examples" / "selective_training.py")
    common = ["--epochs=2", "--samples=512"]

    def start(*args):
        return Proc([sys.executable, script, *args], env)

    producer = start("producer", *common, "--workers=0", "--idle-timeout=600")
    trainers = [start("trainer", *common, f"--select={m}") for m in ("loss", "entropy")]
    try:
        for t, method in zip(trainers, ("loss", "entropy")):
            line = t.expect(f"select={method}: epoch 1:", timeout=300)
            assert line.startswith("trained on 128 of 512 samples")
            assert t.wait() == 0
    finally:
        for p in trainers + [producer]:
            p.reap()


def test_the_package_exports_the_module():
    assert batchcast.select.Downsampler is Downsampler
    assert Path(batchcast.select.__file__).name == "select.py"
