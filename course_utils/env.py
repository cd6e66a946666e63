"""Seeding, where the notebook runs, and how big its problems should be.

Contract: nothing happens at import. ``seed_everything`` seeds Python, NumPy and torch
(all devices). ``quick_mode`` reads the ``COURSE_QUICK`` environment variable, which
the test suite sets so that notebooks run their smallest problem sizes.
``SUPPORTED_TORCH`` is the one place that states which torch releases the notebooks support:
CI runs the pinned release; GPU machines often lag it and Colab follows new releases.
"""

from __future__ import annotations

import os
import random
import sys
from typing import TypeVar

import numpy as np
import torch

__all__ = ["SUPPORTED_TORCH", "in_colab", "quick_mode", "scaled", "seed_everything", "torch_version_supported"]

# Oldest and newest (major, minor) torch release the notebooks are run on: 2.11 is what the
# course's GPU check ran on, the pin in pyproject.toml (2.13, CPU) is what CI runs, and 2.15 is
# the newest release every notebook (solutions, visible and hidden tests) and every wrong answer
# were run on (tools/newer_torch_check.py; README, "Supported torch versions").
SUPPORTED_TORCH: tuple[tuple[int, int], tuple[int, int]] = ((2, 11), (2, 15))

T = TypeVar("T")


def seed_everything(seed: int = 0) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and every GPU)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def torch_version_supported(version: str) -> bool:
    """True when a torch version string (``torch.__version__``) lies in ``SUPPORTED_TORCH``.

    >>> torch_version_supported("2.11.0+cu130"), torch_version_supported("2.10.1")
    (True, False)
    """
    parts = version.split("+")[0].split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return False
    oldest, newest = SUPPORTED_TORCH
    return oldest <= major_minor <= newest


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
