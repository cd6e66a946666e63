"""Which submissions ``course autograde`` grades, chosen as nbgrader chooses them.

Contract: ``find_submissions(course, assignments, students, notebooks)`` returns the
``Submission`` s (student, assignment, folder under ``submitted/``) to grade and a note on
each one nbgrader would leave out too: ``CourseDirectory.assignment_id`` and ``student_id``
(globs) choose when no assignment or student is named, ``CourseDirectory.student_id_exclude``
leaves students out, and ``notebook_glob`` (``--notebook``, else ``CourseDirectory.notebook_id``)
skips a submission with no notebook it matches. Nothing to grade raises ``CourseError``
saying why. ``matching_notebooks`` applies the glob as nbgrader does (``<glob>.ipynb``).
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from pathlib import Path

from grading.coursedir import Course
from grading.errors import CourseError

__all__ = ["Submission", "find_submissions", "matching_notebooks", "notebook_glob"]


@dataclass(frozen=True)
class Submission:
    """One student's submitted folder of one assignment."""

    student: str
    assignment: str
    folder: Path

    @functools.cached_property
    def notebooks(self) -> list[str]:
        """The submitted notebooks' names (read once: a run asks several times)."""
        return Course.notebook_names(self.folder)

    @property
    def timestamp(self) -> str | None:
        """The text of the submission's ``timestamp.txt`` (None when it has none, or an empty one)."""
        stamp = self.folder / "timestamp.txt"
        text = stamp.read_text(encoding="utf-8", errors="replace").strip() if stamp.is_file() else ""
        return text or None


def _excluded(course: Course) -> set[str]:
    """``CourseDirectory.student_id_exclude``: the comma-separated student ids nbgrader leaves out."""
    return {student.strip() for student in course.coursedir.student_id_exclude.split(",") if student.strip()}


def notebook_glob(course: Course, notebooks: str | None = None) -> str:
    """Which notebooks to grade: ``notebooks`` (``--notebook``), else ``CourseDirectory.notebook_id``."""
    return (notebooks if notebooks is not None else course.coursedir.notebook_id).strip() or "*"


def matching_notebooks(names: list[str], glob: str) -> list[str]:
    """The notebook names nbgrader's ``--notebook`` glob selects (matched as ``<glob>.ipynb``)."""
    return [name for name in names if fnmatch.fnmatchcase(f"{name}.ipynb", f"{glob}.ipynb")]


def find_submissions(
    course: Course,
    assignments: list[str] | None = None,
    students: list[str] | None = None,
    notebooks: str | None = None,
) -> tuple[list[Submission], list[str]]:
    """The submissions to grade, and notes on the ones nbgrader would not grade either.

    Without ``assignments`` or ``students``, the course config's ``CourseDirectory.assignment_id``
    and ``student_id`` (globs, as nbgrader reads them) choose; ``CourseDirectory.student_id_exclude``
    leaves students out and ``notebooks`` (a glob, else ``CourseDirectory.notebook_id``) skips
    submissions with no notebook it matches, as in nbgrader, each with a note. Raises
    ``CourseError`` when there is nothing to grade, saying why.
    """
    with course.gradebook() as gb:
        known = sorted(a.name for a in gb.assignments)
    if not known:
        raise CourseError(f"the gradebook {course.db_label} has no assignments: run `course release` first")
    unknown = sorted(set(assignments or []) - set(known))
    if unknown:
        raise CourseError(f"no assignment {', '.join(unknown)} in the gradebook (released: {', '.join(known)})")
    coursedir, excluded, glob = course.coursedir, _excluded(course), notebook_glob(course, notebooks)
    wanted = set(assignments or fnmatch.filter(known, coursedir.assignment_id or "*"))
    if not wanted:
        raise CourseError(
            f"CourseDirectory.assignment_id {coursedir.assignment_id!r} matches no assignment "
            f"in the gradebook (released: {', '.join(known)})"
        )
    found: list[Submission] = []
    ignored: list[str] = []
    for student, assignment, folder in course.submissions("*", "*" if students else coursedir.student_id or "*"):
        if students and student not in students:
            continue
        if assignment not in known:
            if not assignments:
                ignored.append(f"{student}/{assignment}: no assignment {assignment!r} in the gradebook")
            continue
        if assignment not in wanted:
            continue
        if student in excluded:
            ignored.append(f"{student}/{assignment}: excluded by CourseDirectory.student_id_exclude")
        elif not matching_notebooks(Course.notebook_names(folder), glob):
            ignored.append(f"{student}/{assignment}: no notebook matches --notebook {glob!r}")
        else:
            found.append(Submission(student, assignment, folder))
    if not found:
        who = f" from {', '.join(students)}" if students else ""
        why = f"; {'; '.join(ignored)}" if ignored else ""
        raise CourseError(
            f"no submissions{who} of {', '.join(sorted(wanted)) or 'any assignment'} to grade in {course.submitted} "
            f"(expected {course.submitted}/<student>/<assignment>/<notebook>.ipynb; `course collect` puts them there)"
            + why
        )
    if students:
        missing = sorted(set(students) - {s.student for s in found} - excluded)
        if missing:
            raise CourseError(f"no submissions from {', '.join(missing)} in {course.submitted}")
    return found, ignored
