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

WRONG = [
    Wrong("11", "ex1_graph_breaks", "the functions as keys",
          "GRAPH_BREAKS = {normalise: 0, log_and_scale: 2, relu_if_positive: 1, count_large: 1}",
          r"GRAPH_BREAKS needs exactly the keys \['count_large', 'log_and_scale', 'normalise', 'relu_if_positive'\]",
          False),
    Wrong("11", "ex1_graph_breaks", "breaks or not, as booleans",
          'GRAPH_BREAKS = {"normalise": False, "log_and_scale": True, "relu_if_positive": True, "count_large": True}',
          r"GRAPH_BREAKS\['normalise'\] should be a number of breaks \(an int\), got bool", False),
    Wrong("11", "ex2_clip_in_one_graph", "the peak of the first two dimensions", CLIP_PEAK_OF_A_MATRIX,
          "clip_in_one_graph on a 3-D tensor", False),
    Wrong("11", "ex3_compiling_calls", "counted from 0", "COMPILING_CALLS = {0, 2, 4, 5, 6, 7}",
          "call numbers run from 1 to 9, got 0", False),
    Wrong("11", "ex3_compiling_calls", "dtype unguarded", "COMPILING_CALLS = {1, 3, 6, 7, 8}",
          r"^call 5 compiles a graph, but COMPILING_CALLS leaves it out$", False),
    Wrong("11", "ex3_compiling_calls", "every dimension symbolic after one", "COMPILING_CALLS = {1, 3, 5, 6, 7}",
          r"^call 8 compiles a graph, but COMPILING_CALLS leaves it out$", False),
    Wrong("11", "ex4_break_even_calls", "rounds down", BREAK_EVEN_ROUNDED_DOWN,
          r"break_even_calls\(10\.0, 4\.0, 1\.0\) .*should be 4, got 3", False),
    Wrong("11", "ex4_break_even_calls", "rounds to the nearest", BREAK_EVEN_ROUNDED,
          r"break_even_calls\(10\.0, 4\.0, 1\.0\) .*should be 4, got 3", False),
    Wrong("11", "ex4_break_even_calls", "a float", BREAK_EVEN_FLOAT, "should be an int, got float: 5.0", False),
    Wrong("11", "ex4_break_even_calls", "refuses a zero time", BREAK_EVEN_ZERO_REFUSED,
          r"break_even_calls\(0\.0, 2\.0, 1\.0\) raised ValueError", False),
    Wrong("11", "ex4_break_even_calls", "never pays off before the negative check", BREAK_EVEN_NO_GAIN_FIRST,
          r"break_even_calls\(1\.0, -2\.0, 1\.0\) should raise ValueError for the negative time, got None", False),
]
