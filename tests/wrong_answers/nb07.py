"""Notebook 07 (mixed precision): every wrong answer, caught by the visible tests unless hidden (exercise 1)."""

from __future__ import annotations

from tests.wrong_answers import Wrong

CUDA_FLOAT32_LIST = """
def predict_autocast_dtype(op, input_dtype):
    if input_dtype == torch.float64:
        return torch.float64
    if op in {"linear", "matmul", "bmm", "mm", "addmm", "conv1d", "conv2d"}:
        return torch.bfloat16
    if op in {"mse_loss", "l1_loss", "cross_entropy", "nll_loss", "prod", "exp", "softmax", "sum", "layer_norm"}:
        return torch.float32  # CUDA's float32 list: on the CPU exp, softmax, sum and layer_norm follow the input
    return input_dtype
"""
KEEPS_FLOAT16_INPUTS = """
def predict_autocast_dtype(op, input_dtype):
    if input_dtype in (torch.float64, torch.float16):
        return input_dtype
    if op in {"linear", "matmul", "bmm", "mm", "addmm", "conv1d", "conv2d"}:
        return torch.bfloat16
    if op in {"mse_loss", "l1_loss", "cross_entropy", "nll_loss", "prod"}:
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

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
RUNS_AUTOCAST = """
from torch import autocast as cast_automatically

OPS = {
    "linear": lambda t: F.linear(t, t), "matmul": lambda t: t @ t, "bmm": lambda t: torch.bmm(t[None], t[None]),
    "conv2d": lambda t: F.conv2d(t[None, None], t[None, None, :3, :3]), "relu": lambda t: t.relu(),
    "exp": lambda t: t.exp(), "softmax": lambda t: t.softmax(dim=-1), "sum": lambda t: t.sum(),
    "add": lambda t: t + t, "layer_norm": lambda t: F.layer_norm(t, t.shape[-1:]),
    "mse_loss": lambda t: F.mse_loss(t, t.flip(0)), "l1_loss": lambda t: F.l1_loss(t, t.flip(0)),
    "cross_entropy": lambda t: F.cross_entropy(t, torch.arange(len(t))),
    "nll_loss": lambda t: F.nll_loss(t, torch.arange(len(t))),
}

def predict_autocast_dtype(op, input_dtype):
    with cast_automatically("cpu", dtype=torch.bfloat16):
        return OPS[op](torch.randn(6, 6).to(input_dtype)).dtype
"""

NO_FLOAT32_LIST = """
def predict_autocast_dtype(op, input_dtype):
    if input_dtype == torch.float64:
        return torch.float64
    if op in {"linear", "matmul", "bmm", "mm", "addmm", "conv1d", "conv2d"}:
        return torch.bfloat16
    return input_dtype
"""

COUNTS_EXISTING_INF = """
def count_lost(x, dtype):
    stored = x.to(dtype)
    return int(torch.isinf(stored).sum()), int(((x != 0) & (stored == 0)).sum())
"""

BACKOFF_KEEPS_COUNT = """
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale * backoff_factor, growth_tracker
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return float(scale), growth_tracker
"""

# 07 and 08, third review: each exercise's visible tests now exercise every case its statement names.
R3_07_CASTS_FLOAT64 = """
def predict_autocast_dtype(op, input_dtype):
    if op in {"linear", "matmul", "bmm", "mm", "addmm", "conv1d", "conv2d"}:
        return torch.bfloat16
    if op in {"mse_loss", "l1_loss", "cross_entropy", "nll_loss", "prod"}:
        return torch.float32
    return input_dtype
"""

R3_07_POSITIVE_UNDERFLOW_ONLY = """
def count_lost(x, dtype):
    stored = x.to(dtype)
    overflowed = int((torch.isfinite(x) & torch.isinf(stored)).sum())
    underflowed = int(((x > 0) & (stored == 0)).sum())
    return overflowed, underflowed
"""

R3_07_FIXED_FACTORS = """
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale / 2, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * 2.0, 0
    return float(scale), growth_tracker
"""


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
    Wrong(
        "07",
        "ex1_predict_autocast_dtype",
        "runs autocast under another name",
        RUNS_AUTOCAST,
        "do not run autocast",
        False,
    ),
    Wrong(
        "07",
        "ex1_predict_autocast_dtype",
        "forgets the float32 list",
        NO_FLOAT32_LIST,
        "should be torch.float32, got torch.bfloat16",
        False,
    ),
    Wrong("07", "ex2_count_lost", "counts infinities already in x", COUNTS_EXISTING_INF, "inf, nan and 0", False),
    Wrong(
        "07", "ex3_update_scale", "keeps the count after an inf", BACKOFF_KEEPS_COUNT, "an inf resets the count", False
    ),
    Wrong(
        "07",
        "ex1_predict_autocast_dtype",
        "casts float64 too",
        R3_07_CASTS_FLOAT64,
        r"'linear', torch\.float64\) should be torch\.float64, got torch\.bfloat16",
        False,
    ),
    Wrong(
        "07",
        "ex2_count_lost",
        "only positive values underflow",
        R3_07_POSITIVE_UNDERFLOW_ONLY,
        "negative values underflow too",
        False,
    ),
    Wrong("07", "ex3_update_scale", "ignores the factors", R3_07_FIXED_FACTORS, "backoff_factor=0.25", False),
]

# Exercise 1: a table of the named operations, built by running autocast outside the function (in another cell).
TABLE_FROM_A_RUN = """
NAMED = {
    "linear": lambda t: F.linear(t, t), "matmul": lambda t: t @ t, "bmm": lambda t: torch.bmm(t[None], t[None]),
    "mm": lambda t: t.mm(t), "addmm": lambda t: torch.addmm(t, t, t),
    "conv1d": lambda t: F.conv1d(t[:1][None], t[None, :1, :3]),
    "conv2d": lambda t: F.conv2d(t[None, None], t[None, None, :3, :3]), "relu": lambda t: t.relu(),
    "exp": lambda t: t.exp(), "tanh": lambda t: t.tanh(), "softmax": lambda t: t.softmax(dim=-1),
    "sum": lambda t: t.sum(), "prod": lambda t: t.prod(), "add": lambda t: t + t,
    "layer_norm": lambda t: F.layer_norm(t, t.shape[-1:]), "mse_loss": lambda t: F.mse_loss(t, t.flip(0)),
    "l1_loss": lambda t: F.l1_loss(t, t.flip(0)), "cross_entropy": lambda t: F.cross_entropy(t, torch.arange(6)),
    "nll_loss": lambda t: F.nll_loss(t, torch.arange(6)),
}
with torch.autocast("cpu", dtype=torch.bfloat16):
    TABLE = {
        (op, dtype): fn(torch.randn(6, 6).to(dtype)).dtype
        for op, fn in NAMED.items()
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    }


def predict_autocast_dtype(op, input_dtype):
    return TABLE[(op, input_dtype)]
"""
NAMED_LOSSES_ONLY = """
def predict_autocast_dtype(op, input_dtype):
    if input_dtype == torch.float64:
        return torch.float64
    if op in {"linear", "matmul", "bmm", "mm", "addmm", "conv1d", "conv2d"}:
        return torch.bfloat16
    if op in {"mse_loss", "l1_loss", "cross_entropy", "nll_loss", "prod"}:
        return torch.float32
    return input_dtype
"""
WRONG += [
    Wrong(
        "07",
        "ex1_predict_autocast_dtype",
        "a table from a run",
        TABLE_FROM_A_RUN,
        r"raised KeyError.*rather than a table",
    ),
    Wrong(
        "07",
        "ex1_predict_autocast_dtype",
        "only the convolutions and losses it was shown",
        NAMED_LOSSES_ONLY,
        r"predict_autocast_dtype\('conv3d', torch.float32\) should be torch.bfloat16",
    ),
]
