"""The one home of the wrong answers, and their harness: a wrong answer, and running one exercise with it.

``run_exercise`` runs the notebook's setup cell, the exercise's own code cells (the functions
or data it asks about, as in notebook 11), an answer (the notebook's solution by default) and
the exercise's test cell in a fresh namespace. ``hidden=False`` runs only the visible part of
the test cell: what a learner's Validate runs.

Each ``nbNN.py`` module of this package holds every case for notebook NN, in a list named
``WRONG``; ``every_wrong_answer()`` gathers them. ``tests/notebooks/test_wrong_answers.py`` runs
them all through the visible tests, ``tests/grading/sandbox/test_leaks.py`` through grading; neither
keeps a case of its own.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path

from IPython.core.inputtransformer2 import TransformerManager

from tests.support.nbtools import NOTEBOOK_DIR, is_solution_cell, is_test_cell, nbgrader_meta, read

__all__ = ["HIDDEN", "Wrong", "every_wrong_answer", "notebook_path", "run_exercise"]

HIDDEN = "### BEGIN HIDDEN TESTS"


@dataclass(frozen=True)
class Wrong:
    notebook: str  # file name prefix, "05"
    grade_id: str  # the solution cell it replaces
    why: str  # what the answer gets wrong (the test id)
    answer: str
    match: str  # a regular expression the failure message must match
    hidden: bool = True  # False: the visible tests alone must catch it


def every_wrong_answer() -> list[Wrong]:
    """Every list named ``WRONG`` in this package's ``nbNN`` modules, in notebook order."""
    return [
        wrong
        for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
        if module.name.startswith("nb")
        for wrong in importlib.import_module(f"{__name__}.{module.name}").WRONG
    ]


def notebook_path(prefix: str) -> Path:
    (path,) = NOTEBOOK_DIR.glob(f"{prefix}_*.ipynb")
    return path


def _exercise_code(cells: list, index: int) -> list[str]:
    """Plain code cells after the exercises heading (or the previous exercise) and before cell ``index``."""
    heading = max(i for i, c in enumerate(cells[:index]) if c.cell_type == "markdown" and "## Exercises" in c.source)
    start = max([heading] + [i for i, c in enumerate(cells[:index]) if nbgrader_meta(c)])
    return [c.source for c in cells[start + 1 : index] if c.cell_type == "code" and not nbgrader_meta(c)]


def run_exercise(prefix: str, grade_id: str, answer: str | None = None, *, hidden: bool = True) -> None:
    """Setup cell, the exercise's own code cells, ``answer`` (the notebook's solution if None), its test cell."""
    cells = read(notebook_path(prefix)).cells
    setup = next(c for c in cells if c.cell_type == "code")
    index = next(i for i, c in enumerate(cells) if is_solution_cell(c) and nbgrader_meta(c)["grade_id"] == grade_id)
    test = next(c for c in cells[index + 1 :] if is_test_cell(c))
    test_source = test.source if hidden else test.source.split(HIDDEN)[0]
    namespace: dict = {"__name__": "__main__"}
    to_python = TransformerManager().transform_cell
    answer = cells[index].source if answer is None else answer
    for source in (setup.source, *_exercise_code(cells, index), answer, test_source):
        exec(compile(to_python(source), f"<{prefix} {grade_id}>", "exec"), namespace)
