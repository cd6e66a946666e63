"""The reference solutions of every notebook get full marks from ``course autograde``.

The guard runs each test cell in a function of its own, compares what the checks are made
of after every call and refuses frame and ``gc`` access while a test runs: none of that may
cost an honest answer a point. Each notebook of ``notebooks/`` (solutions and hidden tests
in place) is released into a throwaway course and submitted as it is, then graded with
``course autograde --jobs 2``. Every test cell must score its points, except a measured
test (notebook 12's speed, decided outside the kernel by timed rounds, which a loaded
machine may slow down): that one must have run without any note of tampering.
"""

from __future__ import annotations

import re
import shutil

import nbformat
import pytest

from grading.autograde import autograde
from grading.coursedir import REPO_ROOT, Course
from grading.measure import measured_tests
from grading.release import release
from grading.sandbox.protections import Limits
from grading.sanitize import is_test, nbgrader_meta

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
STUDENT = "reference"

pytestmark = pytest.mark.slow_grading  # twelve notebooks, each up to a minute: `make grading-test`


def reference_course(tmp) -> Course:
    """A throwaway course with this repository's notebooks released, each submitted as it is by ``STUDENT``."""
    if not NOTEBOOKS:
        pytest.skip("no notebooks in notebooks/ yet")
    course = Course(root=tmp / "grading", notebooks=REPO_ROOT / "notebooks")
    release(course)
    shutil.copy(REPO_ROOT / "grading" / "course" / "capstone_referee.py", course.root / "capstone_referee.py")
    for path in NOTEBOOKS:
        folder = course.folder("submitted", path.stem, STUDENT)
        folder.mkdir(parents=True)
        shutil.copy(path, folder / path.name)
        (folder / "timestamp.txt").write_text("2026-01-01 00:00:00 UTC")
    return course


def failed_tests(course: Course, path) -> list[str]:
    """The errors of the autograded notebook's test cells, measured tests (decided outside the kernel) aside."""
    nb = nbformat.read(course.folder("autograded", path.stem, STUDENT) / path.name, as_version=4)
    measured = {m["grade_id"] for m in measured_tests(nb, course.root)[0]}
    return [
        f"{path.stem} `{nbgrader_meta(cell).get('grade_id')}`: {output['ename']}: {output['evalue']}"
        for cell in nb.cells
        if is_test(cell) and nbgrader_meta(cell).get("grade_id") not in measured
        for output in cell.outputs
        if output.get("output_type") == "error"
    ]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = reference_course(tmp_path_factory.mktemp("solutions"))
    # generous limits: what is measured here is the guard, not this machine's load
    summary = autograde(course, jobs=2, limits=Limits(cell_timeout=240, notebook_timeout=1200), progress=False)
    return course, summary


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_reference_solution_scores_every_point(graded, path):
    course, summary = graded
    result = next(g for g in summary.graded if g.submission.assignment == path.stem)
    notes = " ".join(result.notes)
    assert not result.grader_error, notes
    assert "the submission" not in notes, notes  # no verdict of tampering
    assert "hidden lines" not in notes, notes  # what the notebook prints shows no hidden test (leaks.py)
    assert not failed_tests(course, path), failed_tests(course, path)


def test_one_wrong_exercise_costs_its_own_points_only_and_accuses_no_one(tmp_path):
    """Notebook 01 with exercise 1 wrong scores every other test's points, without a word about hidden tests.

    Every failing check's traceback quotes ``raise AssertionError(`` from ``course_utils/checks.py``,
    which is also a line of exercise 4's hidden test: the output check used to take it for that
    test's hidden text, so a correct exercise 4 scored 0 with an accusation (5/10 where Validate
    said 8/10).
    """
    from tests.wrong_answers import nb01

    path = next(p for p in NOTEBOOKS if p.stem.startswith("01_"))
    wrong = next(w for w in nb01.WRONG if w.grade_id == "ex1_matmul_flops")
    course = Course(root=tmp_path / "grading", notebooks=REPO_ROOT / "notebooks")
    release(course, [path.stem])
    solutions = {nbgrader_meta(c).get("grade_id"): c.source for c in nbformat.read(path, as_version=4).cells}
    nb = nbformat.read(course.folder("release", path.stem) / path.name, as_version=4)  # what the learner gets
    for cell in nb.cells:
        if nbgrader_meta(cell).get("solution"):
            grade_id = nbgrader_meta(cell)["grade_id"]
            cell.source = wrong.answer if grade_id == wrong.grade_id else solutions[grade_id]
    points = {nbgrader_meta(c)["grade_id"]: nbgrader_meta(c)["points"] for c in nb.cells if is_test(c)}
    folder = course.folder("submitted", path.stem, STUDENT)
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / path.name)
    (folder / "timestamp.txt").write_text("2026-01-01 00:00:00 UTC")

    summary = autograde(course, jobs=1, limits=Limits(cell_timeout=240, notebook_timeout=1200), progress=False)

    (result,) = summary.graded
    notes = " ".join(result.notes)
    assert result.score == sum(points.values()) - points["ex1_matmul_flops_tests"], notes
    assert "hidden" not in notes and not result.needs_manual_grade, notes
    graded = nbformat.read(course.folder("autograded", path.stem, STUDENT) / path.name, as_version=4)
    ex1 = next(c for c in graded.cells if nbgrader_meta(c).get("grade_id") == "ex1_matmul_flops_tests")
    traceback = "".join(line for o in ex1.outputs if o.get("output_type") == "error" for line in o["traceback"])
    assert "raise AssertionError(" in re.sub(r"\x1b\[[0-9;]*m", "", traceback)  # where the check failed, still shown
