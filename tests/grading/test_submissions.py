"""Which submissions ``course autograde`` grades: chosen as nbgrader chooses them, with a note on each one left out.

A course in ``tmp_path`` with a gradebook that knows ``ps1`` and ``ps2``, and
``submitted/<student>/<assignment>/`` folders written by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grading.coursedir import Course
from grading.errors import CourseError
from grading.submissions import Submission, find_submissions, matching_notebooks, notebook_glob

pytestmark = pytest.mark.usefixtures("_gradebook_head_read_in_process")  # tests/grading/conftest.py


def _course(root: Path, *config: str, assignments: tuple[str, ...] = ("ps1", "ps2")) -> Course:
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text("\n".join(["c = get_config()", *config, ""]))
    course = Course(root)
    with course.gradebook() as gb:
        for name in assignments:
            gb.add_assignment(name)
    return course


def _submit(course: Course, student: str, assignment: str, *notebooks: str, stamp: str | None = None) -> Path:
    folder = course.folder("submitted", assignment, student)
    folder.mkdir(parents=True)
    for name in notebooks:
        (folder / f"{name}.ipynb").write_text("{}")
    if stamp is not None:
        (folder / "timestamp.txt").write_text(stamp)
    return folder


def _who(found: list[Submission]) -> list[tuple[str, str]]:
    return [(s.student, s.assignment) for s in found]


def test_every_submitted_folder_is_found_sorted_and_hidden_ones_are_not(tmp_path):
    course = _course(tmp_path / "c")
    _submit(course, "bob", "ps1", "problems")
    _submit(course, "alice", "ps2", "essay")
    _submit(course, "alice", "ps1", "problems")
    _submit(course, ".ipynb_checkpoints", "ps1", "problems")
    (course.submitted / "carol").mkdir()
    (course.submitted / "carol" / "ps1").write_text("a file, not a folder")
    found, ignored = find_submissions(course)
    assert _who(found) == [("alice", "ps1"), ("alice", "ps2"), ("bob", "ps1")]
    assert found[0].folder == course.submitted / "alice" / "ps1" and found[0].notebooks == ["problems"]
    assert ignored == []
    assert _who(find_submissions(course, ["ps2"])[0]) == [("alice", "ps2")]
    assert _who(find_submissions(course, students=["bob"])[0]) == [("bob", "ps1")]


def test_the_configs_selections_and_exclusions_apply_with_a_note(tmp_path):
    course = _course(
        tmp_path / "c",
        'c.CourseDirectory.assignment_id = "ps1"',
        'c.CourseDirectory.student_id_exclude = "bob, test_student"',
    )
    for student in ("alice", "bob", "carol"):
        _submit(course, student, "ps1", "problems")
    _submit(course, "alice", "ps2", "problems")
    _submit(course, "alice", "ps9", "problems")  # an assignment the gradebook does not have
    found, ignored = find_submissions(course)
    assert _who(found) == [("alice", "ps1"), ("carol", "ps1")]
    assert ignored == [
        "alice/ps9: no assignment 'ps9' in the gradebook",
        "bob/ps1: excluded by CourseDirectory.student_id_exclude",
    ]


def test_a_student_id_glob_in_the_config_chooses_when_no_student_is_named(tmp_path):
    course = _course(tmp_path / "c", 'c.CourseDirectory.student_id = "a*"')
    _submit(course, "alice", "ps1", "problems")
    _submit(course, "bob", "ps1", "problems")
    assert _who(find_submissions(course)[0]) == [("alice", "ps1")]
    assert _who(find_submissions(course, students=["bob"])[0]) == [("bob", "ps1")]


def test_the_notebook_glob_skips_submissions_without_a_match(tmp_path):
    course = _course(tmp_path / "c")
    _submit(course, "alice", "ps1", "problems", "essay")
    _submit(course, "bob", "ps1", "essay")
    found, ignored = find_submissions(course, notebooks="prob*")
    assert _who(found) == [("alice", "ps1")]
    assert ignored == ["bob/ps1: no notebook matches --notebook 'prob*'"]


def test_notebook_glob_is_the_option_else_the_configs_notebook_id(tmp_path):
    course = _course(tmp_path / "c", 'c.CourseDirectory.notebook_id = "essay"')
    assert notebook_glob(course) == "essay"
    assert notebook_glob(course, "prob*") == "prob*"
    assert notebook_glob(course, "  ") == "*"
    assert notebook_glob(Course(tmp_path / "plain")) == "*"


def test_matching_notebooks_applies_the_glob_as_nbgrader_does():
    names = ["essay", "problems", "Problems2", "problems.old"]
    assert matching_notebooks(names, "*") == names
    assert matching_notebooks(names, "problems") == ["problems"]  # exact, not a prefix
    assert matching_notebooks(names, "prob*") == ["problems", "problems.old"]  # case-sensitive
    assert matching_notebooks(names, "problems.ipynb") == []  # nbgrader adds .ipynb itself


def test_a_submissions_timestamp_is_its_text_or_none(tmp_path):
    course = Course(tmp_path / "c")
    stamped = Submission("alice", "ps1", _submit(course, "alice", "ps1", stamp=" 2026-01-09 12:00:00 UTC\n"))
    empty = Submission("bob", "ps1", _submit(course, "bob", "ps1", stamp="  \n"))
    none = Submission("carol", "ps1", _submit(course, "carol", "ps1"))
    assert stamped.timestamp == "2026-01-09 12:00:00 UTC"
    assert empty.timestamp is None and none.timestamp is None


def test_nothing_to_grade_is_a_course_error_saying_why(tmp_path):
    with pytest.raises(CourseError, match="has no assignments: run `course release` first"):
        find_submissions(_course(tmp_path / "empty", assignments=()))
    course = _course(tmp_path / "c")
    with pytest.raises(CourseError, match=r"no assignment ps3 in the gradebook \(released: ps1, ps2\)"):
        find_submissions(course, ["ps3"])
    with pytest.raises(
        CourseError, match=r"no submissions of ps1, ps2 to grade in .*submitted.*<student>/<assignment>"
    ):
        find_submissions(course)
    _submit(course, "alice", "ps1", "problems")
    with pytest.raises(CourseError, match="no submissions from bob in"):
        find_submissions(course, students=["alice", "bob"])
    with pytest.raises(CourseError, match="no notebook matches --notebook 'essay'"):
        find_submissions(course, notebooks="essay")


def test_an_assignment_id_glob_matching_nothing_is_a_course_error(tmp_path):
    course = _course(tmp_path / "c", 'c.CourseDirectory.assignment_id = "hw*"')
    _submit(course, "alice", "ps1", "problems")
    with pytest.raises(CourseError, match=r"CourseDirectory\.assignment_id 'hw\*' matches no assignment"):
        find_submissions(course)
