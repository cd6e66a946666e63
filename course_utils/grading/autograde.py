"""Grade every collected submission, in parallel, and record the grades from one process.

Contract: ``autograde(course, jobs=N)`` finds ``submitted/<student>/<assignment>/``,
rebuilds each notebook (``rebuild``), runs the runnable ones on ``N`` jailed workers
(``worker``) and, in this process only, writes each result as it arrives: the autograded
notebook (grading notes on top) to ``autograded/<student>/<assignment>/`` and the scores
to the gradebook, by nbgrader's own rule (``nbgrader.utils.determine_grade``: a test cell
with an error or stderr output scores 0, otherwise its points). A submission that cannot
be read scores 0 with the reason in its notes. Returns a ``Summary``.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course_utils.grading.course import Course
from course_utils.grading.execute import GRADER_PROBLEM
from course_utils.grading.rebuild import fail_all_tests, rebuild, with_grader_cells, without_grader_cells
from course_utils.grading.sandbox import Limits, Protections, detect
from course_utils.grading.worker import WorkerPool

__all__ = ["Graded", "Submission", "Summary", "autograde", "find_submissions", "save_grades"]


@dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    folder: Path

    @property
    def notebook(self) -> Path:
        return self.folder / f"{self.assignment}.ipynb"

    @property
    def timestamp(self) -> str | None:
        stamp = self.folder / "timestamp.txt"
        return stamp.read_text(encoding="utf-8").strip() if stamp.exists() else None


@dataclass
class Graded:
    submission: Submission
    score: float
    max_score: float
    notes: list[str]
    grader_error: bool = False
    seconds: float = 0.0  # in the worker (0 for submissions that could not be run)


@dataclass
class Summary:
    graded: list[Graded] = field(default_factory=list)
    seconds: float = 0.0
    protections: Protections | None = None

    @property
    def errors(self) -> list[Graded]:
        """Submissions the grader could not grade properly (not a learner's mistake)."""
        return [g for g in self.graded if g.grader_error]

    def line(self) -> str:
        troubled = sum(1 for g in self.graded if g.notes)
        return (
            f"graded {len(self.graded)} submissions, {len(self.errors)} grader errors, "
            f"{troubled} with notes, in {self.seconds:.1f} s"
        )


def find_submissions(course: Course, assignments: list[str] | None = None, students: list[str] | None = None):
    """Every ``submitted/<student>/<assignment>/`` folder of a released assignment."""
    known = set(course.assignments())
    found = []
    if not course.submitted.is_dir():
        return found
    for student_dir in sorted(p for p in course.submitted.iterdir() if p.is_dir()):
        if students and student_dir.name not in students:
            continue
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            if folder.name in known and (not assignments or folder.name in assignments):
                found.append(Submission(student_dir.name, folder.name, folder))
    return found


def _locked_sources(gb, assignment: str) -> dict[str, tuple[str, str]]:
    notebook = gb.find_notebook(assignment, assignment)
    return {cell.name: (cell.source, cell.checksum) for cell in notebook.source_cells if cell.locked}


def save_grades(gb, submission: Submission, nb: NotebookNode) -> tuple[float, float]:
    """Record the scores of an executed notebook the way nbgrader's SaveAutoGrades does."""
    from nbgrader import utils
    from nbgrader.utils import parse_utc
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning)  # nbgrader's own session warnings

    name, student = submission.assignment, submission.student
    gb.update_or_create_student(student)
    stamp = submission.timestamp
    kwargs = {"timestamp": parse_utc(stamp)} if stamp else {}
    gb.update_or_create_submission(name, student, **kwargs)
    score = max_score = 0.0
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if utils.is_grade(cell):
            grade = gb.find_grade(meta["grade_id"], name, name, student)
            grade.auto_score, points = utils.determine_grade(cell)
            grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            score += grade.auto_score or 0.0
            max_score += points
        if utils.is_solution(cell) or utils.is_task(cell):
            comment = gb.find_comment(meta["grade_id"], name, name, student)
            unchanged = meta.get("checksum") == utils.compute_checksum(cell) and not utils.is_task(cell)
            comment.auto_comment = "No response." if unchanged else None
    gb.db.commit()
    return score, max_score


def _write_autograded(course: Course, submission: Submission, nb: NotebookNode) -> None:
    folder = course.autograded / submission.student / submission.assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{submission.assignment}.ipynb")
    stamp = submission.folder / "timestamp.txt"
    if stamp.exists():
        shutil.copyfile(stamp, folder / "timestamp.txt")


def autograde(
    course: Course,
    *,
    jobs: int = 2,
    limits: Limits | None = None,
    protections: Protections | None = None,
    assignments: list[str] | None = None,
    students: list[str] | None = None,
    progress: bool = True,
) -> Summary:
    """Grade every matching submission; see the module docstring."""
    started = time.monotonic()
    protections = protections or detect()
    limits = limits or Limits()
    submissions = find_submissions(course, assignments, students)
    summary = Summary(protections=protections)
    unreleased = [a for a in course.assignments() if not course.notebook(course.release, a).is_file()]
    if unreleased:
        raise FileNotFoundError(f"not released yet (run `course release`): {', '.join(unreleased)}")
    released = {a: nbformat.read(course.notebook(course.release, a), as_version=4) for a in course.assignments()}
    tasks, pending, immediate = [], {}, []
    with course.gradebook() as gb:
        locked = {a: _locked_sources(gb, a) for a in released}
        for index, sub in enumerate(submissions):
            data = sub.notebook.read_bytes() if sub.notebook.is_file() else b""
            rebuilt = rebuild(data, released[sub.assignment], locked[sub.assignment])
            if not sub.notebook.is_file():
                rebuilt.notes[:] = [f"Not graded: the submission has no `{sub.assignment}.ipynb`. Every test scores 0."]
                fail_all_tests(rebuilt.nb, "no notebook submitted")
            if rebuilt.runnable and sub.notebook.is_file():
                key = str(index)
                pending[key] = (sub, rebuilt)
                tasks.append((key, with_grader_cells(rebuilt.nb)))
            else:
                immediate.append((sub, rebuilt.nb, rebuilt.notes, False))

        bar = _progress(len(submissions), progress)

        def finish(sub: Submission, nb: NotebookNode, notes: list[str], error: bool, seconds: float = 0.0) -> None:
            nb = without_grader_cells(nb, notes)
            _write_autograded(course, sub, nb)
            score, max_score = save_grades(gb, sub, nb)
            summary.graded.append(Graded(sub, score, max_score, notes, error, seconds))
            bar.update(1)

        for sub, nb, notes, error in immediate:
            finish(sub, nb, notes, error)
        hide = [p for p in (course.root, course.notebooks) if p is not None]
        if tasks:
            # one kernel thread per core is enough: the workers already use the cores
            threads = max(1, _cores() // max(1, jobs))
            limits = Limits(**{**limits.to_dict(), "threads": threads})
            for key, result in WorkerPool(jobs, protections, limits, hide).run(tasks):
                sub, rebuilt = pending[key]
                notes = rebuilt.notes + result.get("notes", [])
                error = "error" in result or any(note.startswith(GRADER_PROBLEM) for note in notes)
                if "nb" in result:
                    nb = nbformat.from_dict(result["nb"])
                else:
                    nb = fail_all_tests(rebuilt.nb, f"grader error: {result['error']}")
                    notes.append(f"Grader error: {result['error']}.")
                finish(sub, nb, notes, error, result.get("seconds", 0.0))
        bar.close()
    course.protect()
    summary.seconds = time.monotonic() - started
    return summary


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="autograde", unit="nb", disable=not enabled)
