"""Notebook 11's graded tests pass the reference answers and fail plausible wrong ones.

The notebook's setup cell (as nbgrader runs it, with ``NBGRADER_EXECUTION`` set) and the
code cells of its exercise section run once, in this process, in one namespace. Then each
answer (the notebook's own solution, or a wrong answer a learner might plausibly write) is
executed in that namespace, followed by the exercise's full test cell, hidden tests
included. nbval and ``tests/test_exercises.py`` already show that the solutions pass and
that an empty answer fails; this file keeps the wrong answers failing.
"""

from __future__ import annotations

import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbtools import NOTEBOOK_DIR, is_solution_cell, is_test_cell, nbgrader_meta, read

NOTEBOOK = NOTEBOOK_DIR / "11_fuse_and_compile_with_torch_compile.ipynb"

WRONG = {
    "ex1_graph_breaks": {
        "an if on a shape breaks": 'GRAPH_BREAKS = {"normalise": 1, "log_and_scale": 2, "relu_if_positive": 1, '
        '"count_large": 1}',
        "print does not break": 'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 1, "relu_if_positive": 1, '
        '"count_large": 1}',
        "nonzero does not break": 'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 2, "relu_if_positive": 1, '
        '"count_large": 0}',
        "counts graphs, not breaks": 'GRAPH_BREAKS = {"normalise": 1, "log_and_scale": 3, "relu_if_positive": 2, '
        '"count_large": 2}',
    },
    "ex2_clip_in_one_graph": {
        "keeps .item()": "def clip_in_one_graph(x):\n    peak = x.abs().max().item()\n"
        "    return torch.tanh(x / max(peak, 1.0))",
        "always divides by the peak": "def clip_in_one_graph(x):\n    return torch.tanh(x / x.abs().amax())",
        "clamps the values instead": "def clip_in_one_graph(x):\n    return torch.tanh(torch.clamp(x, -1.0, 1.0))",
        "the original, printing": "def clip_in_one_graph(x):\n    return clip_and_report(x)",
    },
    "ex3_compiling_calls": {
        "every new shape compiles": "COMPILING_CALLS = {1, 3, 4, 5, 6, 7, 8}",
        "requires_grad is not guarded": "COMPILING_CALLS = {1, 3, 5, 7, 8}",
        "no size-1 specialisation": "COMPILING_CALLS = {1, 3, 5, 6, 8}",
        "dynamic from the start": "COMPILING_CALLS = {1, 5, 6, 7}",
    },
    "ex4_break_even_calls": {
        "floor plus one": "def break_even_calls(c, e, k):\n    if min(c, e, k) < 0:\n        raise ValueError\n"
        "    return None if e <= k else int(c // (e - k)) + 1",
        "infinity for no gain": "def break_even_calls(c, e, k):\n    if min(c, e, k) < 0:\n        raise ValueError\n"
        "    return math.inf if e <= k else max(1, math.ceil(c / (e - k)))",
        "zero calls for a free compile": "def break_even_calls(c, e, k):\n    if min(c, e, k) < 0:\n"
        "        raise ValueError\n    return None if e <= k else math.ceil(c / (e - k))",
        "ignores the compiled time": "def break_even_calls(c, e, k):\n    if min(c, e, k) < 0:\n"
        "        raise ValueError\n    return None if e <= k else max(1, math.ceil(c / e))",
        "accepts negative times": "def break_even_calls(c, e, k):\n"
        "    return None if e <= k else max(1, math.ceil(c / (e - k)))",
    },
}


def _python(source: str) -> str:
    """Cell source as plain Python (IPython magics such as the setup cell's %pip become calls)."""
    return TransformerManager().transform_cell(source)


@pytest.fixture(scope="module")
def notebook():
    """(namespace after setup and the exercise section's statement cells, solutions, test cells)."""
    cells = read(NOTEBOOK).cells
    start = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and "## Exercises" in c.source)
    namespace: dict = {"__name__": "notebook_11"}
    setup = next(c for c in cells if c.cell_type == "code")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NBGRADER_EXECUTION", "autograde")  # as when graded: no compiler checks needed
        exec(_python(setup.source), namespace)
    solutions, tests = {}, {}
    for cell in cells[start:]:
        if cell.cell_type != "code":
            continue
        grade_id = nbgrader_meta(cell).get("grade_id")
        if is_solution_cell(cell):
            solutions[grade_id] = cell.source
        elif is_test_cell(cell):
            tests[grade_id.removesuffix("_tests")] = cell.source
        else:
            exec(_python(cell.source), namespace)
    assert set(solutions) == set(tests) == set(WRONG), "every exercise needs wrong answers here"
    return namespace, solutions, tests


def _grade(notebook, exercise: str, answer: str) -> None:
    namespace, _, tests = notebook
    exec(answer, namespace)
    exec(tests[exercise], namespace)


@pytest.mark.parametrize("exercise", sorted(WRONG))
def test_the_reference_answer_passes(notebook, exercise):
    _grade(notebook, exercise, notebook[1][exercise])


@pytest.mark.parametrize(
    ("exercise", "answer"),
    [(exercise, name) for exercise, answers in sorted(WRONG.items()) for name in answers],
)
def test_a_plausible_wrong_answer_fails(notebook, exercise, answer):
    with pytest.raises(AssertionError):
        _grade(notebook, exercise, WRONG[exercise][answer])
