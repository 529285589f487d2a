"""Native ColorJitter, TrivialAugmentWide and RandAugment (issue 16): each
op against torchvision's tensor implementation with the same parameters,
the policies' draws, and the errors a user can make."""

from __future__ import annotations

from collections import Counter

import re

import numpy as np
import pytest

import batchcast
from batchcast import _native
from batchcast import transforms as T

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.functional")
autoaugment = pytest.importorskip("torchvision.transforms.autoaugment")
InterpolationMode = pytest.importorskip("torchvision.transforms").InterpolationMode

from test_augment import S, connect, dataset, serve  # noqa: F401  (fixtures)

apply_op = _native.Augmenter.apply_op


def images():
    """Four random 48x40 images, an odd-sized 37x29 one and three
    photo-like smooth ones, one of them 320x300 (HWC uint8)."""
    rng = np.random.default_rng(0)
    out = [rng.integers(0, 256, (48, 40, 3), dtype=np.uint8) for _ in range(4)]
    out.append(rng.integers(0, 256, (37, 29, 3), dtype=np.uint8))
    y, x = np.mgrid[0:48, 0:40].astype(np.float64)
    smooth = np.stack([128 + 100 * np.sin(x / 7) * np.cos(y / 9), 40 + 4 * x, 30 + 3 * y + 2 * x], -1)
    out.append(np.clip(smooth, 0, 255).astype(np.uint8))
    # A bright one whose red spans 145..254: autocontrast's top value lands
    # on 254.99998 in torch (scale = reciprocal * 255, rounded twice).
    bright = np.stack([145 + x * 109 // 39, 200 + y, 250 + 0 * x], -1)
    out.append(bright.astype(np.uint8))
    # A large smooth one (contrast's mean over 96000 pixels).
    y, x = np.mgrid[0:320, 0:300].astype(np.float64)
    large = np.stack([200 + 55 * np.sin(x / 17), 150 + 90 * np.cos(y / 13), 120 + 0.3 * x + 0.2 * y], -1)
    out.append(np.clip(large, 0, 255).astype(np.uint8))
    return out


def torchvision_op(name, img, value):
    """torchvision on the CHW tensor of `img`: `_apply_op` (NEAREST, fill
    None: zeros) or `F.adjust_*`, back to HWC."""
    t = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()
    if name.startswith("adjust_"):
        out = getattr(F, name)(t, value)
    else:
        out = autoaugment._apply_op(t, name, float(value), interpolation=InterpolationMode.NEAREST, fill=None)
    return out.permute(1, 2, 0).numpy()


def native_op(name, img, value):
    out = img.copy()
    apply_op(name, out, value)
    return out


# Measured against torchvision 0.29 / torch 2.x on the CPU: every op below
# is bit-identical to torchvision's on every image and parameter here. The
# pointwise and histogram ops are asserted so (their arithmetic is fixed);
# sharpness (a 3x3 convolution) and the geometric ops (a matrix product)
# depend on the order torch's kernels accumulate in, so they are asserted
# to within one level on 99.9% of values and pixel-identical on 99.9% of
# pixels, room for another CPU's kernels, not for a wrong formula.
EXACT = {
    "Identity": [0],
    "Brightness": [0.5, -0.5, 0.99, -0.9, 0.27],
    "Color": [0.5, -0.5, 0.99, -0.9, 0.27],
    "Contrast": [0.5, -0.5, 0.99, -0.9, 0.27],
    "Posterize": [8, 7, 4, 2, 1, 0],
    "Solarize": [255, 128, 127.5, 8.5, 0],
    "AutoContrast": [0],
    "Equalize": [0],
    "adjust_brightness": [0.6, 1.4, 1.0, 0.123],
    "adjust_contrast": [0.6, 1.4, 0.0, 1.777],
    "adjust_saturation": [0.0, 0.6, 1.4, 2.0],
    "adjust_hue": [-0.5, -0.1, 0.0, 0.1, 0.33, 0.5],
}
CLOSE = {
    "Sharpness": [0.5, -0.5, 0.99, -0.9, 0.27],
}
GEOMETRIC = {
    "ShearX": [0.3, -0.3, 0.99, -0.5, 0.1],
    "ShearY": [0.3, -0.3, 0.99, 0.1],
    "TranslateX": [5, -13.7, 32],
    "TranslateY": [5, -13.7, 21.7],
    "Rotate": [30, -30, 135, 17.3, 90, -90, 180],
}


def outputs(name, values):
    """Op `name` at each of `values` on each test image: the value,
    torchvision's image and ours."""
    for img in images():
        for value in values:
            yield value, torchvision_op(name, img, value), native_op(name, img, value)


def diffs(name, values):
    """Each of `values` and how far op `name` at it is from torchvision's,
    per channel value, on each test image."""
    for value, want, got in outputs(name, values):
        yield value, np.abs(want.astype(int) - got.astype(int))


@pytest.mark.parametrize("name", sorted(EXACT))
def test_colour_ops_are_torchvisions_to_the_level(name):
    for value, diff in diffs(name, EXACT[name]):
        assert diff.max() == 0, f"{name}({value}): {np.count_nonzero(diff)} values differ"


@pytest.mark.parametrize("name", sorted(CLOSE))
def test_sharpness_is_within_one_level(name):
    for value, diff in diffs(name, CLOSE[name]):
        assert diff.max() <= 1, f"{name}({value}): max diff {diff.max()}"
        assert (diff == 0).mean() >= 0.999, f"{name}({value}): {(diff == 0).mean():.4f} exact"


# Shears of +-1 put the source of most pixels exactly halfway between two
# (a tie, rounded half to even, as torch's grid_sample does); a 60 degree
# turn has a few. Rounding ties away from zero instead fails these (78%
# identical), not the ones above.
TIES = {
    "ShearX": [1.0, -1.0],
    "ShearY": [1.0, -1.0],
    "Rotate": [60, 45],
}


@pytest.mark.parametrize("cases", [GEOMETRIC, TIES], ids=["general", "ties"])
@pytest.mark.parametrize("name", sorted(GEOMETRIC))
def test_geometric_ops_are_torchvisions_pixel_for_pixel(name, cases):
    for value, want, got in outputs(name, cases.get(name, [])):
        same = (want == got).all(axis=-1).mean()
        assert same >= 0.999, f"{name}({value}): {same:.4f} of pixels identical"


def jitter_augmenter(side, jitter, seed=0, **kw):
    """An augmenter whose crop is the whole image (scale and ratio 1, no
    flip): what it outputs is the drawn ops applied to the input."""
    return _native.Augmenter(
        side, scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip_p=0.0, layout="nhwc", seed=seed, jitter=jitter, **kw
    )


def run(aug, batch, epoch=0, first_key=0):
    out = np.empty((len(batch), *aug.image_shape()), dtype=np.uint8)
    aug.augment(batch, epoch, first_key, out)
    return out


def square_batch(n=6, side=40):
    rng = np.random.default_rng(1)
    return np.ascontiguousarray(rng.integers(0, 256, (n, side, side, 3), dtype=np.uint8))


def apply_in_torch(img, ops):
    t = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()
    for name, value in ops:
        if name.startswith("adjust_"):
            t = getattr(F, name)(t, value)
        else:
            t = autoaugment._apply_op(t, name, value, interpolation=InterpolationMode.NEAREST, fill=None)
    return t.permute(1, 2, 0).numpy()


def test_color_jitter_runs_the_drawn_order_and_factors_as_torchvision_would():
    jitter = T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
    aug = jitter_augmenter(40, jitter.ranges(), seed=5)
    batch = square_batch()
    out = run(aug, batch, epoch=2, first_key=10)
    orders = set()
    for i, img in enumerate(batch):
        ops = aug.draws(2, 10 + i)
        assert sorted(n for n, _ in ops) == ["adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation"]
        orders.add(tuple(n for n, _ in ops))
        want = apply_in_torch(img, ops)
        diff = np.abs(want.astype(int) - out[i].astype(int))
        # The hue's one level, carried through the other adjustments.
        assert diff.max() <= 2 and (diff <= 1).mean() >= 0.99, f"sample {i}: {ops}, max {diff.max()}"
    # The order is random: 400 samples see (nearly) all 24 of them.
    for key in range(400):
        orders.add(tuple(n for n, _ in aug.draws(0, key)))
    assert len(orders) >= 22, f"{len(orders)} of 24 orders"
    for key in range(200):
        for name, value in aug.draws(0, key):
            lo, hi = (-0.1, 0.1) if name == "adjust_hue" else (0.6, 1.4)
            assert lo <= value <= hi, (name, value)


@pytest.mark.parametrize(
    "policy",
    [T.TrivialAugmentWide(), T.RandAugment(), T.RandAugment(num_ops=3, magnitude=20)],
    ids=repr,
)
def test_auto_augment_applies_its_draws_and_a_seed_reproduces(policy):
    kw = policy.native_kwargs()
    batch = square_batch(8)
    a = run(jitter_augmenter(40, None, seed=1, **kw), batch)
    assert np.array_equal(a, run(jitter_augmenter(40, None, seed=1, threads=3, **kw), batch))
    b = run(jitter_augmenter(40, None, seed=2, **kw), batch)
    differing = sum(not np.array_equal(x, y) for x, y in zip(a, b))
    assert differing >= 5, f"another seed, other ops: {differing} of 8 differ"
    aug = jitter_augmenter(40, None, seed=1, **kw)
    for i, img in enumerate(batch):
        ops = aug.draws(0, i)
        want = apply_in_torch(img, ops)
        same = (want == a[i]).all(axis=-1).mean()
        assert same >= 0.99, f"sample {i}: {ops}: {same:.4f} of pixels identical"


@pytest.mark.parametrize("policy", [T.TrivialAugmentWide(), T.RandAugment()], ids=repr)
def test_ops_are_drawn_uniformly_with_a_random_sign(policy):
    aug = jitter_augmenter(32, None, seed=3, **policy.native_kwargs())
    names = Counter()
    signs = Counter()
    for key in range(2800):
        for name, value in aug.draws(0, key):
            names[name] += 1
            if value != 0 and name in GEOMETRIC:
                signs[value > 0] += 1
    ops = list(autoaugment.TrivialAugmentWide()._augmentation_space(31).keys())
    assert set(names) == set(ops), "torchvision's 14 ops, no others"
    n = sum(names.values())
    expected = n / len(ops)
    chi2 = sum((names[o] - expected) ** 2 / expected for o in ops)
    # 13 degrees of freedom: P(chi2 > 60) is about 1e-7, so this does not
    # flake, while one op twice as likely as another gives chi2 in the
    # hundreds.
    assert chi2 < 60, f"chi2 {chi2:.1f}: {names}"
    assert abs(signs[True] - signs[False]) < 0.15 * sum(signs.values()), signs


def test_magnitudes_follow_torchvisions_tables():
    """RandAugment's fixed bin gives torchvision's magnitude (up to the sign)."""
    space = autoaugment.RandAugment()._augmentation_space(31, (32, 32))
    aug = jitter_augmenter(32, None, seed=4, auto="randaugment", num_ops=1, magnitude=9)
    seen = set()
    for key in range(400):
        ((name, value),) = aug.draws(0, key)
        mags, signed = space[name]
        want = float(mags[9]) if mags.ndim > 0 else 0.0
        assert abs(value) == pytest.approx(want, abs=0), (name, value, want)
        seen.add(name)
    assert len(seen) == 14
    wide = autoaugment.TrivialAugmentWide()._augmentation_space(31)
    aug = jitter_augmenter(32, None, seed=4, auto="trivialaugmentwide")
    for key in range(400):
        ((name, value),) = aug.draws(0, key)
        mags, _ = wide[name]
        allowed = [0.0] if mags.ndim == 0 else [float(m) for m in mags]
        assert any(abs(value) == pytest.approx(m, rel=1e-6) for m in allowed), (name, value)


def test_compose_takes_the_new_ops_in_order_and_refuses_other_orders():
    c = T.Compose([
        T.RandomResizedCrop(16),
        T.RandomHorizontalFlip(),
        T.TrivialAugmentWide(),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        T.Normalize((0.5, 0.5, 0.5), (0.2, 0.2, 0.2)),
    ])
    native = c.native(threads=2, seed=0)
    out = np.empty((4, *native.image_shape()), dtype=np.float32)
    native.augment(square_batch(4), 0, 0, out)
    assert out.shape == (4, 3, 16, 16) and np.isfinite(out).all()
    T.Compose([T.RandomResizedCrop(16), T.RandAugment(), T.Normalize((0, 0, 0), (1, 1, 1))])
    T.Compose([T.RandomResizedCrop(16), T.ColorJitter(brightness=0.2)])
    order = "then optionally RandomHorizontalFlip (not after CenterCrop), one of TrivialAugmentWide"
    for wrong in (
        [T.RandomResizedCrop(16), T.ColorJitter(0.2), T.TrivialAugmentWide()],
        [T.RandomResizedCrop(16), T.Normalize((0, 0, 0), (1, 1, 1)), T.ColorJitter(0.2)],
        [T.RandomResizedCrop(16), T.TrivialAugmentWide(), T.RandAugment()],
        [T.RandomResizedCrop(16), T.RandAugment(), T.RandomHorizontalFlip()],
    ):
        with pytest.raises(batchcast.InvalidArgument, match="out of order") as e:
            T.Compose(wrong)
        assert order in str(e.value)
    with pytest.raises(batchcast.InvalidArgument, match=re.escape(order)):
        T.Compose([T.ColorJitter(0.2), T.RandomResizedCrop(16)])


@pytest.mark.parametrize(
    "make, fix",
    [
        (lambda: T.ColorJitter(brightness=-0.1), "non-negative"),
        (lambda: T.ColorJitter(contrast=(1.5, 0.5)), "min <= max"),
        (lambda: T.ColorJitter(saturation=(-1, 2)), "min <= max"),
        (lambda: T.ColorJitter(hue=0.6), r"-0.5 <= min <= max <= 0.5"),
        (lambda: T.ColorJitter(hue=(0.1, 0.7)), r"<= 0.5"),
        (lambda: T.ColorJitter(brightness="a lot"), "number or a"),
        (lambda: T.ColorJitter(brightness=(1, 2, 3)), "number or a"),
        (lambda: T.ColorJitter(brightness=float("nan")), "non-negative"),
        (lambda: T.RandAugment(magnitude=31), "below num_magnitude_bins"),
        (lambda: T.RandAugment(num_ops=-1), "num_ops"),
        (lambda: T.RandAugment(num_ops=1.5), "num_ops"),
        (lambda: T.TrivialAugmentWide(num_magnitude_bins=1), "num_magnitude_bins"),
        (lambda: T.TrivialAugmentWide(interpolation=InterpolationMode.BILINEAR), "only NEAREST"),
        (lambda: T.RandAugment(fill=128), "only fill=None or 0"),
        (lambda: _native.Augmenter(8, auto="autoaugment"), "randaugment"),
        (lambda: _native.Augmenter(8, auto="randaugment", magnitude=40), "below num_magnitude_bins"),
        (lambda: _native.Augmenter(8, jitter=((1.0, 0.5), None, None, None)), "min <= max"),
        (lambda: apply_op("Blur", np.zeros((4, 4, 3), np.uint8), 1.0), "the ops are Identity, ShearX"),
        (lambda: apply_op("Posterize", np.zeros((4, 4, 3), np.uint8), 9), "0 to 8 bits"),
        (lambda: apply_op("adjust_hue", np.zeros((4, 4, 3), np.uint8), 0.7), r"\[-0.5, 0.5\]"),
        (lambda: apply_op("Rotate", np.zeros((4, 4, 3), np.float32), 1.0), r"uint8 of shape \(height, width, 3\)"),
        (lambda: apply_op("Rotate", np.zeros((4, 4), np.uint8), 1.0), r"uint8 of shape \(height, width, 3\)"),
    ],
)
def test_user_errors_name_the_fix(make, fix):
    with pytest.raises(batchcast.InvalidArgument, match=fix):
        make()


def test_apply_op_leaves_empty_images_alone():
    # (torch tensors: NumPy exports empty arrays with strides the DLPack
    # import reads as not C-contiguous, a TypeError before any op runs)
    for shape in [(0, 4, 3), (4, 0, 3)]:
        for name in ("Rotate", "ShearX", "Sharpness", "Equalize", "AutoContrast", "Contrast"):
            img = torch.zeros(shape, dtype=torch.uint8)
            apply_op(name, img, 10.0 if name == "Rotate" else 0.5)
            assert tuple(img.shape) == shape


def test_apply_op_refuses_a_read_only_image():
    img = np.zeros((4, 4, 3), np.uint8)
    img.flags.writeable = False
    try:
        apply_op("Equalize", img, 0.0)
    except batchcast.InvalidArgument as e:
        assert "writable copy" in str(e)
    except BufferError:
        pass  # NumPy too old to export read-only arrays at all: nothing is written either
    else:
        pytest.fail("a read-only image was accepted")


def test_a_consumer_runs_them_end_to_end(serve):
    """Through a real decoded stream: a consumer's TrivialAugmentWide +
    ColorJitter output is its draws applied (by torchvision) to the
    decoded images another consumer receives."""
    serve("colour", consumers=2)
    compose = lambda: T.Compose(  # noqa: E731
        [
            T.RandomResizedCrop(S, scale=(1.0, 1.0), ratio=(1.0, 1.0)),  # the whole stored square
            T.TrivialAugmentWide(),
            T.ColorJitter(brightness=0.3, hue=0.05),
        ],
        layout="nhwc",
    )
    plain, mine = connect(dict(name="colour"), dict(name="colour", transform=compose(), seed=11))
    decoded, augmented, epochs = [], [], []
    for (x, _), (y, _) in zip(plain, mine):
        decoded.append(x.numpy().copy())
        augmented.append(y.numpy().copy())
        epochs.append(mine.epoch)
    plain.close()
    mine.close()
    assert sum(len(b) for b in augmented) == 24
    draws = compose().native(threads=1, seed=11)
    key = 0
    for src, got, epoch in zip(decoded, augmented, epochs):
        assert got.dtype == np.uint8 and got.shape[1:] == (S, S, 3)
        for img, out in zip(src, got):
            ops = draws.draws(epoch, key)
            want = apply_in_torch(img, ops)
            diff = np.abs(want.astype(int) - out.astype(int))
            assert (diff <= 2).all(axis=-1).mean() >= 0.99, f"sample {key}: {ops}"
            key += 1
