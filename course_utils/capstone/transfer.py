"""A training result on its way from a timed-round process to the grader: plain float32 arrays, checked on arrival.

``result_arrays`` runs in the timed-round process (``round_process``), inside the timed
region; ``result_from_arrays`` runs in the grader, which rebuilds a model and losses from
the bytes alone, so nothing of the learner's objects reaches it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils.capstone.model import CapstoneNet, unwrap_compiled
from course_utils.capstone.task import CapstoneTask

__all__ = ["Arrays", "result_arrays", "result_from_arrays"]

Arrays = dict[str, tuple[str, tuple[int, ...], bytes]]
"""``name -> (dtype, shape, raw bytes)``: a training result as it crosses to the grader."""


def _expected_parameters(task: CapstoneTask) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        return {name: tuple(p.shape) for name, p in CapstoneNet(task.hidden).named_parameters()}


def _plain(value: object, what: str) -> torch.Tensor:
    """``value`` detached, float32, contiguous, on the CPU, and a plain ``torch.Tensor`` (no subclass)."""
    if not isinstance(value, torch.Tensor):
        raise AssertionError(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    plain = value.detach().to("cpu", torch.float32).contiguous()
    if type(plain) is not torch.Tensor:
        raise AssertionError(f"{what} should be a plain torch.Tensor, got a {type(plain).__name__}")
    return plain


def result_arrays(result: object, task: CapstoneTask) -> Arrays:
    """A ``(model, losses)`` result as the grader receives it: every weight and the losses, materialised.

    Runs in the timed-round process, inside the timed region: a result whose training has
    not happened yet (a lazy wrapper) is trained here, on the clock. The grader checks the
    bytes again (``result_from_arrays``); nothing of this process's objects reaches it.
    """
    if not isinstance(result, tuple) or len(result) != 2:
        raise AssertionError(f"fast_train should return a tuple (model, losses), got {type(result).__name__}")
    model, losses = result
    if not isinstance(model, nn.Module):
        raise AssertionError(f"the first element should be the trained nn.Module, got {type(model).__name__}")
    arrays: Arrays = {}
    expected = _expected_parameters(task)
    for name, parameter in unwrap_compiled(model).named_parameters():
        if name in expected:
            tensor = _plain(parameter, f"parameter {name}")
            arrays[f"param:{name}"] = ("float32", tuple(tensor.shape), tensor.numpy().tobytes())
    tensor = _plain(losses, "losses")
    arrays["losses"] = ("float32", tuple(tensor.shape), tensor.numpy().tobytes())
    return arrays


def result_from_arrays(arrays: Arrays, task: CapstoneTask, who: str = "fast_train") -> tuple[CapstoneNet, torch.Tensor]:
    """The grader's side of ``result_arrays``: names, dtypes, shapes and sizes checked, then a model and losses."""
    expected = {f"param:{name}": shape for name, shape in _expected_parameters(task).items()}
    expected["losses"] = (task.steps,)
    if set(arrays) != set(expected):
        missing, extra = sorted(set(expected) - set(arrays)), sorted(set(arrays) - set(expected))
        raise AssertionError(
            f"{who}: the model's parameters should be make_model(task)'s (missing {missing}, extra {extra})"
        )
    tensors = {}
    for name, shape in expected.items():
        dtype, got_shape, data = arrays[name]
        if dtype != "float32" or tuple(got_shape) != shape or len(data) != 4 * math.prod(shape):
            raise AssertionError(
                f"{who}: {name.removeprefix('param:')} should have shape {shape}, got {tuple(got_shape)}"
            )
        tensors[name] = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
    model = CapstoneNet(task.hidden, fused_gelu=True)
    model.load_state_dict({name.removeprefix("param:"): t for name, t in tensors.items() if name != "losses"})
    return model, tensors["losses"]
