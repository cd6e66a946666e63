"""Notebook 06 (clipping): wrong answers of the issue 22/23 review, each caught by the visible tests."""

from __future__ import annotations

from wrong_answers import Wrong

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
EX1, EX2, EX3 = "ex1_clip_global_norm", "ex2_clip_coefficient", "ex3_clipped_amp_step"

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
        "06", EX3, "returns the clipped norm", AMP_STEP_RETURNS_CLIPPED_NORM, r"the returned norm, in true units", False
    ),
]
