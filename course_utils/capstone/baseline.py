"""The baseline: ``slow_train``, a correct training loop that makes every mistake the course warns about.

Notebook 12 prints its source, and the grader times learners' ``fast_train`` against it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.data import DataLoader

from course_utils.capstone.model import make_model
from course_utils.capstone.task import CapstoneTask, DigitsPixels

__all__ = ["slow_train"]


def slow_train(task: CapstoneTask, device: torch.device | str = "cpu") -> tuple[nn.Module, torch.Tensor]:
    """Train ``make_model(task)`` on ``task``: correct, and slow in every way the course warned about."""
    device = torch.device(device)
    model = make_model(task).to(device)  # GELU written out by hand, float32 throughout
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)  # one parameter at a time on the CPU
    order = task.batch_order().flatten().tolist()
    loader = DataLoader(DigitsPixels(*task.data()), batch_size=1, sampler=order)  # one image per fetch
    samples = iter(loader)
    losses = []
    for _ in range(task.steps):
        with record_function("zero_grad"):
            for parameter in model.parameters():
                parameter.grad = torch.zeros_like(parameter)  # zeros written, then added to
        loss = torch.zeros((), device=device)
        for _ in range(task.batch_size):  # one sample at a time
            with record_function("data"):
                image, label = next(samples)  # transformed on the main thread, now
                image, label = image.to(device), label.to(device)
            with record_function("forward"):
                loss = loss + F.cross_entropy(model(image), label) / task.batch_size
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
        with record_function("logging"):
            losses.append(loss.item())  # waits for the device, every step
    return model, torch.tensor(losses)
