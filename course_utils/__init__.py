"""Helpers for the course "Optimization techniques for PyTorch".

Importing this package has no side effects: it seeds nothing and sets no flags.
Each submodule states its contract in its docstring; the names most notebooks use are
re-exported here::

    from course_utils import pick_device, benchmark, compare, seed_everything
"""

from course_utils.checks import check_equal, check_float, check_int, check_tensor, check_type
from course_utils.data import (
    SlowDataset,
    Split,
    load_digits_split,
    make_classification,
    make_loader,
    make_regression,
)
from course_utils.device import (
    choose_device,
    describe_environment,
    device_name,
    format_environment,
    pick_device,
    synchronize,
)
from course_utils.env import in_colab, quick_mode, scaled, seed_everything
from course_utils.hardware import GPU_PEAKS, achieved_fraction, estimate_cpu_peak, peak_for, peak_gflops
from course_utils.memory import (
    SavedTensorsCounter,
    format_bytes,
    optimizer_state_bytes,
    parameter_bytes,
    saved_activation_bytes,
    tensor_bytes,
)
from course_utils.models import MLP, DigitsCNN
from course_utils.plotting import plot_curves, plot_speedups, plot_vs_batch_size
from course_utils.timing import Comparison, Timing, benchmark, compare
from course_utils.training import History, accuracy, train_classifier

__all__ = [
    "GPU_PEAKS",
    "MLP",
    "Comparison",
    "DigitsCNN",
    "History",
    "SavedTensorsCounter",
    "SlowDataset",
    "Split",
    "Timing",
    "accuracy",
    "achieved_fraction",
    "benchmark",
    "check_equal",
    "check_float",
    "check_int",
    "check_tensor",
    "check_type",
    "choose_device",
    "compare",
    "describe_environment",
    "device_name",
    "estimate_cpu_peak",
    "format_bytes",
    "format_environment",
    "in_colab",
    "load_digits_split",
    "make_classification",
    "make_loader",
    "make_regression",
    "optimizer_state_bytes",
    "parameter_bytes",
    "peak_for",
    "peak_gflops",
    "pick_device",
    "plot_curves",
    "plot_speedups",
    "plot_vs_batch_size",
    "quick_mode",
    "saved_activation_bytes",
    "scaled",
    "seed_everything",
    "synchronize",
    "tensor_bytes",
    "train_classifier",
]
