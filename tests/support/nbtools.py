"""Shared helpers for the notebook tests: find the notebooks, classify and run cells."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode
from nbgrader.preprocessors import ClearSolutions

from tests.support.paths import ROOT

NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def nbgrader_meta(cell: NotebookNode) -> dict:
    """The cell's nbgrader metadata (empty for ordinary cells)."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def is_test_cell(cell: NotebookNode) -> bool:
    """An autograded test cell: code, ``grade: true``, not a solution."""
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_solution_cell(cell: NotebookNode) -> bool:
    return cell.cell_type == "code" and bool(nbgrader_meta(cell).get("solution"))


def read(path: Path) -> NotebookNode:
    return nbformat.read(path, as_version=4)


def clear_solutions(nb: NotebookNode) -> NotebookNode:
    """The notebook as a learner first sees it: each solution replaced by nbgrader's stub."""
    cleared, _ = ClearSolutions().preprocess(copy.deepcopy(nb), {})
    return cleared


def execute(nb: NotebookNode, timeout: int = 180) -> NotebookNode:
    """Run every cell in a fresh kernel, keeping errors as outputs instead of stopping."""
    client = NotebookClient(
        nb,
        timeout=timeout,
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()
    return nb


def error_of(cell: NotebookNode) -> str | None:
    """``ename: evalue`` of the cell's error output, or None if it ran cleanly."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}"
    return None


def exercise_problems(executed: NotebookNode) -> list[str]:
    """What is wrong with a notebook that was run with its solutions removed.

    Every graded test cell must have raised; no other cell (solution cells aside) may have
    raised; no output may carry a deprecation warning.
    """
    problems = []
    for index, cell in enumerate(executed.cells):
        if cell.cell_type != "code":
            continue
        error = error_of(cell)
        name = nbgrader_meta(cell).get("grade_id", f"cell {index}")
        if is_test_cell(cell) and error is None:
            problems.append(f"test cell {name} passes without its solution")
        elif not is_test_cell(cell) and not is_solution_cell(cell) and error is not None:
            problems.append(f"cell {index} fails when solutions are missing ({error}): it depends on an exercise")
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("output_type") == "stream" else ""
            if "DeprecationWarning" in text or "FutureWarning" in text:
                problems.append(f"cell {index} prints a deprecation warning: {text.strip()[:200]}")
    return problems
