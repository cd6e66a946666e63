"""Seeding, where the notebook runs, and how big its problems should be.

Contract: nothing happens at import. ``seed_everything`` seeds Python, NumPy and torch
(all devices). ``quick_mode`` reads the ``COURSE_QUICK`` environment variable, which
the test suite sets so that notebooks run their smallest problem sizes.
"""

from __future__ import annotations

import os
import random
import sys
from typing import TypeVar

import numpy as np
import torch

__all__ = ["in_colab", "quick_mode", "scaled", "seed_everything"]

T = TypeVar("T")


def seed_everything(seed: int = 0) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and every GPU)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def quick_mode() -> bool:
    """True when ``COURSE_QUICK`` is set to 1/true/yes (the test suite sets it)."""
    return os.environ.get("COURSE_QUICK", "").strip().lower() in {"1", "true", "yes"}


def scaled(device: torch.device | str, *, cpu: T, gpu: T, quick: T | None = None) -> T:
    """Pick a problem size for ``device``: ``gpu`` on CUDA/MPS, ``cpu`` otherwise.

    In quick mode (the test suite) ``quick`` wins on any device, when given.

    >>> scaled("cpu", cpu=256, gpu=4096)
    256
    """
    if quick is not None and quick_mode():
        return quick
    return gpu if torch.device(device).type in {"cuda", "mps"} else cpu
