"""Wrong answers to notebook 09's exercises that its visible tests reject (issue 23, section 3).

Each is an answer a learner would write: the uint8 range used for int8 too, a cast before the
clamp, a zero point rounded half up or truncated, the natural logarithm, an SQNR averaged over
rows, every buffer counted (non-persistent ones are not in the state dict), a quantized tensor
flattened by its required data names only.
"""

from __future__ import annotations

from tests.wrong_answers import Wrong

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

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
QUANTIZE_WITH_TORCH = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    legacy = {torch.uint8: torch.quint8, torch.int8: torch.qint8}[dtype]
    return torch.quantize_per_tensor(x, scale, zero_point, legacy).int_repr()


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""

QUANTIZE_WITH_TORCHAO = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    info = torch.iinfo(dtype)
    return quantize_affine(x, x.shape, torch.tensor([scale]), torch.tensor([zero_point]), dtype, info.min, info.max)


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""

QUANTIZE_HALVES_UP = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    info = torch.iinfo(dtype)
    return (torch.floor(x / scale + 0.5) + zero_point).clamp(info.min, info.max).to(dtype)


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""

QPARAMS_WITH_TORCHAO = """
def choose_qparams(min_val, max_val, dtype):
    from torchao.quantization import choose_qparams_affine_with_min_max

    info = torch.iinfo(dtype)
    scale, zero_point = choose_qparams_affine_with_min_max(
        torch.tensor([min_val]), torch.tensor([max_val]), MappingType.ASYMMETRIC, (1,), dtype, info.min, info.max,
        eps=torch.finfo(torch.float32).eps, zero_point_dtype=torch.int32,
    )
    return scale.item(), int(zero_point.item())
"""

QPARAMS_WITHOUT_ZERO = """
def choose_qparams(min_val, max_val, dtype):
    info = torch.iinfo(dtype)
    scale = max((max_val - min_val) / (info.max - info.min), torch.finfo(torch.float32).eps)
    zero_point = info.min - round(min_val / scale)
    return float(scale), int(min(max(zero_point, info.min), info.max))
"""

SQNR_WITH_TORCHAO = """
def sqnr_db(x, x_hat):
    return compute_error(x, x_hat).item()
"""

SQNR_TWENTY_LOG = """
def sqnr_db(x, x_hat):
    import math

    return 20 * math.log10(x.pow(2).sum().item() / (x - x_hat).pow(2).sum().item())
"""

BYTES_FROM_ELEMENT_SIZE = """
def stored_bytes(model):
    return sum(t.numel() * t.element_size() for t in model.state_dict().values() if isinstance(t, torch.Tensor))
"""

BYTES_ONE_LEVEL = """
def stored_bytes(model):
    total = 0
    for t in model.state_dict().values():
        if not isinstance(t, torch.Tensor):
            continue
        inner = [getattr(t, name) for name in t.__tensor_flatten__()[0]] if hasattr(t, "__tensor_flatten__") else [t]
        total += sum(part.numel() * part.element_size() for part in inner)
    return total
"""

DEQUANTIZE_IN_UINT8 = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    info = torch.iinfo(dtype)
    return (torch.round(x / scale) + zero_point).clamp(info.min, info.max).to(dtype)


def dequantize_per_tensor(q, scale, zero_point):
    return (q - zero_point).to(torch.float32) * scale
"""

QUANTIZE_WITHOUT_CLAMP = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    return (torch.round(x / scale) + zero_point).to(dtype)


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""

QPARAMS_WITHOUT_EPS = """
def choose_qparams(min_val, max_val, dtype):
    info = torch.iinfo(dtype)
    min_neg, max_pos = min(min_val, 0.0), max(max_val, 0.0)
    scale = (max_pos - min_neg) / (info.max - info.min)
    zero_point = info.min - round(min_neg / scale)
    return float(scale), int(min(max(zero_point, info.min), info.max))
"""

QPARAMS_LOW_END_ONLY = """
def choose_qparams(min_val, max_val, dtype):
    info = torch.iinfo(dtype)
    min_neg = min(min_val, 0.0)
    scale = max((max_val - min_neg) / (info.max - info.min), torch.finfo(torch.float32).eps)
    zero_point = info.min - round(min_neg / scale)
    return float(scale), int(min(max(zero_point, info.min), info.max))
"""

SQNR_AS_TENSOR = """
def sqnr_db(x, x_hat):
    return 10 * torch.log10(x.pow(2).sum() / (x - x_hat).pow(2).sum())
"""

SQNR_WITH_DOT = """
def sqnr_db(x, x_hat):
    import math

    noise = x - x_hat
    return 10 * math.log10(torch.dot(x, x).item() / torch.dot(noise, noise).item())
"""

_FLATTEN_ALL = """
    def tensor_bytes(t):
        if hasattr(t, "__tensor_flatten__"):
            return sum(tensor_bytes(getattr(t, name)) for name in t.__tensor_flatten__()[0])
        return t.numel() * t.element_size()
"""

_STORED_BYTES = "def stored_bytes(model):" + _FLATTEN_ALL + "\n    return sum(map(tensor_bytes, {}))\n"

BYTES_PARAMETERS_ONLY = _STORED_BYTES.format("model.parameters()")

BYTES_EVERY_ENTRY = _STORED_BYTES.format("model.state_dict().values()")

WRONG_VALUES = "has the right shape and dtype but wrong values"

DEQUANTIZED_WRONG = r"dequantize_per_tensor\(codes, 0\.1, 10\) " + WRONG_VALUES

CODES_WRONG_AT_THE_TOP = r"quantize_per_tensor\(x, 0\.1, 10, uint8\) " + WRONG_VALUES + r".*at index \(6,\)"


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
    Wrong("09", "ex1_quantize_per_tensor", "asks torch", QUANTIZE_WITH_TORCH, r"called torch\..*per_tensor", False),
    Wrong("09", "ex1_quantize_per_tensor", "asks torchao", QUANTIZE_WITH_TORCHAO, r"called torchao\.", False),
    Wrong("09", "ex1_quantize_per_tensor", "rounds halves up", QUANTIZE_HALVES_UP, "round half to even", False),
    Wrong("09", "ex2_choose_qparams", "asks torchao", QPARAMS_WITH_TORCHAO, r"called torchao\.", False),
    Wrong("09", "ex2_choose_qparams", "range without zero", QPARAMS_WITHOUT_ZERO, r"stretched to \[0, 2\]", False),
    Wrong("09", "ex3_sqnr_db", "asks torchao", SQNR_WITH_TORCHAO, r"called torchao\..*compute_error", False),
    Wrong("09", "ex3_sqnr_db", "20 log10 of a power ratio", SQNR_TWENTY_LOG, "should be about 20, got 40", False),
    Wrong(
        "09",
        "ex4_stored_bytes",
        "trusts element_size",
        BYTES_FROM_ELEMENT_SIZE,
        r"after Int8WeightOnlyConfig should be 2336, got 8320: that is the size of the weights counted as plain "
        r"float32",
        False,
    ),
    Wrong(
        "09",
        "ex4_stored_bytes",
        "flattens one level only",
        BYTES_ONE_LEVEL,
        r"a subclass inside a subclass should be 2336, got 8320: .*one may be a subclass too",
        False,
    ),
    Wrong("09", "ex1_quantize_per_tensor", "subtracts in uint8", DEQUANTIZE_IN_UINT8, DEQUANTIZED_WRONG, False),
    Wrong("09", "ex1_quantize_per_tensor", "no clamp", QUANTIZE_WITHOUT_CLAMP, CODES_WRONG_AT_THE_TOP, False),
    Wrong("09", "ex2_choose_qparams", "no eps floor", QPARAMS_WITHOUT_EPS, r"\(0\.0, 0\.0, int8\) failed", False),
    Wrong("09", "ex2_choose_qparams", "stretches the low end only", QPARAMS_LOW_END_ONLY, r"to \[-2, 0\]", False),
    Wrong("09", "ex3_sqnr_db", "returns a tensor", SQNR_AS_TENSOR, "should be a float, got Tensor", False),
    Wrong("09", "ex3_sqnr_db", "1-D only", SQNR_WITH_DOT, "failed on 2x2 tensors", False),
    Wrong(
        "09",
        "ex4_stored_bytes",
        "parameters only",
        BYTES_PARAMETERS_ONLY,
        r"136 bytes, is the size of BatchNorm.s buffers.*left out",
        False,
    ),
    Wrong("09", "ex4_stored_bytes", "every state_dict entry", BYTES_EVERY_ENTRY, "holds a non-tensor entry", False),
]
