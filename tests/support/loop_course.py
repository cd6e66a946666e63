"""A course with one measured test and no torch: the plain-Python stand-in for notebook 12 (issue 29).

``loop_course(tmp, submissions, added)`` releases a one-notebook course whose exercise asks for
``fast_sum(n)`` (the sum of ``range(n)``), graded by the referee plugin
``tests/fixtures/grading/loop_course/loop_referee.py`` (10 points: 2 for the value, 8 for the
speed, measured outside the kernel as notebook 12's are), plus a plain test cell (1 point). Each
student submits ``submissions[student]`` as the answer; ``added[student] = (first, last)`` are
code cells the learner added after the answer and at the end. ``report_of`` reads a student's
measured cell back. Used by ``tests/grading_end_to_end/test_cpu_attacks_plain.py``, on this
machine and in the machine of ``tools/cgroup2_vm.py``, where importing torch takes minutes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grading.coursedir import Course
from grading.release import release
from tests.support.paths import FIXTURES
from tests.support.submissions import cell_meta, graded, submit
from tools.capstone_benchmark import measured_cell

NAME = "01_fast_sum"
REFEREE = FIXTURES / "loop_course" / "loop_referee.py"
MEASURED = "fast_sum_speed"
ANSWER = "def fast_sum(n):\n    ### BEGIN SOLUTION\n    return n * (n - 1) // 2\n    ### END SOLUTION\n"
REFERENCE = "def fast_sum(n):\n    return n * (n - 1) // 2\n"
"""The course's own answer, as a learner submits it."""


def loop_course(tmp: Path, submissions: dict[str, str], added: dict[str, tuple[str, str]] | None = None) -> Course:
    """The course released under ``tmp`` (the referee beside its config), one submission per student."""
    notebooks = tmp / "notebooks"
    notebooks.mkdir(parents=True)
    source = new_notebook(
        cells=[
            new_markdown_cell("# Fast sum\n\nWrite `fast_sum(n)`, the sum of `range(n)`, faster than a loop."),
            new_code_cell(ANSWER, metadata=cell_meta("fast_sum", solution=True)),
            new_code_cell(
                "# course: measure loop_referee fast_sum\nassert fast_sum(10) == 45\n",
                metadata=cell_meta(MEASURED, solution=False, points=10),
            ),
            new_code_cell("assert fast_sum(1000) == 499500\n", metadata=cell_meta("fast_sum_value", solution=False)),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(source, notebooks / f"{NAME}.ipynb")
    course = Course(root=tmp / "course", notebooks=notebooks)
    course.root.mkdir()
    (course.root / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\nc.Execute.timeout = 120\n")
    shutil.copy(REFEREE, course.root / REFEREE.name)
    release(course)
    released = nbformat.read(course.folder("release", NAME) / f"{NAME}.ipynb", as_version=4)
    for student, answer in submissions.items():
        nb = nbformat.from_dict(released)
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "fast_sum")
        cell.source = answer
        first, last = (added or {}).get(student, ("", ""))
        if last:
            nb.cells.append(new_code_cell(last))
        if first:
            nb.cells.insert(nb.cells.index(cell) + 1, new_code_cell(first))
        submit(course, NAME, student, nb)
    return course


def report_of(course: Course, student: str) -> tuple[float, str]:
    """A student's measured cell: its points and everything it shows (the report, or the error)."""
    return measured_cell(graded(course, NAME, student), MEASURED)
