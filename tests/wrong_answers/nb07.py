"""Notebook 07 (mixed precision): wrong answers of the issue 22/23 review, each caught by the visible tests."""

from __future__ import annotations

from wrong_answers import Wrong

CUDA_FLOAT32_LIST = """
def predict_autocast_dtype(op, input_dtype):
    if input_dtype == torch.float64:
        return torch.float64
    if op in {"linear", "matmul", "bmm", "conv2d"}:
        return torch.bfloat16
    if op in {"mse_loss", "l1_loss", "cross_entropy", "nll_loss", "exp", "softmax", "sum", "layer_norm"}:
        return torch.float32  # CUDA's float32 list: on the CPU exp, softmax, sum and layer_norm follow the input
    return input_dtype
"""
KEEPS_FLOAT16_INPUTS = """
def predict_autocast_dtype(op, input_dtype):
    if input_dtype in (torch.float64, torch.float16):
        return input_dtype
    if op in {"linear", "matmul", "bmm", "conv2d"}:
        return torch.bfloat16
    if op in {"mse_loss", "l1_loss", "cross_entropy", "nll_loss"}:
        return torch.float32
    return input_dtype
"""
OVERFLOW_ABOVE_FINFO_MAX = """
def count_lost(x, dtype):
    info = torch.finfo(dtype)
    overflowed = int(((x.abs() > info.max) & torch.isfinite(x)).sum())
    underflowed = int(((x != 0) & (x.to(dtype) == 0)).sum())
    return overflowed, underflowed
"""
UNDERFLOW_BELOW_FINFO_TINY = """
def count_lost(x, dtype):
    stored = x.to(dtype)
    overflowed = int((torch.isfinite(x) & torch.isinf(stored)).sum())
    underflowed = int(((x != 0) & (x.abs() < torch.finfo(dtype).tiny)).sum())
    return overflowed, underflowed
"""
FLOAT16_THRESHOLDS_FOR_EVERY_DTYPE = """
def count_lost(x, dtype):
    overflowed = int(((x.abs() >= 65520) & torch.isfinite(x)).sum())
    underflowed = int(((x != 0) & (x.abs() <= 2.0**-25)).sum())
    return overflowed, underflowed
"""
GROWS_A_STEP_EARLY = """
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale * backoff_factor, 0
    growth_tracker += 1
    if growth_tracker >= growth_interval - 1:
        return scale * growth_factor, 0
    return float(scale), growth_tracker
"""
BACKS_OFF_BY_ONE_OVER_GROWTH = """
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale / growth_factor, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return float(scale), growth_tracker
"""
GROWS_A_STEP_LATE = """
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale * backoff_factor, 0
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return float(scale), growth_tracker + 1
"""

EX1, EX2, EX3 = "ex1_predict_autocast_dtype", "ex2_count_lost", "ex3_update_scale"

WRONG = [
    Wrong(
        "07",
        EX1,
        "CUDA's float32 list on the CPU",
        CUDA_FLOAT32_LIST,
        r"predict_autocast_dtype\('exp', torch\.bfloat16\) should be torch\.bfloat16, got torch\.float32",
        False,
    ),
    Wrong(
        "07",
        EX1,
        "leaves float16 inputs alone",
        KEEPS_FLOAT16_INPUTS,
        r"'linear', torch\.float16\) should be torch\.bfloat16",
        False,
    ),
    Wrong(
        "07",
        EX2,
        "overflow means above finfo.max",
        OVERFLOW_ABOVE_FINFO_MAX,
        r"overflowed entries of \[65519, 65520, -65519, -65520\] in float16 .* should be 2, got 4",
        False,
    ),
    Wrong(
        "07",
        EX2,
        "underflow means below finfo.tiny",
        UNDERFLOW_BELOW_FINFO_TINY,
        r"underflowed entries of \[1e-06, 4e-08, 2e-08, -3e-08\] in float16 .* should be 1, got 4",
        False,
    ),
    Wrong(
        "07",
        EX2,
        "float16's thresholds for every dtype",
        FLOAT16_THRESHOLDS_FOR_EVERY_DTYPE,
        r"count_lost\(sample, torch\.bfloat16\)",
        False,
    ),
    Wrong("07", EX3, "grows a step early", GROWS_A_STEP_EARLY, r"the 9th clean step of 10", False),
    Wrong(
        "07",
        EX3,
        "backs off by 1 / growth_factor",
        BACKS_OFF_BY_ONE_OVER_GROWTH,
        r"an inf with growth_factor=4\.0, backoff_factor=0\.5",
        False,
    ),
    Wrong("07", EX3, "grows a step late", GROWS_A_STEP_LATE, r"the 10th clean step", False),
]
