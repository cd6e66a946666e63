"""Notebook 06 (clipping): wrong answers of the issue 22/23 review, each caught by the visible tests."""

from __future__ import annotations

from tests.wrong_answers import Wrong

CLIP_WITHOUT_EPSILON = """
def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.sqrt(sum(g.detach().pow(2).sum() for g in grads))
    coefficient = torch.clamp(max_norm / total_norm, max=1.0)
    for g in grads:
        g.detach().mul_(coefficient)
    return total_norm
"""
CLIP_PYTHON_IF_WITHOUT_EPSILON = """
def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))
    if total_norm > max_norm:
        for g in grads:
            g.mul_(max_norm / total_norm)
    return total_norm
"""
CLIP_EPSILON_INSIDE_THE_ROOT = """
def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads) + 1e-6)
    coefficient = torch.clamp(max_norm / total_norm, max=1.0)
    for g in grads:
        g.mul_(coefficient)
    return total_norm
"""
CLIP_NORM_FLOORED_AT_MAX_NORM = """
def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    coefficient = max_norm / (torch.clamp(total_norm, min=max_norm) + 1e-6)  # below max_norm: not exactly 1
    for g in grads:
        g.mul_(coefficient)
    return total_norm
"""
COEFFICIENT_WITHOUT_EPSILON = """
def clip_coefficient(total_norm, max_norm):
    return torch.clamp(max_norm / total_norm, max=1.0)
"""
COEFFICIENT_OTHER_EPSILON = """
def clip_coefficient(total_norm, max_norm):
    return torch.clamp(max_norm / (total_norm + 1e-8), max=1.0)
"""
COEFFICIENT_WHERE_WITHOUT_EPSILON = """
def clip_coefficient(total_norm, max_norm):
    return torch.where(total_norm > max_norm, max_norm / total_norm, torch.ones_like(total_norm))
"""
AMP_STEP_WITHOUT_UNSCALE = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # still scaled: scaler.step unscales later
    scaler.step(optimizer)
    scaler.update()
    return norm
"""
AMP_STEP_WITHOUT_SCALER_STEP = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return norm
"""
AMP_STEP_RETURNS_CLIPPED_NORM = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    scaler.step(optimizer)
    scaler.update()
    return norm
"""

SMALL_NORM = r"small gradients: total norm 9\.1e-05"
JUST_BELOW = r"just below max_norm=1\.0"
SMALL_COEFFICIENT = r"clip_coefficient\(tensor\(0\.001, dtype=torch\.float64\), 0\.0005\) has the right shape"
AMP_STEP_SCALED_NORM = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    scaled = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled
"""
EX1, EX2, EX3 = "ex1_clip_global_norm", "ex2_clip_coefficient", "ex3_clipped_amp_step"

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
CLIP_BODY = """
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
"""

CLIP_REBINDS = f"""
def clip_global_norm_(parameters, max_norm):
    parameters = [p for p in parameters if p.grad is not None]
    {CLIP_BODY.strip()}
    for p in parameters:
        p.grad = p.grad * coefficient
    return total_norm
"""

CLIP_NEW_MEMORY = f"""
def clip_global_norm_(parameters, max_norm):
    parameters = [p for p in parameters if p.grad is not None]
    {CLIP_BODY.strip()}
    for p in parameters:
        p.grad.data = p.grad.data * coefficient
    return total_norm
"""

CLIP_WITH_ALIAS = """
from torch.nn.utils import clip_grad_norm_

def clip_global_norm_(parameters, max_norm):
    return clip_grad_norm_(parameters, max_norm)
"""

CLIP_WITH_TOTAL_NORM = """
from torch.nn.utils import get_total_norm as norm_of

def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = norm_of(grads)
    for g in grads:
        g.mul_(torch.clamp(max_norm / (total_norm + 1e-6), max=1.0))
    return total_norm
"""

COEFFICIENT_WITH_MIN = """
def clip_coefficient(total_norm, max_norm):
    return min(1.0, max_norm / (total_norm + 1e-6))
"""

COEFFICIENT_WITH_ITEM = """
def clip_coefficient(total_norm, max_norm):
    return torch.tensor(min(1.0, max_norm / (total_norm.item() + 1e-6)), dtype=total_norm.dtype)
"""

COEFFICIENT_UNCAPPED = """
def clip_coefficient(total_norm, max_norm):
    return max_norm / (total_norm + 1e-6)
"""

CLIP_BEFORE_UNSCALE = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return norm
"""

CLIP_TWO_PASSES = """
def clip_global_norm_(parameters, max_norm):
    total_norm = torch.sqrt(sum(p.grad.detach().pow(2).sum() for p in parameters if p.grad is not None))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for p in parameters:  # a generator is already used up here
        if p.grad is not None:
            p.grad.detach().mul_(coefficient)
    return total_norm
"""

CLIP_PYTHON_FLOAT_NORM = """
import math

def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.tensor(math.sqrt(sum(float(g.pow(2).sum()) for g in grads)))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(coefficient)
    return total_norm
"""

CLIP_FILLS_ZEROS = """
def clip_global_norm_(parameters, max_norm):
    parameters = list(parameters)
    for p in parameters:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    total_norm = torch.sqrt(sum(p.grad.detach().pow(2).sum() for p in parameters))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for p in parameters:
        p.grad.detach().mul_(coefficient)
    return total_norm
"""

COEFFICIENT_WHERE_FLOAT32 = """
def clip_coefficient(total_norm, max_norm):
    return torch.where(total_norm > max_norm, max_norm / (total_norm + 1e-6), torch.tensor(1.0))
"""

AMP_STEP_ONLY_IF_FINITE = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(norm):  # skips scaler.update() too, so the scale never backs off
        scaler.step(optimizer)
        scaler.update()
    return norm
"""


WRONG = [
    Wrong("06", EX1, "leaves out the 1e-6", CLIP_WITHOUT_EPSILON, SMALL_NORM, False),
    Wrong("06", EX1, "Python if, max_norm / norm", CLIP_PYTHON_IF_WITHOUT_EPSILON, SMALL_NORM, False),
    Wrong("06", EX1, "adds the 1e-6 inside the square root", CLIP_EPSILON_INSIDE_THE_ROOT, SMALL_NORM, False),
    Wrong("06", EX1, "floors the norm at max_norm", CLIP_NORM_FLOORED_AT_MAX_NORM, JUST_BELOW, False),
    Wrong("06", EX2, "leaves out the 1e-6", COEFFICIENT_WITHOUT_EPSILON, SMALL_COEFFICIENT, False),
    Wrong("06", EX2, "adds 1e-8 instead of 1e-6", COEFFICIENT_OTHER_EPSILON, SMALL_COEFFICIENT, False),
    Wrong("06", EX2, "torch.where without the 1e-6", COEFFICIENT_WHERE_WITHOUT_EPSILON, SMALL_COEFFICIENT, False),
    Wrong("06", EX3, "no unscale_ (trusts scaler.step)", AMP_STEP_WITHOUT_UNSCALE, r"got \['step', 'update'\]", False),
    Wrong(
        "06",
        EX3,
        "optimizer.step() past the scaler",
        AMP_STEP_WITHOUT_SCALER_STEP,
        r"got \['unscale_', 'update'\]",
        False,
    ),
    Wrong(
        "06",
        EX3,
        "returns the clipped norm",
        AMP_STEP_RETURNS_CLIPPED_NORM,
        r"the returned norm, in true units.*that is max_norm",
        False,
    ),
    Wrong(
        "06", "ex1_clip_global_norm", "assigns new tensors to .grad", CLIP_REBINDS, "replaced by a new tensor", False
    ),
    Wrong("06", "ex1_clip_global_norm", "assigns new memory to .grad.data", CLIP_NEW_MEMORY, "new memory", False),
    Wrong(
        "06",
        "ex1_clip_global_norm",
        "clip_grad_norm_ imported at the top",
        CLIP_WITH_ALIAS,
        "without torch's clipping utilities",
        False,
    ),
    Wrong(
        "06",
        "ex1_clip_global_norm",
        "get_total_norm under another name",
        CLIP_WITH_TOTAL_NORM,
        "without torch's clipping utilities",
        False,
    ),
    Wrong(
        "06",
        "ex2_clip_coefficient",
        "Python min on the norm",
        COEFFICIENT_WITH_MIN,
        "without reading the norm on the host",
        False,
    ),
    Wrong(
        "06",
        "ex2_clip_coefficient",
        "reads the norm with .item()",
        COEFFICIENT_WITH_ITEM,
        "without reading the norm on the host",
        False,
    ),
    Wrong("06", "ex2_clip_coefficient", "not capped at 1", COEFFICIENT_UNCAPPED, "below the threshold", False),
    Wrong(
        "06", "ex3_clipped_amp_step", "clips before unscaling", CLIP_BEFORE_UNSCALE, "clipped while still scaled", False
    ),
    Wrong(
        "06", "ex1_clip_global_norm", "iterates a generator twice", CLIP_TWO_PASSES, "parameters as a generator", False
    ),
    Wrong(
        "06",
        "ex1_clip_global_norm",
        "norm built from Python floats",
        CLIP_PYTHON_FLOAT_NORM,
        r"norm \(float64 gradients\) should have dtype torch.float64, got torch.float32",
        False,
    ),
    Wrong(
        "06", "ex1_clip_global_norm", "fills missing gradients with zeros", CLIP_FILLS_ZEROS, "should stay None", False
    ),
    Wrong(
        "06",
        "ex2_clip_coefficient",
        "torch.where with a float32 one",
        COEFFICIENT_WHERE_FLOAT32,
        "should have dtype torch.bfloat16, got torch.float32",
        False,
    ),
    Wrong(
        "06",
        "ex3_clipped_amp_step",
        "steps and updates only if the norm is finite",
        AMP_STEP_ONLY_IF_FINITE,
        r"the scale after an inf: scaler.update\(\) halves it",
        False,
    ),
    Wrong("06", EX3, "returns the scaled norm", AMP_STEP_SCALED_NORM, r"1024 times too large", False),
]
