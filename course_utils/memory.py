"""Count bytes: tensors, models, optimizer state, activations saved for backward.

Contract: byte counts are exact and device-independent (``numel * element_size``),
except the peaks: ``cuda_peak_bytes`` asks the CUDA caching allocator, and
``peak_extra_bytes`` asks it on CUDA or reads ``torch.profiler``'s memory events on the
CPU. Tensors that share storage are counted once. First written out in notebook 02
("Measure and reduce memory").
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

__all__ = [
    "SavedTensorsCounter",
    "buffer_bytes",
    "cuda_peak_bytes",
    "format_bytes",
    "gradient_bytes",
    "optimizer_state_bytes",
    "parameter_bytes",
    "peak_extra_bytes",
    "saved_activation_bytes",
    "tensor_bytes",
    "unique_bytes",
]


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes of the elements a tensor views: ``numel() * element_size()``."""
    return tensor.numel() * tensor.element_size()


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    return (str(tensor.device), tensor.untyped_storage().data_ptr())


def unique_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the storages behind ``tensors``, each storage counted once."""
    seen: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        seen[_storage_key(tensor)] = tensor.untyped_storage().nbytes()
    return sum(seen.values())


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of a model's parameters (shared parameters counted once)."""
    return unique_bytes(model.parameters())


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of the ``.grad`` tensors a model currently holds."""
    return unique_bytes(p.grad for p in model.parameters() if p.grad is not None)


def buffer_bytes(model: nn.Module) -> int:
    """Bytes of a model's buffers (BatchNorm running statistics, for example)."""
    return unique_bytes(model.buffers())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors in an optimizer's state (Adam: two per parameter).

    The state exists only after the first ``step()``.
    """
    tensors = [
        value for state in optimizer.state.values() for value in state.values() if isinstance(value, torch.Tensor)
    ]
    return unique_bytes(tensors)


class SavedTensorsCounter:
    """Context manager that records every tensor autograd saves for backward.

    Inside the ``with`` block, forward passes run as usual; afterwards ``total_bytes``
    holds the bytes of the distinct storages saved, and ``activation_bytes`` excludes
    the ones that belong to ``exclude`` (typically the model's parameters, which exist
    anyway). Built on ``torch.autograd.graph.saved_tensors_hooks``.

    Storages are identified by address, so run ``backward()`` after the block: memory
    freed by a backward pass inside it can be reused at the same address and undercounted.

    >>> layer = nn.Linear(4, 3)
    >>> with SavedTensorsCounter(exclude=layer.parameters()) as counter:
    ...     out = layer(torch.randn(2, 4, requires_grad=True)).relu()
    >>> counter.activation_bytes  # the input (2x4) and relu's output (2x3), float32
    56
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        self._excluded = {_storage_key(t) for t in exclude}
        self._storages: dict[tuple[str, int], int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self._storages[_storage_key(tensor)] = tensor.untyped_storage().nbytes()
        return tensor

    @staticmethod
    def _unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def __enter__(self) -> SavedTensorsCounter:
        self._hooks.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._hooks.__exit__(exc_type, exc, traceback)

    @property
    def total_bytes(self) -> int:
        """Bytes of all distinct storages saved for backward."""
        return sum(self._storages.values())

    @property
    def activation_bytes(self) -> int:
        """``total_bytes`` minus the storages of the excluded tensors."""
        return sum(n for key, n in self._storages.items() if key not in self._excluded)


def saved_activation_bytes(model: nn.Module, *inputs: torch.Tensor) -> int:
    """Bytes autograd saves for backward in ``model(*inputs)``, parameters excluded."""
    with SavedTensorsCounter(exclude=model.parameters()) as counter:
        model(*inputs)
    return counter.activation_bytes


def cuda_peak_bytes(fn: Callable[[], object], device: torch.device | str = "cuda") -> int:
    """Peak bytes allocated by the CUDA caching allocator while ``fn()`` runs.

    Raises ``RuntimeError`` on a non-CUDA device: the CPU allocator keeps no such
    statistics, so use the exact counts above there.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise RuntimeError(f"cuda_peak_bytes needs a CUDA device, got {device}")
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


_CPU_DEVICE_TYPE = 0
"""``c10::DeviceType::CPU``, the ``"Device Type"`` of CPU memory events in a profiler trace."""


def peak_extra_bytes(fn: Callable[[], object], device: torch.device | str) -> int:
    """The most bytes ``fn()`` has allocated on ``device`` at one time, beyond what was there before.

    The peak of a training step, not the sum of its parts: it includes temporaries that
    no tensor you hold points to (optimizer intermediates, the gradients autograd passes
    between operations, workspaces), and it excludes what was freed before the peak.

    - CUDA: the caching allocator's counters, ``max_memory_allocated`` after
      ``reset_peak_memory_stats`` minus ``memory_allocated`` before (each block counted
      at its rounded size, a multiple of 512 bytes).
    - CPU: the allocator keeps no counters, so ``fn`` runs under
      ``torch.profiler.profile(profile_memory=True)`` and the CPU allocations (+) and
      frees (-) it records are added up in time order. A free of memory that was
      allocated while no profiler ran is not recorded (its size was never seen; PyTorch
      logs a warning), so do not free such tensors inside ``fn``: call ``zero_grad()``
      before it, for example, not inside it.

    Other devices raise ``ValueError``.

    >>> peak_extra_bytes(lambda: (torch.empty(1000, dtype=torch.uint8), torch.empty(24, dtype=torch.uint8)), "cpu")
    1024
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        return cuda_peak_bytes(fn, device) - start
    if device.type == "cpu":
        return _cpu_peak_extra_bytes(fn)
    raise ValueError(f"peak_extra_bytes measures on cpu or cuda, not {device.type}: there are no peak counters there")


def _cpu_peak_extra_bytes(fn: Callable[[], object]) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    memory = [
        event
        for event in events
        if event.get("name") == "[memory]" and event.get("args", {}).get("Device Type") == _CPU_DEVICE_TYPE
    ]
    memory.sort(key=lambda event: event["ts"])  # stable: ties keep the trace's order
    return max(itertools.accumulate((event["args"]["Bytes"] for event in memory), initial=0))


def format_bytes(num_bytes: float) -> str:
    """Format a byte count with binary units.

    >>> format_bytes(3 * 1024**2)
    '3.00 MiB'
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num_bytes) < 1024 or unit == "GiB":
            return f"{num_bytes:.0f} B" if unit == "B" else f"{num_bytes:.2f} {unit}"
        num_bytes /= 1024
    raise AssertionError("unreachable")
