"""Wrong answers to notebook 09's exercises that its visible tests reject (issue 23, section 3).

Each is an answer a learner would write: the uint8 range used for int8 too, a cast before the
clamp, a zero point rounded half up or truncated, the natural logarithm, an SQNR averaged over
rows, every buffer counted (non-persistent ones are not in the state dict), a quantized tensor
flattened by its required data names only.
"""

from __future__ import annotations

from wrong_answers import Wrong

_DEQUANTIZE = """

def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""
QUANTIZE_TO_UINT8_RANGE = (
    """
def quantize_per_tensor(x, scale, zero_point, dtype):
    return (torch.round(x / scale) + zero_point).clamp(0, 255).to(dtype)
"""
    + _DEQUANTIZE
)
QUANTIZE_CAST_BEFORE_CLAMP = (
    """
def quantize_per_tensor(x, scale, zero_point, dtype):
    info = torch.iinfo(dtype)
    return (torch.round(x / scale) + zero_point).to(dtype).clamp(info.min, info.max)
"""
    + _DEQUANTIZE
)
_QPARAMS = """
def choose_qparams(min_val, max_val, dtype):
    import math

    info = torch.iinfo(dtype)
    min_neg, max_pos = min(min_val, 0.0), max(max_val, 0.0)
    scale = max((max_pos - min_neg) / (info.max - info.min), torch.finfo(torch.float32).eps)
    return float(scale), int(info.min - {})
"""
QPARAMS_HALF_UP = _QPARAMS.format("math.floor(min_neg / scale + 0.5)")
QPARAMS_TRUNCATED = _QPARAMS.format("int(min_neg / scale)")
SQNR_NATURAL_LOG = """
def sqnr_db(x, x_hat):
    import math

    return 10 * math.log(x.pow(2).sum().item() / (x - x_hat).pow(2).sum().item())
"""
SQNR_MEAN_OF_ROWS = """
def sqnr_db(x, x_hat):
    return float((10 * torch.log10(x.pow(2).sum(-1) / (x - x_hat).pow(2).sum(-1))).mean())
"""
_FLATTEN = """
def stored_bytes(model):
    def tensor_bytes(t):
        if hasattr(t, "{attribute}"):
            return sum(tensor_bytes(getattr(t, name)) for name in {names})
        return t.numel() * t.element_size()

    return sum(tensor_bytes(t) for t in {tensors})
"""
BYTES_OF_EVERY_BUFFER = _FLATTEN.format(
    attribute="__tensor_flatten__",
    names="t.__tensor_flatten__()[0]",
    tensors="[*model.parameters(), *model.buffers()]",
)
BYTES_OF_DATA_NAMES = _FLATTEN.format(
    attribute="tensor_data_names",
    names="t.tensor_data_names",
    tensors="model.state_dict().values() if isinstance(t, torch.Tensor)",
)

WRONG = [
    Wrong(
        "09",
        "ex1_quantize_per_tensor",
        "clamps int8 to 0..255",
        QUANTIZE_TO_UINT8_RANGE,
        r"quantize_per_tensor\(halves, 0\.5, 0, int8\).*wrong values",
        False,
    ),
    Wrong(
        "09",
        "ex1_quantize_per_tensor",
        "casts before clamping",
        QUANTIZE_CAST_BEFORE_CLAMP,
        r"quantize_per_tensor\(x, 0\.1, 10, uint8\).*wrong values",
        False,
    ),
    Wrong(
        "09",
        "ex2_choose_qparams",
        "rounds the zero point half up",
        QPARAMS_HALF_UP,
        r"zero_point for \[-3\.5, 251\.5\] in uint8.*round half to even.*should be 4, got 3",
        False,
    ),
    Wrong(
        "09",
        "ex2_choose_qparams",
        "truncates the zero point",
        QPARAMS_TRUNCATED,
        r"zero_point for \[-1, 3\] in uint8.*should be 64, got 63",
        False,
    ),
    Wrong("09", "ex3_sqnr_db", "natural logarithm", SQNR_NATURAL_LOG, "should be about 20, got 46", False),
    Wrong("09", "ex3_sqnr_db", "mean of the rows' SQNR", SQNR_MEAN_OF_ROWS, "2x2 tensors.*should be about 13", False),
    Wrong(
        "09",
        "ex4_stored_bytes",
        "counts non-persistent buffers",
        BYTES_OF_EVERY_BUFFER,
        "buffer registered persistent=False",
        False,
    ),
    Wrong(
        "09",
        "ex4_stored_bytes",
        "required data names only",
        BYTES_OF_DATA_NAMES,
        "after Int8WeightOnlyConfig should be 2336, got 2304",
        False,
    ),
]
