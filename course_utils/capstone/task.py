"""The capstone's task: which images, how long, with which hyperparameters and seed.

``CapstoneTask`` says what to train; ``GRADED_TASK`` is the one notebook 12 grades and
``OTHER_TASK`` another shape of it. The images are stored as small integers and
standardised one at a time by ``standardize_image``, the transform ``DigitsPixels`` (the
baseline's ``Dataset``) applies to each item it is asked for.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = [
    "GRADED_TASK",
    "NUM_CLASSES",
    "NUM_PIXELS",
    "NUM_TRAIN_IMAGES",
    "OTHER_TASK",
    "STD_EPS",
    "CapstoneTask",
    "DigitsPixels",
    "TrainFn",
    "standardize_image",
    "stored_digits",
]

NUM_PIXELS = 64
NUM_CLASSES = 10
NUM_TRAIN_IMAGES = 1348
"""Images in ``load_digits_split()``'s training split (1,797 digits, a quarter held out)."""
STD_EPS = 1e-5
"""Added to each image's standard deviation before dividing by it."""

TrainFn = Callable[["CapstoneTask", torch.device], tuple[nn.Module, torch.Tensor]]
"""``train(task, device) -> (trained model, per-step training losses)``."""


@lru_cache(maxsize=1)
def stored_digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(train pixels, train labels, test pixels, test labels)`` of the digits, pixels as uint8 in 0..16."""
    from course_utils.data import load_digits_split

    split = load_digits_split()
    as_stored = lambda X: (X * 16).round().to(torch.uint8)  # noqa: E731  # pixel values 0..16
    return as_stored(split.X_train), split.y_train, as_stored(split.X_test), split.y_test


@dataclass(frozen=True)
class CapstoneTask:
    """What to train: which images, how long, with which hyperparameters and seed.

    ``num_samples`` images of the digits training split, ``epochs`` passes in the shuffled
    order of ``batch_order()`` (each epoch drops the last incomplete batch), Adam with
    learning rate ``lr``, a ``CapstoneNet`` of width ``hidden`` initialised from ``seed``.
    With ``data_seed`` None the images are the first ``num_samples`` of the split, as
    stored; with a ``data_seed`` they are a random choice of ``num_samples`` images with a
    little random noise on their pixels (see ``data``). The grader's timed rounds draw
    ``seed`` and ``data_seed`` when each round starts, so that nothing computed before a
    round (standardised images, initial weights, a whole training run) can serve in it.
    """

    num_samples: int = 256
    epochs: int = 2
    batch_size: int = 16
    hidden: int = 128
    lr: float = 1e-2
    seed: int = 0
    data_seed: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= self.num_samples <= NUM_TRAIN_IMAGES:
            raise ValueError(
                f"need 1 <= batch_size <= num_samples <= {NUM_TRAIN_IMAGES}, "
                f"got {self.batch_size} and {self.num_samples}"
            )
        if self.epochs < 1 or self.hidden < 1:
            raise ValueError(f"need epochs >= 1 and hidden >= 1, got {self.epochs} and {self.hidden}")

    def drawn(self) -> CapstoneTask:
        """This task with its own weights, batch order and images (``seed``, ``data_seed``) drawn now (``secrets``)."""
        return replace(self, seed=secrets.randbelow(2**31), data_seed=secrets.randbelow(2**31))

    @property
    def steps(self) -> int:
        """Optimizer steps in the whole run."""
        return self.epochs * (self.num_samples // self.batch_size)

    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training images as stored, ``(num_samples, 64)`` uint8 in 0..16, and their int64 labels.

        With a ``data_seed``: ``num_samples`` images drawn without replacement from the
        whole training split, each pixel moved one step up or down with probability 1/8
        (kept in 0..16), all fixed by ``data_seed``.
        """
        pixels, labels, _, _ = stored_digits()
        if self.data_seed is None:
            return pixels[: self.num_samples].clone(), labels[: self.num_samples].clone()
        generator = torch.Generator().manual_seed(self.data_seed)
        chosen = torch.randperm(NUM_TRAIN_IMAGES, generator=generator)[: self.num_samples]
        picked = pixels[chosen].to(torch.int16)
        moved = torch.rand(picked.shape, generator=generator) < 0.125
        step = torch.randint(0, 2, picked.shape, generator=generator, dtype=torch.int16) * 2 - 1
        noisy = (picked + moved * step).clamp(0, 16).to(torch.uint8)
        return noisy, labels[chosen].clone()

    def batch_order(self) -> torch.Tensor:
        """Sample indices of every step, ``(steps, batch_size)`` int64, fixed by ``seed``."""
        generator = torch.Generator().manual_seed(self.seed)
        per_epoch = self.num_samples // self.batch_size
        epochs = [
            torch.randperm(self.num_samples, generator=generator)[: per_epoch * self.batch_size]
            for _ in range(self.epochs)
        ]
        return torch.cat(epochs).view(self.steps, self.batch_size)


GRADED_TASK = CapstoneTask()
"""The task the graded test trains and times (the same in quick mode and on every device)."""
OTHER_TASK = CapstoneTask(num_samples=96, epochs=1, batch_size=8, hidden=64, lr=5e-3, seed=11)
"""Another shape of the task, trained once (untimed) to check that ``fast_train`` reads its sizes from the task."""


def standardize_image(pixels: torch.Tensor) -> torch.Tensor:
    """One image's pixels (0..16) as float32 in [0, 1], shifted and scaled to mean 0, std 1."""
    x = pixels.float() / 16.0
    return (x - x.mean()) / (x.std() + STD_EPS)


class DigitsPixels(Dataset):
    """The stored images, transformed one at a time in ``__getitem__`` (as a decoder would)."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor) -> None:
        self.pixels = pixels
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return standardize_image(self.pixels[index]), self.labels[index]
