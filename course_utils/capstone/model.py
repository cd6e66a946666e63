"""The capstone's model: ``CapstoneNet``, its GELU written out by hand, and ``make_model(task)``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.capstone.task import NUM_CLASSES, NUM_PIXELS, CapstoneTask

__all__ = ["CapstoneNet", "gelu_by_hand", "make_model", "unwrap_compiled"]


def gelu_by_hand(x: torch.Tensor) -> torch.Tensor:
    """GELU (tanh approximation) as a chain of separate elementwise operators (notebook 10)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class CapstoneNet(nn.Module):
    """64 -> hidden -> hidden -> 10 with tanh-GELU, written out by hand unless ``fused_gelu``."""

    def __init__(self, hidden: int = 128, *, fused_gelu: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(NUM_PIXELS, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, NUM_CLASSES)
        self.fused_gelu = fused_gelu

    def act(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh") if self.fused_gelu else gelu_by_hand(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


def make_model(task: CapstoneTask, *, fused_gelu: bool = False) -> CapstoneNet:
    """The task's model on the CPU, initialised from ``task.seed`` (the global RNG is left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(task.seed)
        return CapstoneNet(task.hidden, fused_gelu=fused_gelu)


def unwrap_compiled(model: nn.Module) -> nn.Module:
    """The module ``torch.compile`` wrapped (its ``_orig_mod``), or the model itself."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model
