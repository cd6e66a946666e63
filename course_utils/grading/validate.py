"""The learner's check before submitting: which visible tests pass, and the score they give.

Contract: ``validate(path)`` grades a notebook the way ``autograde`` will, with the tests
the learner can see: when the matching release (``grading/release/<stem>/<stem>.ipynb``)
exists, the notebook is rebuilt from it (so edited or deleted test cells are restored and
only the solution cells count, as at grading time); otherwise it runs as it is. It runs in
the same sandbox and limits as autograde and returns a ``Validation`` (per test: points,
passed, the error message).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_utils.grading.course import Course
from course_utils.grading.rebuild import is_test, read_submission, rebuild, with_grader_cells, without_grader_cells
from course_utils.grading.sandbox import Limits, Protections, detect
from course_utils.grading.worker import WorkerPool

__all__ = ["Validation", "validate"]


@dataclass
class Validation:
    tests: list[tuple[str, float, bool, str]] = field(default_factory=list)  # grade_id, points, passed, message
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(points for _, points, passed, _ in self.tests if passed)

    @property
    def max_score(self) -> float:
        return sum(points for _, points, _, _ in self.tests)

    def text(self) -> str:
        lines = [
            f"{'PASS' if ok else 'FAIL'}  {gid} ({points:g} pt){'' if ok else ': ' + msg}"
            for gid, points, ok, msg in self.tests
        ]
        lines += [f"note: {note}" for note in self.notes]
        lines.append(
            f"visible tests: {self.score:g} / {self.max_score:g} points (hidden tests add more at grading time)"
        )
        return "\n".join(lines)


def validate(
    path: Path, course: Course | None = None, limits: Limits | None = None, protections: Protections | None = None
) -> Validation:
    """Run ``path`` with its visible tests; see the module docstring."""
    from nbgrader.utils import determine_grade

    data = Path(path).read_bytes()
    stem = Path(path).stem
    release = course.notebook(course.release, stem) if course else None
    result = Validation()
    if release is not None and release.is_file():
        released = nbformat.read(release, as_version=4)
        locked = {
            c.metadata.nbgrader["grade_id"]: (c.source, c.metadata.nbgrader.get("checksum", ""))
            for c in released.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("locked") and "grade_id" in c.metadata.nbgrader
        }
        rebuilt = rebuild(data, released, locked)
        nb, result.notes, runnable = rebuilt.nb, rebuilt.notes, rebuilt.runnable
    else:
        nb, problem, _ = read_submission(data)
        runnable = nb is not None
        if nb is None:
            result.notes.append(f"Cannot validate: {problem}.")
            return result
    if runnable:
        protections = protections or detect()
        hide = [course.root] if course else []
        [(_, outcome)] = list(WorkerPool(1, protections, limits or Limits(), hide).run([("nb", with_grader_cells(nb))]))
        if "error" in outcome:
            result.notes.append(f"Grader error: {outcome['error']}")
            return result
        result.notes += outcome["notes"]
        nb = without_grader_cells(nbformat.from_dict(outcome["nb"]), [])
    for cell in nb.cells:
        if is_test(cell):
            score, points = determine_grade(cell)
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs if o.get("output_type") == "error"]
            if not errors and score != points:
                errors = ["the test wrote to stderr (any stderr output fails a test)"]
            result.tests.append((cell.metadata.nbgrader["grade_id"], points, score == points, "; ".join(errors)[:300]))
    if not result.tests:
        result.notes.append("No graded test cells found (was the nbgrader metadata stripped?).")
    return result
