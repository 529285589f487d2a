"""What a trainer trains, whatever feeds it: the model (the small CNN, a
timm model, or torchvision's when timm is not installed), one training step
(SGD; bf16 autocast and channels-last on CUDA), and the synthetic batch that
the warm-up steps and the `ceiling` mode train on."""

from __future__ import annotations

from typing import Any

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def build_model(torch, name: str, classes: int):
    """`small` (four stride-2 conv/BN/ReLU blocks and a linear head), else
    timm.create_model(name) if timm is importable, else torchvision's."""
    nn = torch.nn
    if name == "small":
        def block(i, o):
            return [nn.Conv2d(i, o, 3, 2, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]

        return nn.Sequential(*block(3, 16), *block(16, 32), *block(32, 64), *block(64, 128),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))
    try:
        import timm
    except ImportError:
        timm = None
    if timm is not None:
        return timm.create_model(name, num_classes=classes)
    from torchvision import models

    if not hasattr(models, name):
        raise SystemExit(f"--model {name}: timm is not installed and torchvision has no such model")
    return getattr(models, name)(num_classes=classes)


class Trainer:
    """The model, its optimiser and its step on one device. step() takes a
    batch as any feed delivers it (float32 NCHW, or a native pipeline's
    uint8 NHWC/NCHW, on the CPU or the device) and queues one training step."""

    def __init__(self, torch, spec: dict[str, Any]):
        self.torch = torch
        self.device = torch.device(spec["device"])
        self.cuda = spec["cuda"]
        self.model = build_model(torch, spec["model"], spec["classes"]).to(self.device)
        if self.cuda:
            torch.backends.cudnn.benchmark = True
            self.model = self.model.to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.mean = torch.tensor(MEAN, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=self.device).view(1, 3, 1, 1)

    def step(self, images, labels) -> None:
        torch = self.torch
        images = images.to(self.device, non_blocking=True)
        labels = labels.to(self.device, non_blocking=True)
        if images.dtype == torch.uint8:  # a native pipeline's raw output
            if images.shape[-1] == 3 and images.shape[1] != 3:
                images = images.permute(0, 3, 1, 2)
            images = (images.float() / 255 - self.mean) / self.std
        if self.cuda:
            images = images.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(self.model(images), labels)
        else:
            loss = torch.nn.functional.cross_entropy(self.model(images), labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def synthetic_batch(self, batch_size: int, image_size: int, classes: int):
        """A normalised-looking float32 batch and its labels, resident on the device."""
        torch = self.torch
        images = torch.randn(batch_size, 3, image_size, image_size, device=self.device)
        if self.cuda:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, classes, (batch_size,), device=self.device)
        return images, labels

    def warm_up(self, steps: int, batch) -> None:
        """`steps` steps on `batch`, then waits for the device: the CUDA
        context, cuDNN's autotuning and the allocator's pools are set up
        before the measured part."""
        for _ in range(steps):
            self.step(*batch)
        if self.cuda:
            self.torch.cuda.synchronize(self.device)


class ResidentBatches:
    """The `ceiling` mode's feed: one synthetic batch already on the device,
    served as an epoch of the real dataset's batch sizes (its tail included),
    so the model trains at the GPU's own limit with no loading at all."""

    def __init__(self, batch, images: int, batch_size: int):
        self.images, self.labels = batch
        self.sizes = [batch_size] * (images // batch_size) + ([images % batch_size] if images % batch_size else [])

    def __iter__(self):
        for n in self.sizes:
            yield self.images[:n], self.labels[:n]
