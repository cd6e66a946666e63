"""Quantization helpers: a quiet torchao import, honest size counts, the guarded legacy API.

Contract:

* ``import_torchao`` first checks that torchao is installed and fits this torch
  (``torchao_problem``: torchao ``TORCHAO_VERSION`` or newer, torch 2.11 or newer) and
  raises ``ImportError`` saying what to install if not; then it imports torchao with two
  kinds of known, harmless import-time log messages dropped, matched by their text: a
  "Failed to load" line for each bundled ``_C*.so`` kernel library that cannot load here
  (how many depends on the machine), and torch's notice about torchao's own
  ``register_constant`` call. Python warnings are never touched, so a real deprecation
  warning still shows.
* ``serialized_bytes`` is the size of ``torch.save(model.state_dict())``: what a
  checkpoint really occupies, whatever tensor subclasses the model holds.
* ``legacy_quantize_dynamic`` and ``legacy_quantize_per_tensor`` call the deprecated
  ``torch.ao.quantization`` eager API and the deprecated quantized dtypes; they return
  ``None`` once PyTorch removes them, and hand back the warnings they raised (as text)
  so a notebook can print them instead of letting them scroll by.
* ``linear_input_absmax`` calibrates static quantization; ``plot_tradeoff`` draws size,
  accuracy and latency bars. Nothing happens at import.

First written out in notebook 09 ("Shrink and speed up inference with quantization").
"""

from __future__ import annotations

import copy
import importlib
import importlib.metadata
import importlib.util
import io
import logging
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import NamedTuple

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import nn

__all__ = [
    "KNOWN_TORCHAO_IMPORT_MESSAGES",
    "MIN_TORCH_FOR_TORCHAO",
    "TORCHAO_VERSION",
    "LegacyModel",
    "LegacyQuantized",
    "import_torchao",
    "legacy_quantize_dynamic",
    "legacy_quantize_per_tensor",
    "linear_input_absmax",
    "plot_tradeoff",
    "serialized_bytes",
    "torchao_problem",
]

TORCHAO_VERSION = "0.18.0"
"""The torchao release the course is tested with: pinned in pyproject.toml, requirements.lock,
environment.yml and notebook 09's Colab install line."""

MIN_TORCH_FOR_TORCHAO = (2, 11)
"""torchao 0.18 supports torch 2.11 and newer ("drop PyTorch <2.11 support", pytorch/ao#4401);
on an older torch it skips its C++ kernels (its ``__init__`` checks ``min_torch_version``)."""

KNOWN_TORCHAO_IMPORT_MESSAGES: dict[str, re.Pattern[str]] = {
    # torchao/__init__.py tries every bundled _C*.so and logs one line per library that fails
    # to load. torchao 0.18 ships two (_C_mxfp8, _C_cutlass_90a), both linked against
    # PyTorch's CUDA libraries (libc10_cuda.so), so on a CPU-only PyTorch neither loads.
    "torchao": re.compile(r"^Failed to load \S*torchao[/\\]_C\w*\S*\.so"),
    # torch 2.13 logs (not warns) this when torchao registers its KernelPreference enum;
    # it is addressed to torchao's developers and no user code can change it.
    "torch.utils._pytree": re.compile(r"is an Enum subclass and is now natively supported by torch\.compile"),
}


class _DropMatching(logging.Filter):
    """A logging filter that drops the records whose message matches ``pattern``."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def _major_minor(version: str) -> tuple[int, int]:
    """``(2, 13)`` from ``"2.13.0+cpu"`` or ``"2.12.0.dev20260414+cu130"``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return int(match[1]), int(match[2])


def torchao_problem(torch_version: str, torchao_version: str | None) -> str | None:
    """Why this torch and torchao will not run the course's torchao code, or None if they will.

    ``torchao_version`` is None when torchao is not installed.

    >>> torchao_problem("2.13.0+cpu", "0.18.0") is None
    True
    >>> print(torchao_problem("2.13.0", None))
    torchao is not installed: run `pip install torchao==0.18.0` (in a notebook: `%pip install torchao==0.18.0`).
    """
    install = f"pip install torchao=={TORCHAO_VERSION}"
    if torchao_version is None:
        return f"torchao is not installed: run `{install}` (in a notebook: `%{install}`)."
    if _major_minor(torch_version) < MIN_TORCH_FOR_TORCHAO:
        needed = ".".join(map(str, MIN_TORCH_FOR_TORCHAO))
        return (
            f"torch {torch_version} is too old for torchao {TORCHAO_VERSION}, which needs torch >= {needed} "
            f"(with an older torch it skips its C++ kernels). Install torch >= {needed}; the course runs on "
            f"torch 2.11 to 2.15."
        )
    if _major_minor(torchao_version) < _major_minor(TORCHAO_VERSION):
        return (
            f"torchao {torchao_version} is older than the {TORCHAO_VERSION} this course is written for, and its "
            f"quantization API differs: run `{install}` and restart the kernel."
        )
    return None


def _installed_torchao_version() -> str | None:
    """torchao's version from its package metadata; ``"unknown"`` for a source checkout; None if absent."""
    try:
        return importlib.metadata.version("torchao")
    except importlib.metadata.PackageNotFoundError:
        return None if importlib.util.find_spec("torchao") is None else "unknown"


def import_torchao() -> ModuleType:
    """Check torchao against this torch, then import and return it, without its known loader log lines.

    Raises ``ImportError`` with the command that fixes it when ``torchao_problem`` finds one
    (torchao missing or too old, torch too old), before torchao is imported. Only log
    records matching ``KNOWN_TORCHAO_IMPORT_MESSAGES`` on their own loggers are dropped, and
    only while the import runs; every other message and every Python warning
    (``DeprecationWarning`` included) still reaches the output.
    """
    installed = _installed_torchao_version()
    if installed != "unknown":  # a source checkout has no version to check
        problem = torchao_problem(torch.__version__, installed)
        if problem:
            raise ImportError(problem)
    if "torchao" in sys.modules:
        return sys.modules["torchao"]
    filters = []
    for logger_name, pattern in KNOWN_TORCHAO_IMPORT_MESSAGES.items():
        logger, drop = logging.getLogger(logger_name), _DropMatching(pattern)
        logger.addFilter(drop)
        filters.append((logger, drop))
    try:
        return importlib.import_module("torchao")
    finally:
        for logger, drop in filters:
            logger.removeFilter(drop)


def serialized_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())``, written to memory, not to disk.

    >>> serialized_bytes(nn.Linear(256, 256)) > 256 * 256 * 4
    True
    """
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def _first_lines(caught: Iterable[warnings.WarningMessage]) -> tuple[str, ...]:
    """The first line of each distinct warning's message, in order of appearance."""
    lines: dict[str, None] = {}
    for warning in caught:
        lines[str(warning.message).strip().splitlines()[0].strip()] = None
    return tuple(lines)


class LegacyModel(NamedTuple):
    """What ``legacy_quantize_dynamic`` returns."""

    model: nn.Module | None
    """The quantized copy, or None when this PyTorch no longer has the legacy API."""
    messages: tuple[str, ...]
    """First line of each warning raised while quantizing."""
    reason: str
    """Why ``model`` is None (empty otherwise)."""


def legacy_quantize_dynamic(model: nn.Module) -> LegacyModel:
    """Quantize a copy of ``model``'s ``nn.Linear`` layers with the legacy eager API.

    Calls ``torch.ao.quantization.quantize_dynamic(copy, {nn.Linear}, dtype=torch.qint8)``
    (``torch.quantization.quantize_dynamic`` is an older alias of the same function).
    The API is deprecated; once it is removed this returns ``model=None`` and the reason,
    so a notebook keeps running. The deprecation warnings it raises are recorded and
    returned, for the caller to print.
    """
    try:
        from torch.ao.quantization import quantize_dynamic

        qint8 = torch.qint8
    except (ImportError, AttributeError) as error:
        return LegacyModel(None, (), f"torch {torch.__version__} has no legacy eager quantization ({error})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantized = quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=qint8)
    return LegacyModel(quantized, _first_lines(caught), "")


class LegacyQuantized(NamedTuple):
    """What ``legacy_quantize_per_tensor`` returns."""

    int_repr: torch.Tensor
    """The stored integers as a plain ``torch.uint8`` or ``torch.int8`` tensor."""
    dequantized: torch.Tensor
    """``(int_repr - zero_point) * scale`` as computed by PyTorch, float32."""
    messages: tuple[str, ...]
    """First line of each warning raised (PyTorch warns once per process)."""


def legacy_quantize_per_tensor(
    x: torch.Tensor, scale: float, zero_point: int, dtype: torch.dtype
) -> LegacyQuantized | None:
    """``torch.quantize_per_tensor`` as plain tensors, or None once PyTorch removes it.

    ``dtype`` is the plain integer type (``torch.uint8`` or ``torch.int8``); it is mapped
    to the deprecated quantized dtype (``quint8``, ``qint8``) the legacy function needs.
    Torch 2.13 deprecates quantized dtypes (pytorch/pytorch#184982); the warning it
    raises is returned in ``messages`` rather than printed.
    """
    quantized_dtype = {torch.uint8: "quint8", torch.int8: "qint8"}.get(dtype)
    if quantized_dtype is None:
        raise ValueError(f"dtype must be torch.uint8 or torch.int8, got {dtype}")
    quantize = getattr(torch, "quantize_per_tensor", None)
    legacy_dtype = getattr(torch, quantized_dtype, None)
    if quantize is None or legacy_dtype is None:
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantized = quantize(x, scale, zero_point, legacy_dtype)
        result = LegacyQuantized(quantized.int_repr(), quantized.dequantize(), ())
    return result._replace(messages=_first_lines(caught))


@torch.inference_mode()
def linear_input_absmax(model: nn.Module, batches: Iterable[torch.Tensor]) -> dict[str, float]:
    """Largest absolute input each ``nn.Linear`` of ``model`` sees over ``batches``.

    This is the calibration step of static quantization: run representative data
    through the float model and record each layer's input range. Keys are the layers'
    names in ``model.named_modules()``.

    >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    >>> sorted(linear_input_absmax(net, [torch.ones(3, 2)]))
    ['0', '2']
    """
    absmax: dict[str, float] = {}

    def record(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            absmax[name] = max(absmax.get(name, 0.0), inputs[0].detach().abs().max().item())

        return hook

    handles = [
        module.register_forward_pre_hook(record(name))
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
    ]
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            model(batch)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return absmax


def plot_tradeoff(
    size_bytes: Mapping[str, float],
    accuracy: Mapping[str, float],
    latency_s: Mapping[str, float],
    *,
    title: str = "",
) -> tuple[Figure, list[Axes]]:
    """Three panels of horizontal bars: size (KiB), accuracy (%) and latency (ms) per variant.

    All three mappings share their keys (the variants), drawn in the order of ``size_bytes``.
    """
    import matplotlib.pyplot as plt

    names = list(size_bytes)
    panels = [
        ("size (KiB), smaller is better", [size_bytes[n] / 1024 for n in names], "{:.0f}"),
        ("test accuracy (%)", [100 * accuracy[n] for n in names], "{:.1f}"),
        ("latency (ms), smaller is better", [1e3 * latency_s[n] for n in names], "{:.3g}"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(11, 0.9 + 0.45 * len(names)), sharey=True, layout="constrained")
    colors = [f"C{i}" for i in range(len(names))]
    for ax, (label, values, fmt) in zip(axes, panels, strict=True):
        bars = ax.barh(names, values, color=colors)
        ax.bar_label(bars, labels=[fmt.format(v) for v in values], padding=3)
        ax.set_xlabel(label)
        ax.margins(x=0.25)
    axes[0].invert_yaxis()
    if title:
        fig.suptitle(title)
    return fig, list(axes)
