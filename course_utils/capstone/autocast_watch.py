"""What exercise 2's test watches: the autocast regions a training step enters, and on which device type.

``watch_autocast`` records the ``torch.autocast`` regions a block enters and whether its
backward passes and optimizer steps ran inside one; ``as_if_on_cuda`` makes CPU tensors
that report a CUDA device, to see which device type a step asks autocast for.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

__all__ = ["AutocastUse", "as_if_on_cuda", "watch_autocast"]


@dataclass
class AutocastUse:
    """What a block did with autocast (see ``watch_autocast``)."""

    regions: list[tuple[str, torch.dtype | None, bool]] = field(default_factory=list)
    """``(device type, dtype, enabled)`` of each ``torch.autocast`` region entered."""
    backward_under_autocast: list[bool] = field(default_factory=list)
    """For each backward call, whether an autocast region was active on the CPU then."""
    step_under_autocast: list[bool] = field(default_factory=list)
    """For each optimizer step, whether an autocast region was active on the CPU then."""


@contextmanager
def watch_autocast() -> Iterator[AutocastUse]:
    """Record, while the block runs, the autocast regions it enters and whether backward and steps ran inside one.

    Entering ``torch.autocast`` (by any name: the class's ``__enter__`` is watched),
    ``torch.autograd.backward`` (which ``Tensor.backward`` calls) and every optimizer step
    (a global step pre-hook) are recorded; everything is put back when the block ends.

    >>> with watch_autocast() as use, torch.autocast("cpu", dtype=torch.bfloat16):
    ...     pass
    >>> use.regions
    [('cpu', torch.bfloat16, True)]
    """
    from torch.amp.autocast_mode import autocast
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    use = AutocastUse()
    enter, backward = autocast.__enter__, torch.autograd.backward

    def recording_enter(self: autocast) -> autocast:
        use.regions.append((self.device, self.fast_dtype, bool(self._enabled)))
        return enter(self)

    def recording_backward(*args, **kwargs) -> None:
        use.backward_under_autocast.append(torch.is_autocast_enabled("cpu"))
        return backward(*args, **kwargs)

    def on_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        use.step_under_autocast.append(torch.is_autocast_enabled("cpu"))

    handle = register_optimizer_step_pre_hook(on_step)
    autocast.__enter__ = recording_enter  # type: ignore[method-assign]
    torch.autograd.backward = recording_backward
    try:
        yield use
    finally:
        autocast.__enter__ = enter  # type: ignore[method-assign]
        torch.autograd.backward = backward
        handle.remove()


class _ReportsCuda(torch.Tensor):
    """A CPU tensor whose ``device`` says ``cuda``: what an answer reads from it shows which device it asks for."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda")


def as_if_on_cuda(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (on the CPU) reporting ``device.type == "cuda"``, for tests that need a second device type.

    Computation still happens on the CPU; ``torch.autocast("cuda")`` on a machine without
    CUDA warns and does nothing, which is all a test of the device type needs.
    """
    return tensor.as_subclass(_ReportsCuda)
