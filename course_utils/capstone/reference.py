"""The course's reference solution of notebook 12's exercise 3, the yardstick of its speed grade: ``reference_train``.

Contract: ``reference_train(task, device)`` is notebook 12's own solution of exercise 3
(its ``fast_train``, the same statements; ``tests/course_utils/capstone/test_capstone.py`` compares them), and
``slow_train`` without any of its mistakes. It is not an answer to submit: it is what the
grader and ``grade_fast_train`` time beside the baseline and your answer, in the same
rounds, so that the speed tiers are shares of what the reference gains *on the machine
that measures* (``course_utils.capstone.scoring``), whatever that machine is. The course
itself is public, solutions included; a ``fast_train`` that runs this function is refused
(``own_work``), since it would be graded as the reference against itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.capstone.model import make_model
from course_utils.capstone.task import STD_EPS, CapstoneTask, TrainFn

__all__ = ["calls", "own_work", "reference_train"]

_CALLS = [0]


def calls() -> int:
    """How many times ``reference_train`` has started in this process (the grader compares before and after)."""
    return _CALLS[0]


def reference_train(task: CapstoneTask, device: torch.device | str = "cpu") -> tuple[nn.Module, torch.Tensor]:
    """Notebook 12's solution of exercise 3: ``slow_train``'s training without its mistakes; ``(model, losses)``."""
    _CALLS[0] += 1
    device = torch.device(device)
    model = make_model(task, fused_gelu=True).to(device)  # one GELU operator (notebook 10)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)  # one fused update (notebook 11)
    pixels, labels = task.data()
    x = pixels.float() / 16.0  # every image standardised at once (exercise 1), kept on the device
    images = ((x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + STD_EPS)).to(device)
    labels = labels.to(device)
    order = task.batch_order().to(device)
    losses = torch.empty(task.steps, device=device)  # filled on the device, read by the caller
    for step, batch in enumerate(order):  # one whole batch per step, float32 (section 5)
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()  # sets the gradients to None
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()  # no .item(): nothing waits for the device
    return model, losses


def own_work(fast_train: TrainFn) -> TrainFn:
    """``fast_train``, refused (``AssertionError``) where a call of it runs ``reference_train``."""

    def checked(task: CapstoneTask, device: torch.device) -> tuple[nn.Module, torch.Tensor]:
        before = calls()
        result = fast_train(task, device)
        if calls() != before:
            raise AssertionError(
                "fast_train runs the course's reference_train: that is the yardstick your answer is timed "
                "against, not an answer; write the loop yourself (exercises 1 and 2 hold its parts)"
            )
        return result

    return checked
