"""Which of timm's create_loader options shape the training samples in the
producer, as producer.py announces them and shared_loader.py compares them
with train.py's: one producer augments for every trainer, so a trainer
whose augmentation flags differ from the producer's is refused, naming each
option, instead of training on data it did not ask for."""

from __future__ import annotations

from typing import Any, Dict, Mapping

# create_loader's option -> the flag of train.py and producer.py that sets it.
TRANSFORM = {
    "no_aug": "--no-aug",
    "train_crop_mode": "--train-crop-mode",
    "scale": "--scale",
    "ratio": "--ratio",
    "hflip": "--hflip",
    "vflip": "--vflip",
    "color_jitter": "--color-jitter",
    "color_jitter_prob": "--color-jitter-prob",
    "grayscale_prob": "--grayscale-prob",
    "gaussian_blur_prob": "--gaussian-blur-prob",
    "auto_augment": "--aa",
    "interpolation": "--train-interpolation",
}
# Applied by the producer's transform without the prefetcher; with it, by
# timm's PrefetchLoader in each trainer (so each trainer's own take effect).
NORMALISE_AND_ERASE = {
    "mean": "--mean",
    "std": "--std",
    "re_prob": "--reprob",
    "re_mode": "--remode",
    "re_count": "--recount",
    "re_split": "--resplit",
}
FLAGS = {**TRANSFORM, **NORMALISE_AND_ERASE}


def announced(options: Mapping[str, Any], prefetcher: bool) -> Dict[str, Any]:
    """The options of `options` (create_loader's keyword arguments, its
    defaults filled in) that the producer applies, in a canonical JSON form."""
    keys = list(TRANSFORM) + ([] if prefetcher else list(NORMALISE_AND_ERASE))
    if not options.get("re_prob"):
        keys = [k for k in keys if k not in ("re_mode", "re_count", "re_split")]
    return {k: _canonical(k, options.get(k)) for k in keys}


def _canonical(key: str, value: Any) -> Any:
    from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    # What create_transform does with None (train.py's default for some).
    defaults = {"scale": (0.08, 1.0), "ratio": (3 / 4, 4 / 3), "mean": IMAGENET_DEFAULT_MEAN,
                "std": IMAGENET_DEFAULT_STD, "grayscale_prob": 0.0, "gaussian_blur_prob": 0.0}
    if value is None:
        value = defaults.get(key)
    if isinstance(value, (tuple, list)):
        return [round(float(v), 6) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value
