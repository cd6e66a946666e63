"""Wrong answers to notebook 11's exercises that its tests reject (issues 23 and 31, section 3).

Each is an answer a learner would write. Exercise 1 (``graph_breaks(steps)``, a rule, graded on
step lists the hidden tests alone define): a step misclassified (print, an ``if`` on a shape,
``torch.where``, the data-dependent sizes, ``float``/``tolist``, an ``if`` on a value, a loop),
graphs counted instead of breaks, any break counted once, a repeated step counted once, explain
run inside the answer (the test switches compiling off), a bool; and the visible lists' counts
copied into a table, which only the hidden tests catch. Exercise 2: the peak taken over the
first two dimensions only, right for every 2-D example, and the answers that keep a break.
Exercise 3 (``compiling_calls(calls)``, a model of the guards, graded on call lists the hidden
tests alone define): every new shape compiling, dtype or ``requires_grad`` unguarded, no size-1
graph, dimensions symbolic from the start, every dimension symbolic after one changes, sizes
left fixed when a new dtype caused the compile, only the latest graph kept, ``shift`` compiled
inside the answer, numbers from 0, a list; and the visible lists' answers copied, which only
the hidden tests catch. Exercise 4: the break-even count rounded down or to the nearest
integer, a float returned, a zero time refused, the "never pays off" case tested before the
negative times, and the rest below.
"""

from __future__ import annotations

from tests.wrong_answers import Wrong

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
        "ex2_clip_in_one_graph",
        "the peak of the first two dimensions",
        CLIP_PEAK_OF_A_MATRIX,
        "clip_in_one_graph on a 3-D tensor",
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
    Wrong("11", "ex2_clip_in_one_graph", "keeps .item()", CLIP_KEEPS_ITEM, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "only drops the print", CLIP_WITHOUT_PRINT, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "calls the original", CLIP_CALLS_THE_ORIGINAL, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "always divides", CLIP_ALWAYS_DIVIDES, "peak is below 1", False),
    Wrong("11", "ex2_clip_in_one_graph", "clamps the values", CLIP_CLAMPS_VALUES, "peak is 2", False),
    Wrong("11", "ex4_break_even_calls", "floor plus one", BREAK_EVEN_FLOOR_PLUS_ONE, "even counts", False),
    Wrong("11", "ex4_break_even_calls", "ignores compiled time", BREAK_EVEN_IGNORES_COMPILED, "even counts", False),
    Wrong("11", "ex4_break_even_calls", "infinity for no gain", BREAK_EVEN_INFINITY, "return None", False),
    Wrong("11", "ex4_break_even_calls", "zero calls", BREAK_EVEN_ZERO_CALLS, "at least one call", False),
    Wrong("11", "ex4_break_even_calls", "accepts negative times", BREAK_EVEN_NEGATIVE_TIMES, "raise ValueError", False),
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

# Exercise 1: graph_breaks(steps), a rule over the steps of STEPS (issue 31, section 3).
_BREAKING = {"value_if", "item", "float", "tolist", "print", "nonzero", "mask"}
_GRAPH_BREAKS = """
def graph_breaks(steps):
    breaking = {breaking!r}
    return {count}
"""


def _graph_breaks(breaking: set[str], count: str = "sum(step in breaking for step in steps)") -> str:
    return _GRAPH_BREAKS.format(breaking=sorted(breaking), count=count)


# The counts explain reports for every list the visible tests ask about, copied into a table.
_COPIED_COUNTS = """
COPIED = {
    ("shape_if", "item", "where", "print"): 2,
    ("range_loop", "value_if", "clamp", "nonzero", "value_if", "len"): 3,
    ("mask_mul", "tolist", "float", "mask"): 3,
    ("value_if",): 1, ("item",): 1, ("float",): 1, ("tolist",): 1, ("print",): 1, ("nonzero",): 1, ("mask",): 1,
}


def graph_breaks(steps):
    return COPIED.get(tuple(steps), 0)
"""
_RUNS_EXPLAIN = """
def graph_breaks(steps):
    return torch._dynamo.explain(make_function(steps))(torch.randn(8, 4)).graph_break_count
"""

# Exercise 3: compiling_calls(calls), a model of the guards (issue 31, section 3). The notebook's solution with
# one rule changed at a time.
_COMPILING_CALLS = """
def compiling_calls(calls):
    def accepts(graph, shape, dtype, requires_grad):
        sizes, graph_dtype, graph_requires_grad = graph
        return {kind_matches} and all(
            {symbolic_accepts} if fixed is None else size == fixed for fixed, size in zip(sizes, shape)
        )

    first, symbolic, graphs, compiling = None, set(), [], set()
    for number, (shape, dtype, requires_grad) in enumerate(calls, start={start}):
        if any(accepts(graph, shape, dtype, requires_grad) for graph in {searched}):
            continue
        compiling.add(number)
        {remember}
        sizes = tuple(None if {symbolic_here} else size for dim, size in enumerate(shape))
        graphs.append((sizes, dtype, requires_grad))
    return {result}
"""
_RULES = {
    "kind_matches": "(graph_dtype, graph_requires_grad) == (dtype, requires_grad)",
    "symbolic_accepts": "size >= 2",
    "start": "1",
    "searched": "graphs",
    "remember": "first = first or shape; symbolic |= {dim for dim, (was, size) in enumerate(zip(first, shape)) "
    "if size != was}",
    "symbolic_here": "dim in symbolic and size >= 2",
    "result": "compiling",
}


def _compiling_calls(**changed: str) -> str:
    return _COMPILING_CALLS.format(**(_RULES | changed))


_COMPILES_SHIFT = """
def compiling_calls(calls):
    torch.compiler.reset()
    counter = CompileCounter()
    compiled_shift = torch.compile(shift, backend=counter)
    compiling = set()
    for number, (shape, dtype, requires_grad) in enumerate(calls, start=1):
        before = counter.frame_count
        compiled_shift(torch.randn(shape, dtype=dtype, requires_grad=requires_grad))
        if counter.frame_count > before:
            compiling.add(number)
    return compiling
"""
_COPIED_CALLS = """
def compiling_calls(calls):
    return {1, 3, 5, 6, 7, 8} if len(calls) == 9 else {1, 2, 4}
"""

WRONG += [
    Wrong(
        "11",
        "ex1_graph_breaks",
        "print does not break",
        _graph_breaks(_BREAKING - {"print"}),
        r"^graph_breaks is off for 1 of these 13 steps:\n  'print' alone: you predict 0, no break, but explain finds "
        r"one: can a graph of tensor operations print\?\ngraph_breaks is off for 1 function\(s\):\n  A ",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "an if on a shape breaks",
        _graph_breaks(_BREAKING | {"shape_if"}),
        r"'shape_if' alone: you predict 1, a break that explain does not find: is a tensor's shape known",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "torch.where breaks like an if",
        _graph_breaks(_BREAKING | {"where"}),
        r"'where' alone: you predict 1, a break that explain does not find: does torch.where need a Python `if`\?",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "only reading a value breaks",
        _graph_breaks(_BREAKING - {"nonzero", "mask"}),
        r"off for 2 of these 13 steps:\n  'mask' alone: you predict 0, [^\n]*\n  'nonzero' alone: you predict 0",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "only .item() reads a value",
        _graph_breaks(_BREAKING - {"float", "tolist"}),
        r"off for 2 of these 13 steps:\n  'float' alone: [^\n]*\n  'tolist' alone: ",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "an if on a value does not break",
        _graph_breaks(_BREAKING - {"value_if"}),
        r"'value_if' alone: you predict 0, no break, but explain finds one: can a graph hold a Python `if`",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "a loop breaks",
        _graph_breaks(_BREAKING | {"range_loop"}),
        r"'range_loop' alone: you predict 1, a break that explain does not find",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "counts graphs",
        _graph_breaks(_BREAKING, count="1 + sum(step in breaking for step in steps)"),
        r"^Each count is one more than explain's: explain counts breaks, the number of graphs minus one\.\n"
        r"graph_breaks is off for 13 of these 13 steps",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "any break counts once",
        _graph_breaks(_BREAKING, count="int(any(step in breaking for step in steps))"),
        r"^graph_breaks is off for 3 function\(s\) \(each step alone is right: [^\n]*\):\n"
        r"  A \[[^\n]*\]: you predict 1, explain reports 2\n",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "a repeated step counts once",
        _graph_breaks(_BREAKING, count="sum(step in breaking for step in set(steps))"),
        r"^graph_breaks is off for 1 function\(s\) \(each step alone is right: [^\n]*\):\n  B \[[^\n]*\]: "
        r"you predict 2, explain reports 3$",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "runs explain",
        _RUNS_EXPLAIN,
        r"returned -1: explain reports -1 when it captures no graph, as under the test's set_stance\('force_eager'\)",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "any break, as a bool",
        _graph_breaks(_BREAKING, count="any(step in breaking for step in steps)"),
        r"should return a number of breaks \(an int\), got bool",
        False,
    ),
    Wrong(
        "11",
        "ex1_graph_breaks",
        "the visible counts copied",
        _COPIED_COUNTS,
        r"^graph_breaks is off for 2 function\(s\) \(each step alone is right[^\n]*\):\n"
        r"  a function of the hidden tests \[[^\n]*\]: you predict 0, explain reports 2\n",
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "every new shape compiles",
        _compiling_calls(symbolic_here="False"),
        r"^compiling_calls\(CALLS\) is wrong about 1 of its 9 calls:\n  call 4 \(64 x 16 float32\) reuses a graph, "
        r"and your set has it: a graph compiled before it accepts it: a dimension whose size changed",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "dtype unguarded",
        _compiling_calls(kind_matches="graph_requires_grad == requires_grad"),
        r"^compiling_calls\(CALLS\) is wrong about 1 of its 9 calls:\n  call 5 \(64 x 16 float64\) compiles, and your "
        r"set leaves it out: no call before it passed a float64 tensor with requires_grad=False, and both are guarded$",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "requires_grad unguarded",
        _compiling_calls(kind_matches="graph_dtype == dtype"),
        r"call 6 \(64 x 16 float32, requires_grad\) compiles, and your set leaves it out: no call before it passed a "
        r"float32 tensor with requires_grad=True",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "no size-1 graph",
        _compiling_calls(symbolic_accepts="True", symbolic_here="dim in symbolic"),
        r"call 7 \(1 x 16 float32\) compiles, and your set leaves it out: a size of 1 is specialised",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "symbolic from the start",
        _compiling_calls(symbolic_here="size >= 2"),
        r"^compiling_calls\(CALLS\) is wrong about 2 of its 9 calls:\n  call 3 \(32 x 16 float32\) compiles, [^\n]*\n"
        r"  call 8 \(64 x 32 float32\) compiles, ",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "every dimension symbolic after one changes",
        _compiling_calls(symbolic_here="symbolic and size >= 2"),
        r"^compiling_calls\(CALLS\) is wrong about 1 of its 9 calls:\n  call 8 \(64 x 32 float32\) compiles, and your "
        r"set leaves it out: no graph compiled before it accepts these sizes",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "sizes stay fixed when a new dtype compiles",
        _compiling_calls(
            remember="first = first or shape; symbolic |= {dim for dim, (was, size) in enumerate(zip(first, shape)) "
            "if size != was and any((d, g) == (dtype, requires_grad) for _, d, g in graphs)}"
        ),
        r"^compiling_calls\(CALLS_2\) is wrong about 1 of its 5 calls:\n  call 3 \(64 x 16 float64\) reuses a graph, "
        r"and your set has it: a graph compiled before it accepts it",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "only the latest graph kept",
        _compiling_calls(searched="graphs[-1:]"),
        r"^compiling_calls\(CALLS_2\) is wrong about 1 of its 5 calls:\n  call 5 \(32 x 16 float64\) reuses a graph, "
        r"and your set has it: call 2 passed the same kind of tensor, so the graph that served it serves this "
        r"call too$",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "compiles shift to find out",
        _COMPILES_SHIFT,
        r"^compiling_calls\(CALLS\) is wrong about 6 of its 9 calls:\n  call 1 \(8 x 16 float32\) compiles, and your "
        r"set leaves it out: the first call always compiles \(a function that compiles shift to find out sees "
        r"nothing here",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "counted from 0",
        _compiling_calls(start="0"),
        "call numbers run from 1 to 9, got 0",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "a list",
        _compiling_calls(result="sorted(compiling)"),
        r"compiling_calls\(\.\.\.\) should be a set, got list",
        False,
    ),
    Wrong(
        "11",
        "ex3_compiling_calls",
        "the visible answers copied",
        _COPIED_CALLS,
        r"^compiling_calls\(\[1 x 48 float32; [^\n]*\]\) is wrong about 1 of its 6 calls:\n  call 6 \(1 x 16 float32\) "
        r"compiles, and your set leaves it out",
    ),
]
