"""Data the notebooks train on: synthetic tensors and scikit-learn's bundled digits.

Contract: nothing is downloaded. Every function takes a ``seed`` and returns the same
tensors for the same seed. ``SlowDataset`` lives here (not in a notebook) because
DataLoader workers started with the spawn method must import their dataset.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

__all__ = [
    "SlowDataset",
    "Split",
    "load_digits_split",
    "make_classification",
    "make_loader",
    "make_regression",
]


@dataclass(frozen=True)
class Split:
    """Train and test tensors of one data set."""

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def num_features(self) -> int:
        return self.X_train.shape[1]

    @property
    def num_classes(self) -> int:
        return int(torch.cat([self.y_train, self.y_test]).max()) + 1


def make_classification(
    num_samples: int = 1024,
    num_features: int = 32,
    num_classes: int = 4,
    *,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian blobs, one per class: features ``(n, f)`` float32, labels ``(n,)`` int64.

    >>> X, y = make_classification(8, 3, 2)
    >>> X.shape, y.dtype
    (torch.Size([8, 3]), torch.int64)
    """
    generator = torch.Generator().manual_seed(seed)
    centers = 2.0 * torch.randn(num_classes, num_features, generator=generator)
    y = torch.randint(num_classes, (num_samples,), generator=generator)
    X = centers[y] + torch.randn(num_samples, num_features, generator=generator)
    return X, y


def make_regression(
    num_samples: int = 1024,
    num_features: int = 32,
    *,
    noise: float = 0.1,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A noisy linear target: features ``(n, f)`` and targets ``(n, 1)``, float32."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.randn(num_samples, num_features, generator=generator)
    weight = torch.randn(num_features, 1, generator=generator)
    y = X @ weight + noise * torch.randn(num_samples, 1, generator=generator)
    return X, y


def load_digits_split(test_fraction: float = 0.25, *, seed: int = 0) -> Split:
    """scikit-learn's 1,797 handwritten 8x8 digits, scaled to [0, 1], shuffled and split.

    Features are ``(n, 64)`` float32, labels ``(n,)`` int64 in 0..9. The data ships
    inside scikit-learn, so this works offline.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    X = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    X, y = X[order], y[order]
    num_test = round(len(y) * test_fraction)
    return Split(X[num_test:], y[num_test:], X[:num_test], y[:num_test])


def make_loader(
    X: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 64,
    *,
    shuffle: bool = True,
    seed: int = 0,
    **loader_options: object,
) -> DataLoader:
    """A ``DataLoader`` over ``(X, y)`` whose shuffling order is fixed by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        TensorDataset(X, y), batch_size=batch_size, shuffle=shuffle, generator=generator, **loader_options
    )


class SlowDataset(Dataset):
    """A data set whose ``__getitem__`` sleeps, standing in for decoding or augmentation.

    Item ``i`` is ``(features, label)`` with features computed from ``i`` alone, so every
    worker and every epoch sees the same values.
    """

    def __init__(self, num_samples: int = 256, num_features: int = 32, delay_s: float = 0.001) -> None:
        self.num_samples = num_samples
        self.num_features = num_features
        self.delay_s = delay_s

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        time.sleep(self.delay_s)
        features = torch.arange(self.num_features, dtype=torch.float32).add_(index).sin_()
        return features, index % 10
