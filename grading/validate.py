"""The learner's check before submitting: ``nbgrader validate``'s verdict, graded as ``autograde`` will.

Contract: ``validate(path, course)`` reports what ``nbgrader validate`` checks, and grades
the notebook the way ``course autograde`` will with the tests the learner can see:

* **changed cells**: a test or other locked cell whose content (or type) the learner
  changed, judged against the release when the course has one
  (``release/<assignment>/<notebook>.ipynb`` of the same name), else against the cell's
  own checksum, as ``nbgrader validate`` does. Grading uses the original, so the
  verdict below is for the original;
* **tests**: each visible test cell run after the learner's cells, in the sandbox and
  limits of ``autograde``, with the files beside the notebook in its working directory;
  passed or failed with the error, by nbgrader's own rule (``determine_grade``);
* **written answers** and hand-graded code answers: unanswered (still the released
  text: nbgrader's "You did not provide a response", scores 0) or answered (graded by
  hand later).

``Validation.ok`` is true when nothing changed, no test failed and every answer was
given: then ``course validate`` exits 0. ``Validation.to_dict()`` is the same verdict as
plain data (a stable interface for editor integrations such as a Validate button).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import nbformat

from grading.coursedir import Course, counted
from grading.jobs import Task
from grading.measure import measured_tests
from grading.sandbox.execute import GRADER_PROBLEM
from grading.sandbox.protections import Limits, Protections, detect
from grading.sandbox.workers import WorkerPool
from grading.sanitize import (
    SourceNotebook,
    changed_cells,
    nbgrader_meta,
    read_submission,
    with_grader_cells,
    without_grader_cells,
)
from grading.sanitize import sanitize_and_harden as prepare

__all__ = ["CellVerdict", "Validation", "find_release", "validate"]


@dataclass
class CellVerdict:
    """One graded cell: a test, a written answer or a hand-graded code answer."""

    grade_id: str
    kind: str  # "test", "written answer", "code answer"
    points: float
    status: str  # "pass", "fail" (tests); "unanswered", "answered" (graded by hand)
    message: str = ""


@dataclass
class Validation:
    cells: list[CellVerdict] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # grade_ids of locked cells the learner changed
    notes: list[str] = field(default_factory=list)
    release: str | None = None  # the release compared against, if any

    @property
    def tests(self) -> list[tuple[str, float, bool, str]]:
        """(grade_id, points, passed, message) of each test cell."""
        return [(c.grade_id, c.points, c.status == "pass", c.message) for c in self.cells if c.kind == "test"]

    @property
    def score(self) -> float:
        return sum(points for _, points, passed, _ in self.tests if passed)

    @property
    def max_score(self) -> float:
        return sum(points for _, points, _, _ in self.tests)

    @property
    def unanswered(self) -> list[str]:
        return [c.grade_id for c in self.cells if c.status == "unanswered"]

    @property
    def ok(self) -> bool:
        return bool(self.cells) and not self.changed and all(c.status in ("pass", "answered") for c in self.cells)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "score": self.score,
            "max_score": self.max_score,
            "cells": [asdict(c) for c in self.cells],
            "changed": self.changed,
            "unanswered": self.unanswered,
            "notes": self.notes,
            "release": self.release,
        }

    def text(self) -> str:
        lines = [
            f"CHANGED  {name}: you changed this cell; grading uses the original (nbgrader validate: "
            "THE CONTENTS OF A TEST CELL HAVE CHANGED)"
            for name in self.changed
        ]
        for cell in self.cells:
            label = {"pass": "PASS", "fail": "FAIL", "unanswered": "NO ANSWER", "answered": "ANSWERED"}[cell.status]
            detail = {
                "fail": f": {cell.message}",
                "unanswered": ": you did not provide a response (scores 0)",
                "answered": f": {cell.kind}, graded by hand",
            }.get(cell.status, "")
            lines.append(f"{label}  {cell.grade_id} ({cell.points:g} pt){detail}")
        lines += [f"note: {note}" for note in self.notes]
        manual = sum(c.points for c in self.cells if c.kind != "test")
        by_hand = f"; {counted(manual, 'point')} {'is' if manual == 1 else 'are'} graded by hand" if manual else ""
        later = f"hidden tests add more at grading time{by_hand}"
        lines.append(f"visible tests: {self.score:g} / {self.max_score:g} points ({later})")
        return "\n".join(lines)


def find_release(course: Course | None, notebook: Path) -> Path | None:
    """The released notebook of the same name in ``course`` (None when there is none, or several)."""
    if course is None or not course.release.is_dir():
        return None
    found = sorted(course.release.glob(f"*/{notebook.stem}.ipynb"))
    return found[0] if len(found) == 1 else None


def validate(
    path: Path, course: Course | None = None, limits: Limits | None = None, protections: Protections | None = None
) -> Validation:
    """Validate the notebook at ``path``; see the module docstring."""
    from nbgrader.utils import determine_grade, is_grade, is_solution

    path = Path(path)
    data = path.read_bytes()
    result = Validation()
    learner, problem, _ = read_submission(data)
    if learner is None:
        result.notes.append(f"Cannot validate: {problem}.")
        return result
    release = find_release(course, path)
    if release is not None:
        spec = SourceNotebook.from_release(nbformat.read(release, as_version=4), release.parent.name, path.stem)
        result.release = str(release)
    else:
        spec = SourceNotebook.from_release(learner, path.parent.name, path.stem, trust_sources=False)
    if not spec.cells:
        result.notes.append(
            "No graded cells: this notebook has no nbgrader metadata (open the released version, or keep its cells)."
        )
        return result
    result.changed = changed_cells(learner, spec)
    prepared = prepare(data, spec)
    result.notes += [n for n in prepared.notes if "had been edited" not in n]
    protections = protections or detect()
    hide = course.hidden_paths() if course else []
    task = Task(with_grader_cells(prepared.nb), files=str(path.parent))
    measured: set[str] = set()
    if release is not None:  # measured tests only from the release's test cells, never from the learner's file
        tests, problems = measured_tests(prepared.nb, course.root if course else None)
        task = replace(task, measured=tuple(tests))
        measured = {m["grade_id"] for m in tests}
        result.notes += problems
    with WorkerPool(1, protections, limits or Limits(), hide) as pool:
        pool.submit("nb", task)
        [(_, outcome)] = list(pool.results())
    if outcome.nb is None:
        result.notes.append(f"Grader error: {outcome.error}")
        return result
    result.notes += outcome.notes
    nb = without_grader_cells(nbformat.from_dict(outcome.nb), [])
    for cell in nb.cells:
        if not is_grade(cell):
            continue
        grade_id = nbgrader_meta(cell)["grade_id"]
        try:
            score, points = determine_grade(cell)
        except ValueError as error:  # the test's last value, read as partial credit, is above its points
            points = float(nbgrader_meta(cell).get("points") or 0)
            message = f"{GRADER_PROBLEM}: nbgrader cannot score this test ({error}); autograde cannot either"
            result.cells.append(CellVerdict(grade_id, "test", points, "fail", message))
            continue
        if is_solution(cell):
            kind = "written answer" if cell.cell_type == "markdown" else "code answer"
            result.cells.append(CellVerdict(grade_id, kind, points, "unanswered" if score == 0 else "answered"))
            continue
        errors = [error_line(o) for o in cell.outputs if o.get("output_type") == "error"]
        if grade_id in measured and not errors:
            report = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream").strip()
            errors = [f"{score:g} of {points:g} points, measured outside the notebook:\n{report}"]
        elif not errors and score != points:
            stderr = any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.outputs)
            errors = ["the test wrote to stderr (any stderr output fails a test)" if stderr else "partial credit"]
        status = "pass" if score == points else "fail"
        result.cells.append(CellVerdict(grade_id, "test", points, status, "; ".join(errors)))
    return result


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FAILING_LINE = re.compile(r"^-+> *\d+ (.*)$")


def error_line(output: dict) -> str:
    """``ename: the whole first line of the message``; for an error without a message, the line that raised it.

    A bare ``assert x == 2`` raises ``AssertionError`` with an empty message: the learner
    then needs the line (IPython's traceback marks it with ``---->``).
    """
    ename = str(output.get("ename", "Error"))
    lines = str(output.get("evalue", "")).strip().splitlines()
    if lines:
        return f"{ename}: {lines[0]}"
    marked = [m[1].strip() for line in output.get("traceback", []) for part in _ANSI.sub("", str(line)).splitlines()
              if (m := _FAILING_LINE.match(part.strip()))]  # fmt: skip
    return f"{ename} at `{marked[-1]}`" if marked else f"{ename} (raised without a message)"
