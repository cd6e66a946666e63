"""A small course's cells and submissions, for the tests that build one: its nbgrader metadata, a learner's
submitted notebook, the graded notebook and its score.

Plain nbformat and the gradebook, nothing that needs torch (the VM of ``tools/cgroup2_vm.py`` imports it).
"""

from __future__ import annotations

import nbformat

from grading.coursedir import Course

STAMP = "2026-01-01 12:00:00.000000 UTC"
"""When the tests' learners submitted: before every due date they set."""


def cell_meta(grade_id: str, *, solution: bool, points: int = 1) -> dict:
    """nbgrader's metadata of a solution cell, or (``solution`` False) of a locked test cell worth ``points``."""
    flags = {"grade_id": grade_id, "schema_version": 3, "task": False, "solution": solution, "locked": not solution}
    return {"nbgrader": {**flags, "grade": not solution, **({} if solution else {"points": points})}}


def submit(course: Course, assignment: str, student: str, nb: nbformat.NotebookNode) -> None:
    """``student``'s submission of the one-notebook ``assignment`` (``ASSIGNMENT.ipynb``), stamped ``STAMP``."""
    folder = course.folder("submitted", assignment, student)
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{assignment}.ipynb")
    (folder / "timestamp.txt").write_text(STAMP)


def graded(course: Course, assignment: str, student: str) -> nbformat.NotebookNode:
    """The student's autograded notebook of the one-notebook ``assignment``."""
    return nbformat.read(course.folder("autograded", assignment, student) / f"{assignment}.ipynb", as_version=4)


def score(course: Course, assignment: str, student: str) -> tuple[float, float]:
    """The student's notebook score and its maximum, from the gradebook."""
    with course.gradebook() as gb:
        submission = gb.find_submission_notebook(assignment, assignment, student)
        return float(submission.score), float(submission.max_score)
