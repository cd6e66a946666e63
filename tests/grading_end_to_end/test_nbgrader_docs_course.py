"""nbgrader's own documentation course, graded by plain nbgrader and by ``course``: the scores agree.

nbgrader 0.9.6 ships the course its user guide grades (``nbgrader/docs/source/user_guide``:
``source/ps1`` and the submissions of ``bitdiddle`` and ``hacker``). Its tests are written
for module semantics: ``sum_of_squares_uses_squares`` deletes the learner's global
``squares``, expects ``NameError`` from the function under test, restores it, and ends with
a value (partial credit). The guard runs every test cell as a function of its own, so this
checks that a test keeps the meaning Python and nbgrader give it: every graded cell of both
submissions scores what plain ``nbgrader autograde`` gives it.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import nbformat
import nbgrader
import pytest

from grading.autograde import autograde
from grading.collect import collect
from grading.coursedir import Course
from grading.release import release

pytestmark = pytest.mark.slow_grading  # two kernels per grader, four notebooks each

GUIDE = Path(nbgrader.__file__).parent / "docs" / "source" / "user_guide"
ASSIGNMENT = "ps1"
STUDENTS = ("bitdiddle", "hacker")


def _scores(course: Course) -> dict[tuple[str, str, str], float | None]:
    """(student, notebook, graded cell) -> the automatic score the gradebook holds."""
    found = {}
    with course.gradebook() as gb:
        for submission in gb.find_assignment(ASSIGNMENT).submissions:
            for notebook in submission.notebooks:
                for grade in notebook.grades:  # written answers too: left for grading by hand (None) by both
                    found[(submission.student.id, notebook.name, grade.cell.name)] = grade.auto_score
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from sqlalchemy.exc import SAWarning

    tmp = tmp_path_factory.mktemp("nbgrader-docs")
    plain, ours = Course(tmp / "plain"), Course(tmp / "ours")
    inbox = tmp / "inbox"
    for student in STUDENTS:
        shutil.copytree(GUIDE / "submitted" / student / ASSIGNMENT, inbox / student / ASSIGNMENT)
    for course in (plain, ours):
        shutil.copytree(GUIDE / "source" / ASSIGNMENT, course.root / "source" / ASSIGNMENT)
    with plain.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
    api = plain.api()
    assert api.generate_assignment(ASSIGNMENT)["success"]
    shutil.copytree(inbox, plain.submitted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's gradebook warns about its own session use
        for student in STUDENTS:
            result = api.autograde(ASSIGNMENT, student)
            assert result["success"], result.get("error") or result["log"]
    release(ours)
    collect(ours, inbox)
    summary = autograde(ours, jobs=2, progress=False)
    assert not summary.errors, summary.line()
    return _scores(plain), _scores(ours)


def test_every_graded_cell_scores_what_plain_nbgrader_gives(graded):
    theirs, ours = graded
    differ = {key: (theirs.get(key), ours.get(key)) for key in theirs.keys() | ours.keys()
              if theirs.get(key) != ours.get(key)}  # fmt: skip
    print(f"\n{len(theirs) - len(differ)} of {len(theirs)} graded cells agree with plain nbgrader")
    assert not differ, differ
    # the course exercises what it should: a test that deletes and restores a global, partial credit
    assert 0.5 in {theirs[(student, "problem1", "sum_of_squares_uses_squares")] for student in STUDENTS}
    shipped = _graded_cells_of_the_shipped_autograded_notebooks()
    assert len(shipped) == 16 and shipped <= theirs.keys(), shipped - theirs.keys()


def _graded_cells_of_the_shipped_autograded_notebooks() -> set[tuple[str, str, str]]:
    """(student, notebook, cell) of every graded cell in the autograded notebooks nbgrader ships."""
    found = set()
    for student in STUDENTS:
        for path in sorted((GUIDE / "autograded" / student / ASSIGNMENT).glob("*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade"):
                    found.add((student, path.stem, meta["grade_id"]))
    return found
