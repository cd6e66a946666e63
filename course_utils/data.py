"""Data the notebooks train on: synthetic tensors and scikit-learn's bundled digits.

Contract: nothing is downloaded. Every function takes a ``seed`` and returns the same
tensors for the same seed. The ``Dataset`` classes and the ``worker_init_fn`` of notebook 03
(``SlowDataset``, ``StragglerDataset``, ``ReadEverySample``, ``NoisyDataset``,
``reseed_worker_generator``, ``RangeStream``) live here, not in a notebook, because
DataLoader workers started with the spawn or forkserver method must import them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info

__all__ = [
    "NoisyDataset",
    "RangeStream",
    "ReadEverySample",
    "SlowDataset",
    "Split",
    "StragglerDataset",
    "load_digits_split",
    "make_classification",
    "make_loader",
    "make_regression",
    "private_bytes",
    "reseed_worker_generator",
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
    **loader_options: Any,
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


class StragglerDataset(Dataset):
    """Mostly quick samples and a few slow ones (a large image, a remote read): item ``i`` is ``i``.

    Item ``i`` sleeps ``slow_delay_s`` when ``i`` is a multiple of ``slow_every``, else
    ``delay_s``. Notebook 03 uses it to show ``DataLoader(in_order=False)``: returning the
    index lets the loop see the order in which batches arrive.

    >>> StragglerDataset(num_samples=4, delay_s=0.0, slow_delay_s=0.0)[3]
    3
    """

    def __init__(
        self, num_samples: int = 64, delay_s: float = 0.001, slow_every: int = 16, slow_delay_s: float = 0.04
    ) -> None:
        if slow_every < 1:
            raise ValueError(f"slow_every must be at least 1, got {slow_every}")
        self.num_samples = num_samples
        self.delay_s = delay_s
        self.slow_every = slow_every
        self.slow_delay_s = slow_delay_s

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        time.sleep(self.slow_delay_s if index % self.slow_every == 0 else self.delay_s)
        return index


def private_bytes() -> int | None:
    """Bytes of this process's memory that no other process shares, or ``None`` where unknown.

    Linux only: the sum of the ``Private_Clean`` and ``Private_Dirty`` lines of
    ``/proc/self/smaps_rollup``. After a ``fork``, parent and child share every page until
    one of them writes to it; the writer then gets its own copy of that page, which counts
    as private from then on.
    """
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            kib = [int(line.split()[1]) for line in rollup if line.startswith(("Private_Clean:", "Private_Dirty:"))]
    except OSError:
        return None
    return 1024 * sum(kib) if kib else None


class ReadEverySample(Dataset):
    """One item: how many bytes of private memory this process gains while it reads every sample.

    ``samples`` is anything indexable with slices: a Python list, a NumPy array, a tensor.
    The only item reads them all once, ``batch_size`` at a time through ``torch.as_tensor``,
    as an epoch of ``dataset[i]`` calls would, and returns the growth of ``private_bytes()``
    (``None`` where that cannot be read). In a forked ``DataLoader`` worker it measures
    copy-on-access: reading a Python object writes its reference count, so the page holding
    it gets copied; reading a tensor's or an array's elements writes nothing. Notebook 03.
    """

    def __init__(self, samples: Sequence, batch_size: int = 1024) -> None:
        self.samples = samples
        self.batch_size = batch_size

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int | None:
        if index != 0:
            raise IndexError(index)
        before = private_bytes()
        for start in range(0, len(self.samples), self.batch_size):
            torch.as_tensor(self.samples[start : start + self.batch_size]).sum()
        after = private_bytes()
        return None if before is None or after is None else after - before


class NoisyDataset(Dataset):
    """Every item is a new draw from the data set's own NumPy ``Generator``, whatever its index.

    The draw stands in for a random augmentation. The generator is created once, in
    ``__init__``, so every ``DataLoader`` worker starts with a copy of the same state and,
    without ``reseed_worker_generator`` as ``worker_init_fn``, draws the same numbers as
    the other workers. Notebook 03.
    """

    def __init__(self, num_samples: int = 8, seed: int = 0) -> None:
        self.num_samples = num_samples
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> float:
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        return float(self.rng.random())


def reseed_worker_generator(worker_id: int) -> None:
    """A ``worker_init_fn``: give this worker's copy of the data set its own NumPy generator.

    The new generator is seeded with the worker's torch seed (``get_worker_info().seed``,
    ``base_seed + worker_id``), which differs between workers, and between epochs unless the
    workers are persistent, and repeats when the ``DataLoader``'s ``generator`` is seeded.
    """
    info = get_worker_info()
    if info is None:
        raise RuntimeError("reseed_worker_generator runs in DataLoader workers only (as worker_init_fn)")
    # Any data set gets the attribute (NoisyDataset reads it); the type Dataset declares no ``rng``.
    info.dataset.rng = np.random.default_rng(info.seed)  # type: ignore[attr-defined]


class RangeStream(IterableDataset):
    """Streams the integers ``start, ..., stop - 1``, an iterable-style data set.

    Every ``DataLoader`` worker gets its own copy and iterates it in full. With
    ``shard=True`` each copy asks ``get_worker_info()`` which worker runs it and yields only
    that worker's contiguous share, so the workers together yield every number once; with
    ``shard=False`` every worker yields everything. Notebook 03.

    >>> list(RangeStream(0, 4))
    [0, 1, 2, 3]
    """

    def __init__(self, start: int, stop: int, *, shard: bool = True) -> None:
        self.start = start
        self.stop = stop
        self.shard = shard

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        if info is None or not self.shard:
            return iter(range(self.start, self.stop))
        per_worker = math.ceil((self.stop - self.start) / info.num_workers)
        first = self.start + info.id * per_worker
        return iter(range(first, min(first + per_worker, self.stop)))
