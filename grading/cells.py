"""The cells of a graded notebook as the grader sees them: tests, the grader's own cells, failures.

Contract: ``is_test``, ``role`` and ``hidden_lines`` read a cell's metadata and never change
it; ``role`` names the grader's own cells (metadata under ``guard.ROLE_KEY``, which only the
grader writes). ``with_grader_cells`` returns a copy with the grader's cells put in (the
preamble, a check before each test cell, a closing cell after it), ``without_grader_cells``
a copy with them taken out again and the grading notes on top (``notes_cell``).
``fail_cell`` and ``fail_all_tests`` change the cells they are given: a test cell with an
error output is one nbgrader scores as failed. Nothing here imports nbgrader.
"""

from __future__ import annotations

import copy

from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

from grading.guard import ROLE_KEY, closing, guard, preamble
from grading.untrusted import markdown_text

__all__ = [
    "GRADER_ROLES",
    "NOTES_CELL_ID",
    "fail_all_tests",
    "fail_cell",
    "hidden_lines",
    "is_test",
    "nbgrader_meta",
    "notes_cell",
    "role",
    "with_grader_cells",
    "without_grader_cells",
]


def nbgrader_meta(cell: NotebookNode) -> dict:
    """A cell's nbgrader metadata, or an empty dict when it has none or it is not a dict."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def is_test(cell: NotebookNode) -> bool:
    """An autograded test cell: code, graded, not an answer."""
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def role(cell: NotebookNode) -> str | None:
    """``preamble``, ``guard``, ``close`` or ``notes`` for the grader's own cells, else None.

    Only the grader writes this metadata: ``sanitize.sanitize_and_harden`` removes it from every submitted cell.
    """
    value = cell.get("metadata", {}).get(ROLE_KEY, {})
    return value.get("role") if isinstance(value, dict) else None


def hidden_lines(cell: NotebookNode) -> list[int]:
    """The line numbers (from 0) of a test cell's hidden tests, as ``sanitize.sanitize_and_harden`` recorded them."""
    value = cell.get("metadata", {}).get(ROLE_KEY, {})
    lines = value.get("hidden_lines", []) if isinstance(value, dict) else []
    return [int(i) for i in lines if isinstance(i, int)]


def _grader_cell(source: str, kind: str) -> NotebookNode:
    """A code cell of the grader's own, its ``role`` set to ``kind``."""
    return new_code_cell(source, metadata={ROLE_KEY: {"role": kind}})


def with_grader_cells(nb: NotebookNode) -> NotebookNode:
    """A copy with the preamble first, and a check before and a closing cell after each test cell."""
    out = copy.deepcopy(nb)
    cells = [_grader_cell(preamble([c.source for c in nb.cells if c.cell_type == "code"]), "preamble")]
    for cell in out.cells:
        if is_test(cell):
            cells.append(_grader_cell(guard(len(cells), hidden_lines(cell)), "guard"))
            cells.append(cell)
            cells.append(_grader_cell(closing(len(cells)), "close"))
        else:
            cells.append(cell)
    out.cells = cells
    return out


GRADER_ROLES = frozenset({"preamble", "guard", "close", "notes"})


def without_grader_cells(nb: NotebookNode, notes: list[str]) -> NotebookNode:
    """The grader's code cells and metadata removed, and the notes (if any) as a markdown cell on top."""
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if role(c) not in GRADER_ROLES]
    for cell in out.cells:
        cell.get("metadata", {}).pop(ROLE_KEY, None)
    count = 0
    for cell in out.cells:  # number the cells that ran 1, 2, ... as if the grader's had not been there
        if cell.get("cell_type") == "code" and cell.get("execution_count") is not None:
            count += 1
            cell.execution_count = count
            for output in cell.get("outputs", []):
                if "execution_count" in output:
                    output["execution_count"] = count
    if notes:
        out.cells.insert(0, notes_cell(notes, out))
    return out


NOTES_CELL_ID = "grading-notes"


def notes_cell(notes: list[str], nb: NotebookNode | None = None) -> NotebookNode:
    """The markdown cell of grading notes that goes on top of ``nb``.

    Its id is fixed (``grading-notes``, or ``grading-notes-2``, ... when a cell of ``nb``
    already has it), so two identical submissions give identical autograded files. Each
    note is plain text (``untrusted.markdown_text``), never markup: a note quotes what a
    submission controls (its kernelspec's name, cell names, error messages), so a backtick
    or an HTML tag in it is shown as written wherever the cell is rendered.
    """
    text = "## Grading notes\n\n" + "\n".join(f"- {markdown_text(note)}" for note in notes)
    cell = new_markdown_cell(text, metadata={ROLE_KEY: {"role": "notes"}})
    taken = {c.get("id") for c in nb.cells} if nb is not None else set()
    cell.id = next(name for n in range(1, len(taken) + 2) if (name := _numbered(NOTES_CELL_ID, n)) not in taken)
    return cell


def _numbered(name: str, n: int) -> str:
    """``name`` for the first, ``name-n`` for the n-th."""
    return name if n == 1 else f"{name}-{n}"


def fail_cell(cell: NotebookNode, ename: str, message: str) -> None:
    """Give ``cell`` one error output (its other errors removed): nbgrader scores a test with one as failed."""
    cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "error"]
    cell.outputs.append(new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"]))


def fail_all_tests(nb: NotebookNode, reason: str) -> NotebookNode:
    """Give every test cell an error output (for a submission that cannot be run)."""
    for cell in nb.cells:
        if is_test(cell):
            cell.outputs = [new_output("error", ename="NotGraded", evalue=reason, traceback=[f"NotGraded: {reason}"])]
    return nb
