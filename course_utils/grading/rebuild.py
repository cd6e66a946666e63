"""The notebook that is graded: the instructor's notebook with only the learner's answers in it.

Contract: ``read_submission`` turns a file's bytes into a notebook or an honest reason why
not (empty, too large, not UTF-8, not JSON, not a notebook); old nbformat versions are
upgraded. ``rebuild`` starts from the release (cell order, ids, checksums), restores every
locked and test cell from the gradebook (hidden tests included, exactly as nbgrader's
``OverwriteCells`` would, and also when the learner deleted, edited, duplicated or stripped
them), and takes from the submission only the code of the solution cells, matched by
``grade_id``, or, when the metadata was stripped, by the stub's signature line. Cells the
learner added are not run: answers belong in the solution cells. ``with_grader_cells`` adds
the preamble and a guard before each test cell; ``without_grader_cells`` removes them and
puts the grading notes on top.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

from course_utils.grading.guard import GUARD, PREAMBLE, ROLE_KEY

__all__ = [
    "MAX_SUBMISSION_BYTES",
    "Rebuilt",
    "fail_all_tests",
    "is_test",
    "read_submission",
    "rebuild",
    "role",
    "with_grader_cells",
    "without_grader_cells",
]

MAX_SUBMISSION_BYTES = 20 * 1024 * 1024


@dataclass
class Rebuilt:
    """The notebook to grade and what the grader noticed on the way."""

    nb: NotebookNode
    notes: list[str] = field(default_factory=list)
    runnable: bool = True


def _meta(cell: NotebookNode) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def is_test(cell: NotebookNode) -> bool:
    meta = _meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _is_answer(cell: NotebookNode) -> bool:
    return cell.get("cell_type") == "code" and bool(_meta(cell).get("solution"))


def role(cell: NotebookNode) -> str | None:
    """``preamble``, ``guard`` or ``notes`` for the grader's own cells, else None."""
    return cell.get("metadata", {}).get(ROLE_KEY, {}).get("role")


def read_submission(data: bytes) -> tuple[NotebookNode | None, str | None, int | None]:
    """(notebook as nbformat 4, None, original major version) or (None, why it cannot be read, None)."""
    if len(data) > MAX_SUBMISSION_BYTES:
        return None, f"the file is {len(data) / 1e6:.0f} MB, over the {MAX_SUBMISSION_BYTES / 1e6:.0f} MB limit", None
    if not data.strip():
        return None, "the file is empty", None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"the file is not UTF-8 text (byte {error.start}), so it is not a saved notebook", None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as error:
        return None, f"the file is not valid JSON, probably not saved completely ({str(error)[:120]})", None
    version = raw.get("nbformat") if isinstance(raw, dict) else None
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises many types for many kinds of garbage
        return None, f"the file is JSON but not a notebook ({type(error).__name__}: {str(error)[:120]})", None
    if not isinstance(nb.get("cells"), list):
        return None, "the file is JSON but not a notebook (no list of cells)", None
    return nb, None, version if isinstance(version, int) else None


def _signature(source: str) -> str | None:
    """The first ``def``/``class`` line of a stub, which a learner's answer keeps."""
    for line in source.splitlines():
        if line.startswith(("def ", "class ", "async def ")):
            return line.strip()
    return None


def _answers(submitted: NotebookNode, wanted: list[tuple[str, str | None]], notes: list[str]) -> dict[str, str]:
    """grade_id -> the learner's code for each solution cell that can be found."""
    found: dict[str, str] = {}
    used: set[int] = set()
    ids = {grade_id for grade_id, _ in wanted}
    for index, cell in enumerate(submitted.cells):
        grade_id = _meta(cell).get("grade_id")
        if cell.get("cell_type") != "code" or grade_id not in ids:
            continue
        if grade_id in found:
            notes.append(f"`{grade_id}` appears more than once; the first copy was graded.")
            continue
        found[grade_id] = cell.source
        used.add(index)
    for grade_id, signature in wanted:
        if grade_id in found or signature is None:
            continue
        for index, cell in enumerate(submitted.cells):
            if index in used or cell.get("cell_type") != "code" or is_test(cell):
                continue
            if signature in (line.strip() for line in cell.source.splitlines()):
                found[grade_id] = cell.source
                used.add(index)
                notes.append(f"`{grade_id}` had no nbgrader metadata; the cell defining `{signature}` was graded.")
                break
    return found


def rebuild(
    data: bytes,
    released: NotebookNode,
    locked_sources: dict[str, tuple[str, str]],
) -> Rebuilt:
    """The notebook to grade from a submission's bytes.

    ``released`` is the student version; ``locked_sources`` maps the grade_id of every
    locked cell to its (source, checksum) in the gradebook.
    """
    nb = copy.deepcopy(released)
    for cell in nb.cells:
        grade_id = _meta(cell).get("grade_id")
        if grade_id in locked_sources and not _is_answer(cell):
            cell.source, cell.metadata.nbgrader["checksum"] = locked_sources[grade_id]
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    submitted, problem, version = read_submission(data)
    if submitted is None:
        return Rebuilt(
            fail_all_tests(nb, problem or "unreadable"), [f"Not graded: {problem}. Every test scores 0."], False
        )
    notes = []
    if version is not None and version < 4:
        notes.append(f"The notebook was in the old nbformat {version}; it was converted to nbformat 4.")
    wanted = [(_meta(c)["grade_id"], _signature(c.source)) for c in nb.cells if _is_answer(c)]
    answers = _answers(submitted, wanted, notes)
    missing = [grade_id for grade_id, _ in wanted if grade_id not in answers]
    if missing:
        notes.append("No answer found for " + ", ".join(f"`{g}`" for g in missing) + " (the stub was graded).")
    for cell in nb.cells:
        if _is_answer(cell) and _meta(cell)["grade_id"] in answers:
            cell.source = answers[_meta(cell)["grade_id"]]
    kernel = submitted.get("metadata", {}).get("kernelspec", {})
    if isinstance(kernel, dict) and kernel.get("name") not in (None, "python3"):
        notes.append(f"The notebook asked for kernel `{kernel.get('name')}`; it was graded with Python 3.")
    return Rebuilt(nb, notes)


def _grader_cell(source: str, kind: str) -> NotebookNode:
    return new_code_cell(source, metadata={ROLE_KEY: {"role": kind}})


def with_grader_cells(nb: NotebookNode) -> NotebookNode:
    """A copy with the preamble first and a guard before each test cell."""
    out = copy.deepcopy(nb)
    cells = [_grader_cell(PREAMBLE, "preamble")]
    for cell in out.cells:
        if is_test(cell):
            cells.append(_grader_cell(GUARD, "guard"))
        cells.append(cell)
    out.cells = cells
    return out


def without_grader_cells(nb: NotebookNode, notes: list[str]) -> NotebookNode:
    """The grader's code cells removed, and the notes (if any) as a markdown cell on top."""
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if role(c) not in {"preamble", "guard", "notes"}]
    if notes:
        text = "## Grading notes\n\n" + "\n".join(f"- {note}" for note in notes)
        out.cells.insert(0, new_markdown_cell(text, metadata={ROLE_KEY: {"role": "notes"}}))
    return out


def fail_all_tests(nb: NotebookNode, reason: str) -> NotebookNode:
    """Give every test cell an error output (for a submission that cannot be run)."""
    for cell in nb.cells:
        if is_test(cell):
            cell.outputs = [new_output("error", ename="NotGraded", evalue=reason, traceback=[f"NotGraded: {reason}"])]
    return nb
