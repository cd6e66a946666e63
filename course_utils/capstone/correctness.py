"""Whether two training runs are the same training: ``check_same_training`` and its tolerances.

The grader's referee calls ``check_same_training`` on every result it receives;
``evaluate`` measures any trained model the same way, whatever trained it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.capstone.model import CapstoneNet, unwrap_compiled
from course_utils.capstone.task import CapstoneTask, standardize_image, stored_digits

__all__ = [
    "FINAL_LOSS_TOLERANCE",
    "STEP_LOSS_TOLERANCE",
    "TEST_ACCURACY_TOLERANCE",
    "Agreement",
    "check_same_training",
    "evaluate",
]

STEP_LOSS_TOLERANCE = 0.1
"""Largest allowed difference between the two runs' training losses at any step."""
FINAL_LOSS_TOLERANCE = 0.05
"""Largest allowed difference of the trained models' loss on the whole training subset."""
TEST_ACCURACY_TOLERANCE = 0.02
"""Largest allowed difference of the trained models' test accuracy (9 of the 449 test images)."""


@lru_cache(maxsize=8)
def _standardized(task: CapstoneTask) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The task's training images and the test set, standardized image by image (the slow, obviously right way)."""
    pixels, labels = task.data()
    _, _, test_pixels, test_labels = stored_digits()
    train = torch.stack([standardize_image(p) for p in pixels])
    test = torch.stack([standardize_image(p) for p in test_pixels])
    return train, labels, test, test_labels


@torch.no_grad()
def evaluate(model: nn.Module, task: CapstoneTask) -> tuple[float, float]:
    """``(training loss, test accuracy)`` of ``model``'s weights, computed in float32 on the CPU.

    The weights are copied into a fresh ``CapstoneNet`` (fused GELU), so every model is
    measured the same way, whatever device, dtype or wrapper it was trained with.
    """
    state = {name: value.detach().float().cpu() for name, value in unwrap_compiled(model).named_parameters()}
    probe = CapstoneNet(task.hidden, fused_gelu=True)
    probe.load_state_dict(state)
    X, y, X_test, y_test = _standardized(task)
    loss = F.cross_entropy(probe(X), y).item()
    accuracy = (probe(X_test).argmax(dim=1) == y_test).float().mean().item()
    return loss, accuracy


def _check_result(result: object, task: CapstoneTask, reference: nn.Module, who: str) -> torch.Tensor:
    """Type, parameter shapes and loss-curve shape of ``result``; returns its losses as float32 on the CPU."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise AssertionError(f"{who} should return a tuple (model, losses), got {type(result).__name__}")
    model, losses = result
    if not isinstance(model, nn.Module):
        raise AssertionError(f"{who}: the first element should be the trained nn.Module, got {type(model).__name__}")
    expected = {name: tuple(p.shape) for name, p in unwrap_compiled(reference).named_parameters()}
    actual = {name: tuple(p.shape) for name, p in unwrap_compiled(model).named_parameters()}
    if actual != expected:
        raise AssertionError(
            f"{who}: the model's parameters should be named and shaped as make_model(task)'s, {expected}, got {actual}"
        )
    if type(losses) is not torch.Tensor:
        raise AssertionError(
            f"{who}: the second element should be a torch.Tensor of losses, got {type(losses).__name__}"
        )
    if losses.shape != (task.steps,) or not losses.is_floating_point():
        raise AssertionError(
            f"{who}: losses should be a floating-point tensor of shape ({task.steps},), one per step, "
            f"got {losses.dtype} of shape {tuple(losses.shape)}"
        )
    losses = losses.detach().float().cpu()
    if not torch.isfinite(losses).all():
        raise AssertionError(f"{who}: some losses are not finite")
    return losses


@dataclass(frozen=True)
class Agreement:
    """How closely two training runs agree: the differences the tolerances bound."""

    max_step_loss_diff: float
    train_loss: tuple[float, float]
    """(reference, yours): loss of the trained model on the training subset."""
    test_accuracy: tuple[float, float]
    """(reference, yours)."""

    def __str__(self) -> str:
        return (
            f"trained model: loss {self.train_loss[1]:.4f} (baseline {self.train_loss[0]:.4f}), test accuracy "
            f"{self.test_accuracy[1]:.1%} (baseline {self.test_accuracy[0]:.1%}); per-step losses within "
            f"{self.max_step_loss_diff:.2g} of the baseline's"
        )


def check_same_training(
    result: object, reference: tuple[nn.Module, torch.Tensor], task: CapstoneTask, who: str = "fast_train"
) -> Agreement:
    """Fail unless ``result`` is the same training as ``reference`` (``slow_train``'s) on ``task``.

    Same parameter names and shapes; one loss per step, each within ``STEP_LOSS_TOLERANCE``
    of the reference's; a trained model whose training loss and test accuracy are within
    ``FINAL_LOSS_TOLERANCE`` and ``TEST_ACCURACY_TOLERANCE`` of the reference's. The
    tolerances admit what does not change the training (bf16 autocast, TF32, summation
    order, fused kernels) and reject a different number of steps, other batches, a missing
    step or a clearly different learning rate.
    """
    ref_model, ref_losses = reference
    losses = _check_result(result, task, ref_model, who)
    ref_losses = ref_losses.detach().float().cpu()
    step_diff = (losses - ref_losses).abs()
    worst = int(step_diff.argmax())
    if step_diff[worst] > STEP_LOSS_TOLERANCE:
        raise AssertionError(
            f"{who}: the loss at step {worst} is {losses[worst]:.4f}, the baseline's {ref_losses[worst]:.4f} "
            f"(allowed difference {STEP_LOSS_TOLERANCE}): train on task.data()'s images, in task.batch_order()'s "
            f"batches, in order, with Adam at the task's lr, one optimizer step per batch"
        )
    ref_loss, ref_accuracy = evaluate(ref_model, task)
    loss, accuracy = evaluate(result[0], task)  # type: ignore[index]
    if abs(loss - ref_loss) > FINAL_LOSS_TOLERANCE:
        raise AssertionError(
            f"{who}: the trained model's training loss is {loss:.4f}, the baseline's {ref_loss:.4f} "
            f"(allowed difference {FINAL_LOSS_TOLERANCE})"
        )
    if abs(accuracy - ref_accuracy) > TEST_ACCURACY_TOLERANCE:
        raise AssertionError(
            f"{who}: the trained model's test accuracy is {accuracy:.1%}, the baseline's {ref_accuracy:.1%} "
            f"(allowed difference {TEST_ACCURACY_TOLERANCE:.0%})"
        )
    return Agreement(float(step_diff.max()), (ref_loss, loss), (ref_accuracy, accuracy))
