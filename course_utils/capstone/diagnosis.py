"""Counting what a training function does: ``diagnose`` and the mistakes it names.

``diagnose(train, task, device)`` runs ``train`` once with counters installed (optimizer
steps, model calls, gradients zeroed by writing zeros, images transformed one at a time,
DataLoader worker pools, every PyTorch call from Python, host syncs) and returns a
``Diagnosis``, whose ``mistakes()`` name what is still slow, each with the notebook that
shows the fix. ``TorchCallCounter`` is the ``TorchFunctionMode`` that counts the calls.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as dataloader_module

from course_utils.capstone.task import GRADED_TASK, NUM_PIXELS, CapstoneTask, DigitsPixels, TrainFn, standardize_image
from course_utils.device import synchronize

__all__ = ["Diagnosis", "TorchCallCounter", "diagnose"]

_HOST_READS = frozenset(
    {"item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__", "__complex__",
     "__repr__", "__format__"}
)  # fmt: skip
"""Tensor methods that bring a value to Python; on a GPU each one waits for the device."""
_UNFUSED_GELU_MARKERS = frozenset({"tanh", "tanh_"})
"""A tanh call in this model's forward means the GELU is written out by hand."""
_STANDARDIZE_CODE = standardize_image.__code__
"""Each ``std`` called from this code is one image standardised on its own."""


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DISPATCH_FILES = frozenset(
    os.path.join(os.path.dirname(torch.__file__), name) for name in ("overrides.py", "_tensor.py")
)
"""Where ``Tensor.__repr__`` and friends hand a call to the mode: skipped to find who made it."""


def _called_from_torch(frame: types.FrameType | None) -> bool:
    """Whether the code that made this call lives inside the torch package (not yours)."""
    while frame is not None and frame.f_code.co_filename in _DISPATCH_FILES:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR)


class TorchCallCounter(TorchFunctionMode):
    """Counts the PyTorch functions called from Python, by name, and the values your code reads.

    A ``TorchFunctionMode``: inside ``with TorchCallCounter() as counter:`` every call of
    a PyTorch function or tensor method made from Python passes through it. A read
    (``.item()``, ``float()``, ``.tolist()``, ``print``, ...) made inside torch itself is
    not counted in ``reads``: the optimizers read their step counters, which stay on the
    CPU even when training on a GPU.

    >>> with TorchCallCounter() as counter:
    ...     total = torch.ones(3).sum().item()
    >>> counter.calls["sum"], counter.reads
    (1, 1)
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count(getattr(func, "__name__", ""), sys._getframe(1))
        return func(*args, **(kwargs or {}))

    def count(self, name: str, caller: types.FrameType | None) -> None:
        """Count one call of ``name`` made by the code running in ``caller``."""
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in _HOST_READS and not _called_from_torch(caller):
            self.reads += 1


class _DiagnosisCounter(TorchCallCounter):
    """``TorchCallCounter`` that also counts the images ``standardize_image`` transforms, one call each."""

    def __init__(self) -> None:
        super().__init__()
        self.images_standardized = 0

    def count(self, name: str, caller: types.FrameType | None) -> None:
        super().count(name, caller)
        if name == "std" and caller is not None and caller.f_code is _STANDARDIZE_CODE:
            self.images_standardized += 1


@dataclass
class Diagnosis:
    """What one training run did, counted while it ran (see ``diagnose``)."""

    device_type: str
    optimizer_steps: int = 0
    first_layer_calls: int = 0
    """Calls of the model's first ``Linear`` (64 inputs): one per step when the batch goes in at once."""
    backward_into_existing_grads: int = 0
    """Backward passes that found the first layer's ``.grad`` already allocated (zeros written)."""
    items_fetched: int = 0
    """``DigitsPixels`` items fetched (and transformed) one at a time in this process."""
    images_standardized: int = 0
    """Images passed one at a time through ``standardize_image`` in this process (``DigitsPixels`` items included)."""
    worker_pools_started: int = 0
    """DataLoader worker pools started during the run (each one new processes)."""
    worker_processes_started: int = 0
    """Worker processes those pools started."""
    worker_items_fetched: int = 0
    """Items the DataLoader workers fetched one at a time (``dataset[i]`` for every index of a batch)."""
    loader_fetches: int = 0
    """Fetches of DataLoaders without workers that call ``dataset[i]`` per index: one per batch they hand out."""
    loader_items: int = 0
    """Indices those fetches asked for (``batch_size`` each, or 1 without automatic batching)."""
    host_syncs: int = 0
    """On CUDA: synchronising calls the sync debug mode flagged. Elsewhere: tensor values read into Python."""
    torch_calls: dict[str, int] = field(default_factory=dict)
    autocast_used: bool = False
    optimizer_implementation: str = ""
    """How the last optimizer step ran: "fused", "foreach" or "for-loop" (one parameter at a time)."""
    bf16_tensor_cores: bool = False
    """Whether the device is a CUDA GPU of compute capability 8.0 or newer (native bf16 matmuls)."""

    def per_step(self, count: int) -> float:
        return count / max(self.optimizer_steps, 1)

    def mistakes(self) -> list[str]:
        """The mistakes this run still makes, each with the notebook that shows the fix."""
        found = []
        if self.optimizer_steps == 0:
            return ["no torch.optim optimizer step was seen: train with torch.optim.Adam as the baseline does"]
        if self.per_step(self.first_layer_calls) > 1:
            found.append(
                f"per-sample loop: the model ran {self.per_step(self.first_layer_calls):.0f} times per step; "
                "give it the whole batch at once (notebook 03)"
            )
        found += self._data_mistakes()
        if self.per_step(self.host_syncs) >= 1:
            what = (
                "calls the sync debug mode flagged" if self.device_type == "cuda" else "tensor values read into Python"
            )
            found.append(
                f"host syncs: {self.per_step(self.host_syncs):.0f} per step ({what}: .item(), float(), .tolist(), "
                "print, blocking copies); keep the losses on the device and read them once (notebooks 01 and 10)"
            )
        if self.backward_into_existing_grads >= self.optimizer_steps / 2:
            found.append(
                "gradients zeroed by writing zeros (backward found .grad already allocated); "
                "optimizer.zero_grad() sets them to None (notebook 02)"
            )
        tanh_calls = sum(self.torch_calls.get(name, 0) for name in _UNFUSED_GELU_MARKERS)
        if self.per_step(tanh_calls) >= 1:
            found.append(
                "GELU written out as a chain of elementwise operators (tanh, pow, mul, add); "
                "use the fused F.gelu(x, approximate='tanh'): CapstoneNet(fused_gelu=True) (notebooks 10 and 11)"
            )
        if self.optimizer_implementation == "for-loop":
            found.append(
                "the optimizer updates one parameter at a time (the for-loop implementation, the default on the "
                "CPU); ask for fused=True (notebook 11)"
            )
        return found

    def _data_mistakes(self) -> list[str]:
        """How the images reached the model: one at a time (where), and worker pools started by this call."""
        found = []
        whole_set = "standardise the whole set once, in a few whole-tensor operations (exercise 1), and index it"
        if self.worker_pools_started:
            pools = f" in {self.worker_pools_started} pools" if self.worker_pools_started > 1 else ""
            found.append(
                f"a DataLoader worker pool started inside the training function ({self.worker_processes_started} "
                f"new processes{pools} in this one run): every call pays for starting them and sending them the "
                "dataset, and every batch crosses back from another process; the images fit in memory: "
                f"{whole_set} (notebook 03: workers are for data that cannot be prepared up front)"
            )
        if self.per_step(self.worker_items_fetched) >= 1:
            found.append(
                f"images still transformed one at a time, in the DataLoader's workers "
                f"({self.per_step(self.worker_items_fetched):.0f} items per step, each its own dataset[i] call): "
                f"{whole_set} (notebooks 03 and 10)"
            )
        if self.per_step(self.items_fetched) >= 1:
            found.append(
                f"data prepared one image at a time on the main thread ({self.per_step(self.items_fetched):.0f} "
                f"DigitsPixels items per step, {self._how_fetched()}): {whole_set} (notebooks 03 and 10)"
            )
        elif self.per_step(self.images_standardized) >= 1:
            found.append(
                f"each image standardised on its own ({self.images_standardized} standardize_image calls in this "
                f"run, one per image): {whole_set} (notebook 03)"
            )
        return found

    def _how_fetched(self) -> str:
        """How the items reached the main thread, in words: a DataLoader's single items or batches, or by hand."""
        if not self.loader_fetches:
            return "each its own dataset[i] call"
        per_fetch = self.loader_items / self.loader_fetches
        if per_fetch <= 1:
            return "a DataLoader fetching single items"
        return (
            f"a DataLoader handing out batches of {per_fetch:.0f}, which still calls dataset[i] and transforms "
            "each image on its own before stacking them: its batch_size batches the fetch, not the transform"
        )

    def notes(self) -> list[str]:
        """Choices worth measuring that are not mistakes in themselves."""
        if self.bf16_tensor_cores and not self.autocast_used:
            return [
                "autocast is off and this GPU has bf16 Tensor Cores: it pays once the matrix products dominate "
                "the step; measure it for your model (notebook 07)"
            ]
        return []

    def summary(self) -> str:
        calls = sum(self.torch_calls.values())
        started = self.worker_processes_started
        workers = f"; {started} DataLoader worker processes started" if self.worker_pools_started else ""
        return (
            f"{self.optimizer_steps} optimizer steps; per step: {self.per_step(calls):.0f} PyTorch calls from "
            f"Python, {self.per_step(self.first_layer_calls):.0f} model calls, "
            f"{self.per_step(self.items_fetched + self.worker_items_fetched):.0f} items fetched one at a time, "
            f"{self.per_step(self.host_syncs):.1f} host syncs; autocast {'on' if self.autocast_used else 'off'}; "
            f"{self.optimizer_implementation or 'no'} optimizer{workers}"
        )


_FOREACH_DEVICES = frozenset({"cuda", "xpu", "mtia"})
"""Device types on which ``foreach=None`` means foreach (``torch.utils._foreach_utils``)."""


def _implementation(optimizer: torch.optim.Optimizer) -> str:
    """Which implementation ``optimizer.step()`` runs, by the rule of ``torch.optim``'s defaults.

    ``fused=True`` runs one fused kernel; ``foreach=True`` (or ``foreach=None``, the default,
    with every parameter on a CUDA device) runs a few multi-tensor operators; otherwise
    the step loops over the parameters in Python.
    """
    options = optimizer.defaults
    if options.get("fused"):
        return "fused"
    foreach = options.get("foreach")
    if foreach is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        foreach = bool(params) and all(p.device.type in _FOREACH_DEVICES for p in params)
    return "foreach" if foreach else "for-loop"


def _fetches_one_at_a_time(iterator: dataloader_module._BaseDataLoaderIter) -> bool:
    """Whether this DataLoader iterator's fetcher calls ``dataset[i]`` once per index (``_MapDatasetFetcher``)."""
    if iterator._dataset_kind != dataloader_module._DatasetKind.Map:
        return False
    return not (iterator._auto_collation and getattr(iterator._dataset, "__getitems__", None))


@contextmanager
def _watching_dataloaders(diagnosis: Diagnosis) -> Iterator[None]:
    """Count, in this process, the worker pools DataLoaders start, the items they hand their workers, and the fetches
    of those without workers (how many indices each asks ``dataset[i]`` for).

    The indices of every batch are drawn in this process (``_next_index``) and sent to the
    workers, so what the workers will fetch is counted here, whatever start method they use.
    """
    base, pool = dataloader_module._BaseDataLoaderIter, dataloader_module._MultiProcessingDataLoaderIter
    next_index, start_pool = base._next_index, pool.__init__

    def counting_next_index(self: dataloader_module._BaseDataLoaderIter) -> object:
        index = next_index(self)
        if _fetches_one_at_a_time(self):
            items = len(index) if self._auto_collation else 1
            if self._num_workers > 0:
                diagnosis.worker_items_fetched += items
            else:
                diagnosis.loader_fetches += 1
                diagnosis.loader_items += items
        return index

    def counting_start_pool(self: dataloader_module._MultiProcessingDataLoaderIter, loader: DataLoader) -> None:
        diagnosis.worker_pools_started += 1
        diagnosis.worker_processes_started += loader.num_workers
        start_pool(self, loader)

    base._next_index = counting_next_index  # type: ignore[method-assign]
    pool.__init__ = counting_start_pool  # type: ignore[method-assign]
    try:
        yield
    finally:
        base._next_index = next_index  # type: ignore[method-assign]
        pool.__init__ = start_pool  # type: ignore[method-assign]


@contextmanager
def _counting(diagnosis: Diagnosis, device: torch.device) -> Iterator[None]:
    """Install every counter of ``diagnose`` for the duration of the block, then remove them all."""
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    watched: set[int] = set()

    def on_forward(module: nn.Module, args: tuple) -> None:
        if not (isinstance(module, nn.Linear) and module.in_features == NUM_PIXELS):
            return
        diagnosis.first_layer_calls += 1
        if args and isinstance(args[0], torch.Tensor) and torch.is_autocast_enabled(args[0].device.type):
            diagnosis.autocast_used = True
        weight = module.weight
        if id(weight) not in watched and weight.requires_grad:
            watched.add(id(weight))
            stack.callback(weight.register_hook(lambda grad: on_gradient(weight)).remove)

    def on_gradient(weight: torch.Tensor) -> None:
        if weight.grad is not None:
            diagnosis.backward_into_existing_grads += 1

    def on_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        diagnosis.optimizer_steps += 1
        diagnosis.optimizer_implementation = _implementation(optimizer)

    original_getitem = DigitsPixels.__getitem__

    def counting_getitem(self: DigitsPixels, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        diagnosis.items_fetched += 1
        return original_getitem(self, index)

    counter = _DiagnosisCounter()
    with ExitStack() as stack:
        stack.callback(register_module_forward_pre_hook(on_forward).remove)
        stack.callback(register_optimizer_step_post_hook(on_step).remove)
        DigitsPixels.__getitem__ = counting_getitem  # type: ignore[method-assign]
        stack.callback(setattr, DigitsPixels, "__getitem__", original_getitem)
        stack.enter_context(_watching_dataloaders(diagnosis))
        if device.type == "cuda":
            recorded = stack.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")
            stack.callback(torch.cuda.set_sync_debug_mode, torch.cuda.get_sync_debug_mode())  # the learner's
            torch.cuda.set_sync_debug_mode("warn")
        stack.enter_context(counter)
        try:
            yield
        finally:
            diagnosis.torch_calls = dict(counter.calls)
            diagnosis.images_standardized = counter.images_standardized
            if device.type == "cuda":
                diagnosis.host_syncs = sum("synchronizing CUDA operation" in str(w.message) for w in recorded)
            else:
                diagnosis.host_syncs = counter.reads


def diagnose(train: TrainFn, task: CapstoneTask = GRADED_TASK, device: torch.device | str = "cpu") -> Diagnosis:
    """Run ``train(task, device)`` once under counters and return what they saw.

    The counters: optimizer steps (a global ``torch.optim`` step hook); calls of the
    model's first ``Linear`` (a global forward pre-hook); backward passes that found
    that layer's ``.grad`` already allocated (a tensor hook, which runs before the new
    gradient is accumulated); ``DigitsPixels`` items fetched and images passed through
    ``standardize_image`` one at a time in this process; DataLoader worker pools started,
    and the items their workers fetch one at a time (counted where the indices are sent);
    every PyTorch function called from Python (a ``TorchFunctionMode``); and host syncs:
    on CUDA the calls ``torch.cuda.set_sync_debug_mode("warn")`` flags (blocking copies
    between host and device, ``.item()``, stream synchronisation), elsewhere the tensor
    values read into Python (``.item()``, ``float()``, ``.tolist()``, ``print``, ...),
    each of which would wait for a GPU. The run is slower than usual; do not time it.
    """
    device = torch.device(device)
    tensor_cores = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)
    diagnosis = Diagnosis(device_type=device.type, bf16_tensor_cores=tensor_cores)
    with _counting(diagnosis, device):
        train(task, device)
    synchronize(device)
    return diagnosis
