"""Measured tests: test cells whose points a referee decides outside the learner's kernel.

Some grades cannot be decided where the learner's code runs: a speedup measured in the
learner's interpreter can be bought by slowing the baseline, stopping the clock early or
rebinding the function that turns a ratio into points. An instructor marks such a test
cell with a line in its source::

    # course: measure REFEREE ANSWER_ID [ANSWER_ID ...]

``REFEREE`` names ``REFEREE.py`` beside the course's ``nbgrader_config.py`` (a plugin of
the course, as nbgrader's late-penalty plugins are); the ``ANSWER_ID`` s are the
``grade_id`` s of the solution cells the referee needs. Under ``course``:

* the kernel does not run the cell: nothing in it is ever in the learner's interpreter;
* after the notebook has run and its kernel is gone, the worker (this process, never a
  kernel) runs ``REFEREE.referee(rounds)``. ``rounds`` (``Rounds``) holds the learner's
  answer cells and starts fresh jailed processes for timed rounds
  (``grading.sandbox.rounds``): clocks, seeds, threads and environment are the grader's;
* its ``Verdict`` becomes the cell's outputs, which nbgrader scores as any test cell: the
  report as printed text and the points as the cell's value (nbgrader's partial credit);
  an ``AssertionError`` from the referee is the learner's failure (0 points, its message
  shown); any other exception is a grader problem;
* a ``Verdict`` with ``needs_manual_grade`` (the grader could not measure: other work kept
  taking the measured CPU) keeps the points it could decide (correctness) and leaves the
  rest to the instructor: ``flag_unmeasured`` marks the cell for manual grading in the
  gradebook (nbgrader's ``needs_manual_grade``, which the formgrader lists), and the worker
  adds a grader-problem note.

The directive is read only from test cells that come from the gradebook or the release
(``sanitize`` restores them), so a learner can neither add, change nor remove one. Plain
``nbgrader autograde`` runs the cell in the kernel like any other test.
"""

from __future__ import annotations

import re
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbformat import NotebookNode
from nbformat.v4 import new_output

__all__ = [
    "Measured",
    "Rounds",
    "Verdict",
    "apply_verdict",
    "find_measured",
    "flag_unmeasured",
    "measured_tests",
    "run_referee",
    "unmeasured",
]

DIRECTIVE = re.compile(
    r"^#\s*course:\s*measure\s+(?P<referee>[A-Za-z_]\w*)(?P<answers>(?:[ \t]+[\w.-]+)*)[ \t]*$", re.M
)


@dataclass(frozen=True)
class Measured:
    """A measured test cell: its ``grade_id``, the referee's file name, the answer cells it needs."""

    grade_id: str
    referee: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    """What a referee decided: the points (at most the cell's) and the report the learner reads.

    ``needs_manual_grade``: the grader could not measure what the rest of the points depend
    on; ``points`` are those it could decide, and the instructor decides the others.
    """

    points: float
    report: str
    needs_manual_grade: bool = False


def _meta(cell: NotebookNode) -> dict:
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def find_measured(nb: NotebookNode) -> list[Measured]:
    """The measured test cells of ``nb`` (its test cells with a ``# course: measure`` line)."""
    found = []
    for cell in nb.cells:
        meta = _meta(cell)
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        match = DIRECTIVE.search(cell.source)
        if match:
            found.append(Measured(meta["grade_id"], match["referee"], tuple(match["answers"].split())))
    return found


def measured_tests(nb: NotebookNode, course_root: Path | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The measured tests of a prepared notebook whose test cells are the instructor's, for a worker job.

    Each is ``{"grade_id", "referee", "source", "answers"}``, with the referee's source
    read here (the worker may not see the course directory). A referee that is missing
    fails its test with a note for the instructor.
    """
    jobs, notes = [], []
    for measured in find_measured(nb):
        path = course_root / f"{measured.referee}.py" if course_root is not None else None
        try:
            source = path.read_text(encoding="utf-8") if path is not None else None
        except OSError:
            source = None
        if source is None:
            notes.append(
                f"Grader problem: `{measured.grade_id}` is measured by {measured.referee}.py, "
                "which is not beside the course's nbgrader_config.py; the test scores 0."
            )
        jobs.append({"grade_id": measured.grade_id, "referee": measured.referee, "source": source,
                     "answers": list(measured.answers)})  # fmt: skip
    return jobs, notes


class Rounds:
    """What a referee gets: the learner's answer cells, and fresh jailed processes for timed rounds.

    ``start(setup, side)`` starts a ``grading.sandbox.rounds`` process (see there) and
    returns it once it is ready; ``side`` ("baseline", "answer", ...) names whose process
    it is: each side keeps its own compile cache (``TORCHINDUCTOR_CACHE_DIR``) from one of
    its processes to the next, and nothing else carries over.
    """

    def __init__(
        self,
        answers: dict[str, str],
        start: Callable[[dict[str, Any], str], Any],
        deadline: float,
        cpu: str = "",
    ) -> None:
        self.answers = answers
        self._start = start
        self.deadline = deadline
        self.cpu = cpu  # what the rounds run on, in words (``cpus.Reservation.describe``)

    def remaining(self) -> float:
        """Seconds left of the measurement's time budget."""
        return self.deadline - time.monotonic()

    def start(self, setup: dict[str, Any], side: str) -> Any:  # -> grading.sandbox.rounds.RoundProcess
        if self.remaining() <= 0:
            raise TimeoutError("the measurement's time budget is used up")
        return self._start(setup, side)


def answers_of(nb: NotebookNode, grade_ids: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The learner's solution cells named ``grade_ids`` (an answer cell that is missing is empty)."""
    by_id = {_meta(c).get("grade_id"): c.source for c in nb.cells if _meta(c).get("solution")}
    return {grade_id: by_id.get(grade_id, "") for grade_id in grade_ids}


def load_referee(name: str, source: str) -> Callable[[Rounds], Verdict]:
    """The ``referee`` function of the course's ``NAME.py`` (its source as read by the pool)."""
    module = types.ModuleType(f"course_referee_{name}")
    module.__file__ = f"{name}.py"
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)  # the instructor's own plugin
    referee = getattr(module, "referee", None)
    if not callable(referee):
        raise TypeError(f"{name}.py defines no referee(rounds) function")
    return referee


def run_referee(measured: dict[str, Any], rounds: Rounds) -> Verdict | AssertionError:
    """Run one referee: its ``Verdict``, or the ``AssertionError`` that fails the learner's test."""
    referee = load_referee(measured["referee"], measured["source"])
    try:
        verdict = referee(rounds)
    except AssertionError as failure:
        return failure
    if not isinstance(verdict, Verdict):
        raise TypeError(f"{measured['referee']}.referee returned {type(verdict).__name__}, not a Verdict")
    return verdict


_MARK = "course_grading"  # the key of a verdict's execute_result metadata


def apply_verdict(cell: NotebookNode, outcome: Verdict | AssertionError) -> None:
    """The cell's outputs from the referee: report and points, or the failure (scored 0)."""
    if isinstance(outcome, Verdict):
        points = int(outcome.points) if float(outcome.points).is_integer() else outcome.points
        result = new_output(
            "execute_result", data={"text/plain": repr(points)}, execution_count=cell.get("execution_count")
        )
        if outcome.needs_manual_grade:
            result.metadata = {_MARK: {"needs_manual_grade": True}}
        cell.outputs = [new_output("stream", name="stdout", text=outcome.report.rstrip("\n") + "\n"), result]
        return
    message = str(outcome) or "the measured test failed"
    cell.outputs = [
        new_output("error", ename="AssertionError", evalue=message, traceback=[f"AssertionError: {message}"])
    ]


def unmeasured(nb: NotebookNode) -> list[str]:
    """The ``grade_id`` s of the measured tests of a graded notebook that its referee could not measure.

    Read only from measured test cells (their source is the instructor's, and their outputs
    are the referee's alone: the kernel never runs them), so no learner output can ask for it.
    """
    measured = {m.grade_id for m in find_measured(nb)}
    return [
        _meta(cell)["grade_id"]
        for cell in nb.cells
        if _meta(cell).get("grade_id") in measured
        and any(o.get("metadata", {}).get(_MARK, {}).get("needs_manual_grade") for o in cell.get("outputs", []))
    ]


def flag_unmeasured(gradebook: Any, grade_ids: list[str], notebook: str, assignment: str, student: str) -> None:
    """Mark the grades ``grade_ids`` (``unmeasured(nb)``) as needing manual grading in nbgrader's gradebook.

    Run after nbgrader's ``SaveAutoGrades``: the auto score (the points the referee could
    decide) stays, and the formgrader lists the cell for the instructor. ``pipeline.finish``
    passes the tests ``leaks.flagged_for_review`` names too (hidden text in an output that
    proves nothing): their score stays as well.
    """
    for grade_id in grade_ids:
        gradebook.find_grade(grade_id, notebook, assignment, student).needs_manual_grade = True
    if grade_ids:
        gradebook.db.commit()
