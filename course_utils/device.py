"""Pick a device, describe the environment, and synchronise.

Contract: nothing here changes global state. ``pick_device`` only reads availability
flags (and the ``COURSE_DEVICE`` environment variable, which forces a device), and
``synchronize`` waits for queued work on the given device and does nothing on the CPU.
First written out in notebook 01 ("Run tensors on the GPU").
"""

from __future__ import annotations

import os
import platform

import torch

from course_utils import _EXPORTS

__all__ = list(_EXPORTS["device"])
"""Every public name here is re-exported by the package: the one list is the package's (``_EXPORTS``)."""


def choose_device(cuda_available: bool, mps_available: bool, prefer: str | None = None) -> str:
    """Return the best device type given what is available.

    The order is CUDA, then Apple's MPS, then the CPU. ``prefer`` forces a type, and
    raises ``ValueError`` with a clear message if that type is not available.

    >>> choose_device(cuda_available=False, mps_available=True)
    'mps'
    """
    available = {"cuda": cuda_available, "mps": mps_available, "cpu": True}
    if prefer is not None:
        kind = torch.device(prefer).type
        if kind not in available:
            raise ValueError(f"unknown device type {prefer!r}; use one of cuda, mps, cpu")
        if not available[kind]:
            raise ValueError(f"device {prefer!r} was requested but is not available here")
        return str(prefer)
    for kind in ("cuda", "mps"):
        if available[kind]:
            return kind
    return "cpu"


def pick_device(prefer: str | None = None) -> torch.device:
    """Return the best available ``torch.device`` (cuda, then mps, then cpu).

    ``prefer`` (or the ``COURSE_DEVICE`` environment variable) forces a device, for
    example ``"cpu"`` to compare against a GPU run.

    >>> pick_device("cpu")
    device(type='cpu')
    """
    prefer = prefer or os.environ.get("COURSE_DEVICE") or None
    mps = getattr(torch.backends, "mps", None)
    mps_available = bool(mps is not None and mps.is_available())
    return torch.device(choose_device(torch.cuda.is_available(), mps_available, prefer))


def synchronize(device: torch.device | str) -> None:
    """Wait until all work queued on ``device`` has finished (a no-op on the CPU).

    CUDA and MPS kernels run asynchronously: the Python call returns as soon as the
    kernel is queued. Call this before reading a clock.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type != "cpu" and torch.accelerator.is_available():
        torch.accelerator.synchronize()


def device_name(device: torch.device | str) -> str:
    """Human-readable name of the hardware behind ``device``."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple GPU (MPS) on {platform.machine()}"
    return _cpu_model_name()


def _cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo, or what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe_environment(device: torch.device | str) -> dict[str, str]:
    """Versions and hardware facts worth printing above any measurement."""
    device = torch.device(device)
    facts = {
        "device": str(device),
        "hardware": device_name(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu threads": str(torch.get_num_threads()),
    }
    if device.type == "cuda":
        facts["CUDA"] = str(torch.version.cuda)
        facts["cuDNN"] = str(torch.backends.cudnn.version())
        major, minor = torch.cuda.get_device_capability(device)
        facts["compute capability"] = f"{major}.{minor}"
        facts.update(float32_precision_settings())
    return facts


def float32_precision_settings() -> dict[str, str]:
    """How CUDA float32 matmuls and cuDNN convolutions may round: ``fp32_precision`` values.

    ``"tf32"`` allows TensorFloat-32 on Tensor Cores (Ampere and newer); ``"ieee"`` keeps
    full float32; ``"none"`` means nothing was set, which for matmuls is full float32.
    Reads the ``fp32_precision`` attributes (PyTorch 2.9 and newer, so every supported
    version) rather than ``torch.get_float32_matmul_precision()``, which raises once a
    program has set the newer attributes to a state the old API cannot express.
    Reading changes nothing.
    """
    return {
        "fp32 matmul precision": torch.backends.cuda.matmul.fp32_precision,
        # torch.backends.cudnn adds ``conv`` at import (a module wrapper); its stubs lack it
        "fp32 conv precision": torch.backends.cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
    }


def format_environment(device: torch.device | str) -> str:
    """``describe_environment`` as aligned ``key: value`` lines."""
    facts = describe_environment(device)
    width = max(len(key) for key in facts)
    return "\n".join(f"{key:>{width}}: {value}" for key, value in facts.items())
