"""Wrong answers to notebook 11's exercises that its visible tests reject (issue 23, section 3).

Each is an answer a learner would write, beyond the cases in ``tests/test_wrong_answers.py``:
the functions themselves as keys, or yes/no instead of counts (exercise 1); the peak taken over
the first two dimensions only, right for every 2-D example (exercise 2); call numbers counted
from 0, the dtype taken as unguarded, a dimension made symbolic taken to make every dimension
symbolic (exercise 3); the break-even count rounded down or to the nearest integer, a float
returned, a zero time refused, the "never pays off" case tested before the negative times
(exercise 4).
"""

from __future__ import annotations

from wrong_answers import Wrong

_BREAK_EVEN = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("times cannot be negative")
    saved = eager_seconds - compiled_seconds
    if saved <= 0:
        return None
    return {count}
"""
BREAK_EVEN_ROUNDED_DOWN = _BREAK_EVEN.format(count="max(1, int(compile_seconds / saved))")
BREAK_EVEN_ROUNDED = _BREAK_EVEN.format(count="max(1, round(compile_seconds / saved))")
BREAK_EVEN_FLOAT = _BREAK_EVEN.format(count="max(1, -(-compile_seconds // saved))")
BREAK_EVEN_ZERO_REFUSED = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) <= 0:
        raise ValueError("times must be positive")
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""
BREAK_EVEN_NO_GAIN_FIRST = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    saved = eager_seconds - compiled_seconds
    if saved <= 0:
        return None
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("times cannot be negative")
    return max(1, math.ceil(compile_seconds / saved))
"""
CLIP_PEAK_OF_A_MATRIX = """
def clip_in_one_graph(x):
    peak = x.abs().amax(dim=(0, 1))
    return torch.tanh(x / torch.clamp(peak, min=1.0))
"""

# Moved from tests/test_wrong_answers.py (the earlier review lists).
GRAPH_BREAKS_SHAPE_IF = 'GRAPH_BREAKS = {"normalise": 1, "log_and_scale": 2, "relu_if_positive": 1, "count_large": 1}'

GRAPH_BREAKS_PRINT_IGNORED = (
    'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 1, "relu_if_positive": 1, "count_large": 1}'
)

GRAPH_BREAKS_NONZERO_IGNORED = (
    'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 2, "relu_if_positive": 1, "count_large": 0}'
)

GRAPH_COUNTS = 'GRAPH_BREAKS = {"normalise": 1, "log_and_scale": 3, "relu_if_positive": 2, "count_large": 2}'

CLIP_KEEPS_ITEM = """
def clip_in_one_graph(x):
    peak = x.abs().max().item()
    return torch.tanh(x / max(peak, 1.0))
"""

CLIP_ALWAYS_DIVIDES = """
def clip_in_one_graph(x):
    return torch.tanh(x / x.abs().amax())
"""

CLIP_CLAMPS_VALUES = """
def clip_in_one_graph(x):
    return torch.tanh(torch.clamp(x, -1.0, 1.0))
"""

CLIP_WITHOUT_PRINT = """
def clip_in_one_graph(x):
    peak = x.abs().max().item()
    if peak > 1.0:
        x = x / peak
    return torch.tanh(x)
"""

CLIP_CALLS_THE_ORIGINAL = """
def clip_in_one_graph(x):
    return clip_and_report(x)
"""

BREAK_EVEN_FLOOR_PLUS_ONE = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else int(compile_seconds // saved) + 1
"""

BREAK_EVEN_INFINITY = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    saved = eager_seconds - compiled_seconds
    return math.inf if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""

BREAK_EVEN_ZERO_CALLS = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else math.ceil(compile_seconds / saved)
"""

BREAK_EVEN_IGNORES_COMPILED = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    return None if compiled_seconds >= eager_seconds else max(1, math.ceil(compile_seconds / eager_seconds))
"""

BREAK_EVEN_NEGATIVE_TIMES = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""

CALLS_DYNAMIC_FALSE = "COMPILING_CALLS = {1, 3, 4, 5, 6, 7, 8}"

R3_11_IF_ON_DATA_IGNORED = (
    'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 2, "relu_if_positive": 0, "count_large": 1}'
)

R3_11_EQUAL_DIVIDES_BY_ZERO = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    if compiled_seconds > eager_seconds:
        return None
    return max(1, math.ceil(compile_seconds / (eager_seconds - compiled_seconds)))
"""

R3_11_ASSERTS_INSTEAD = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    assert min(compile_seconds, eager_seconds, compiled_seconds) >= 0, "negative time"
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""

R3_11_CHECKS_COMPILE_TIME_ONLY = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if compile_seconds < 0:
        raise ValueError("negative compile time")
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""


WRONG = [
    Wrong(
        "11",
        "ex1_graph_breaks",
        "the functions as keys",
        "GRAPH_BREAKS = {normalise: 0, log_and_scale: 2, relu_if_positive: 1, count_large: 1}",
        r"GRAPH_BREAKS needs exactly the keys \['count_large', 'log_and_scale', 'normalise', 'relu_if_positive'\]",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "breaks or not, as booleans",
        'GRAPH_BREAKS = {"normalise": False, "log_and_scale": True, "relu_if_positive": True, "count_large": True}',
        r"GRAPH_BREAKS\['normalise'\] should be a number of breaks \(an int\), got bool",
        False,
    ),
    Wrong(
        "11",
        "ex2_clip_in_one_graph",
        "the peak of the first two dimensions",
        CLIP_PEAK_OF_A_MATRIX,
        "clip_in_one_graph on a 3-D tensor",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "counted from 0",
        "COMPILING_CALLS = {0, 2, 4, 5, 6, 7}",
        "call numbers run from 1 to 9, got 0",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "dtype unguarded",
        "COMPILING_CALLS = {1, 3, 6, 7, 8}",
        r"^call 5 compiles a graph, but COMPILING_CALLS leaves it out$",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "every dimension symbolic after one",
        "COMPILING_CALLS = {1, 3, 5, 6, 7}",
        r"^call 8 compiles a graph, but COMPILING_CALLS leaves it out$",
        False,
    ),
    Wrong(
        "11",
        "ex4_break_even_calls",
        "rounds down",
        BREAK_EVEN_ROUNDED_DOWN,
        r"break_even_calls\(10\.0, 4\.0, 1\.0\) .*should be 4, got 3",
        False,
    ),
    Wrong(
        "11",
        "ex4_break_even_calls",
        "rounds to the nearest",
        BREAK_EVEN_ROUNDED,
        r"break_even_calls\(10\.0, 4\.0, 1\.0\) .*should be 4, got 3",
        False,
    ),
    Wrong("11", "ex4_break_even_calls", "a float", BREAK_EVEN_FLOAT, "should be an int, got float: 5.0", False),
    Wrong(
        "11",
        "ex4_break_even_calls",
        "refuses a zero time",
        BREAK_EVEN_ZERO_REFUSED,
        r"break_even_calls\(0\.0, 2\.0, 1\.0\) raised ValueError",
        False,
    ),
    Wrong(
        "11",
        "ex4_break_even_calls",
        "never pays off before the negative check",
        BREAK_EVEN_NO_GAIN_FIRST,
        r"break_even_calls\(1\.0, -2\.0, 1\.0\) should raise ValueError for the negative time, got None",
        False,
    ),
    Wrong("11", "ex1_graph_breaks", "an if on a shape breaks", GRAPH_BREAKS_SHAPE_IF, r"\['normalise'\]", False),
    Wrong("11", "ex1_graph_breaks", "counts graphs", GRAPH_COUNTS, r"\['normalise'\]", False),
    Wrong(
        "11", "ex1_graph_breaks", "print does not break", GRAPH_BREAKS_PRINT_IGNORED, r"'log_and_scale'\] is off", False
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "nonzero does not break",
        GRAPH_BREAKS_NONZERO_IGNORED,
        r"'count_large'\] is off",
        False,
    ),
    Wrong("11", "ex2_clip_in_one_graph", "keeps .item()", CLIP_KEEPS_ITEM, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "only drops the print", CLIP_WITHOUT_PRINT, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "calls the original", CLIP_CALLS_THE_ORIGINAL, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "always divides", CLIP_ALWAYS_DIVIDES, "peak is below 1", False),
    Wrong("11", "ex2_clip_in_one_graph", "clamps the values", CLIP_CLAMPS_VALUES, "peak is 2", False),
    Wrong(
        "11", "ex3_compiling_calls", "every new shape compiles", CALLS_DYNAMIC_FALSE, "call 4 is not a compile", False
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "requires_grad unguarded",
        "COMPILING_CALLS = {1, 3, 5, 7, 8}",
        "call 6 compiles a graph",
        False,
    ),
    Wrong(
        "11", "ex3_compiling_calls", "no size-1 graph", "COMPILING_CALLS = {1, 3, 5, 6, 8}", "call 7 compiles", False
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "dynamic from the start",
        "COMPILING_CALLS = {1, 5, 6, 7}",
        r"call 3 compiles a graph.*\(and 1 more call is wrong\)",
        False,
    ),
    Wrong("11", "ex4_break_even_calls", "floor plus one", BREAK_EVEN_FLOOR_PLUS_ONE, "even counts", False),
    Wrong("11", "ex4_break_even_calls", "ignores compiled time", BREAK_EVEN_IGNORES_COMPILED, "even counts", False),
    Wrong("11", "ex4_break_even_calls", "infinity for no gain", BREAK_EVEN_INFINITY, "return None", False),
    Wrong("11", "ex4_break_even_calls", "zero calls", BREAK_EVEN_ZERO_CALLS, "at least one call", False),
    Wrong("11", "ex4_break_even_calls", "accepts negative times", BREAK_EVEN_NEGATIVE_TIMES, "raise ValueError", False),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "if on data does not break",
        R3_11_IF_ON_DATA_IGNORED,
        r"^GRAPH_BREAKS\['relu_if_positive'\] is off: [^0-9]*$",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "call 9 recompiles",
        "COMPILING_CALLS = {1, 3, 5, 6, 7, 8, 9}",
        r"^call 9 is not a compile: it reuses a graph compiled before it$",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "a list",
        "COMPILING_CALLS = [1, 3, 5, 6, 7, 8]",
        "should be a set, got list",
        False,
    ),
    Wrong(
        "11",
        "ex4_break_even_calls",
        "equal speed divides by zero",
        R3_11_EQUAL_DIVIDES_BY_ZERO,
        "equally fast compiled call never pays off, so return None; it raised ZeroDivisionError",
        False,
    ),
    Wrong(
        "11",
        "ex4_break_even_calls",
        "asserts instead of raising",
        R3_11_ASSERTS_INSTEAD,
        "should raise ValueError for the negative time, not AssertionError",
        False,
    ),
    Wrong(
        "11",
        "ex4_break_even_calls",
        "checks only the compile time",
        R3_11_CHECKS_COMPILE_TIME_ONLY,
        r"break_even_calls\(1\.0, -2\.0, 1\.0\) should raise ValueError",
        False,
    ),
]

CLIP_IF_ON_TENSOR = """
def clip_in_one_graph(x):
    peak = x.abs().max()
    if peak > 1.0:
        return torch.tanh(x / peak)
    return torch.tanh(x)
"""
CLIP_ITEM_ONLY = """
def clip_in_one_graph(x):
    return torch.tanh(x / max(x.abs().max().item(), 1.0))
"""
WRONG += [
    Wrong(
        "11", "ex2_clip_in_one_graph", "a Python if on a tensor", CLIP_IF_ON_TENSOR, r"comes from a Python `if`", False
    ),
    Wrong("11", "ex2_clip_in_one_graph", "a .item() and max", CLIP_ITEM_ONLY, r"comes from \.item\(\)", False),
]
