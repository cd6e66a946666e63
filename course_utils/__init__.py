"""Helpers for the course "Optimization techniques for PyTorch".

Importing this package has no side effects: it seeds nothing, sets no flags, and loads
nothing heavy. The names most notebooks use are re-exported here and loaded on first
use (so ``course``, the grading command, starts without importing torch)::

    from course_utils import pick_device, benchmark, compare, seed_everything

Each submodule states its contract in its docstring.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, tuple[str, ...]] = {
    "checks": ("check_equal", "check_float", "check_int", "check_tensor", "check_type"),
    "data": ("SlowDataset", "Split", "load_digits_split", "make_classification", "make_loader", "make_regression"),
    "device": (
        "choose_device",
        "describe_environment",
        "device_name",
        "float32_precision_settings",
        "format_environment",
        "pick_device",
        "synchronize",
    ),
    "env": ("in_colab", "quick_mode", "scaled", "seed_everything"),
    "hardware": ("GPU_PEAKS", "achieved_fraction", "estimate_cpu_peak", "peak_for", "peak_gflops"),
    "memory": (
        "SavedTensorsCounter",
        "format_bytes",
        "optimizer_state_bytes",
        "parameter_bytes",
        "saved_activation_bytes",
        "tensor_bytes",
    ),
    "models": ("MLP", "DigitsCNN"),
    "plotting": ("plot_curves", "plot_speedups", "plot_vs_batch_size"),
    "timing": ("Comparison", "Timing", "benchmark", "compare"),
    "training": ("History", "accuracy", "train_classifier"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """Load a re-exported name from its submodule the first time it is asked for."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"course_utils.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
