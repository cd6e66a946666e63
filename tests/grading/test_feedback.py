"""Feedback: hidden tests out unless shown, a results table from the gradebook, hand grading awaited.

At the level of the two preprocessors on an in-memory notebook, and of ``feedback`` up to
the point where it would run nbgrader's exporter (the slow part, left to the end-to-end
suite). The compatibility course is released once into an SQLite gradebook and copied for
each test that writes grades.
"""

from __future__ import annotations

import html
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from traitlets.config import Config

from grading.coursedir import Course
from grading.errors import CourseError
from grading.feedback import feedback
from grading.feedback_preprocessors import HideHiddenTests
from grading.feedback_preprocessors import TestResults as Results  # not collected as a test class
from grading.guard import ROLE_KEY
from grading.jobs import Outcome
from grading.record import Recorder
from grading.submissions import Submission

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")

TESTS = 'assert f(1) == 2, "f(1)"\n### BEGIN HIDDEN TESTS\nassert f(7) == 14, "f(7)"\n### END HIDDEN TESTS'


def _meta(grade_id: str, **flags) -> dict:
    meta = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3, "solution": False}
    return {"nbgrader": {**meta, "task": False, **flags}}


def _notebook() -> nbformat.NotebookNode:
    failed = new_code_cell(TESTS, metadata=_meta("f_tests", grade=True, locked=True, points=2))
    failed.outputs = [
        new_output("error", ename="AssertionError", evalue="f(7)",
                   traceback=["Traceback ...", '----> 3 assert f(7) == 14, "f(7)"', "AssertionError: f(7)"])
    ]  # fmt: skip
    indented = "def check():\n    ok = True\n    ### BEGIN HIDDEN TESTS\n    assert f(3) == 6\n    ### END HIDDEN TESTS"
    return new_notebook(
        cells=[
            new_markdown_cell("# f"),
            new_code_cell("def f(x):\n    return 2 * x  ### BEGIN HIDDEN TESTS", metadata=_meta("f", solution=True)),
            failed,
            new_code_cell(indented, metadata=_meta("g_tests", grade=True, locked=True, points=1)),
        ]
    )


def test_hidden_tests_are_left_out_when_enabled_with_the_traceback_cut_to_its_message():
    nb, _ = HideHiddenTests(enabled=True)(_notebook(), {})  # called as nbconvert calls it
    assert nb.cells[2].source == 'assert f(1) == 2, "f(1)"\n# (hidden tests are not shown)'
    assert nb.cells[2].outputs[0]["traceback"] == ["AssertionError: f(7)"]  # no line of the hidden test quoted
    assert nb.cells[3].source == "def check():\n    ok = True\n    # (hidden tests are not shown)"  # indented as it was
    assert nb.cells[1].source == "def f(x):\n    return 2 * x  ### BEGIN HIDDEN TESTS"  # an answer is the learner's


def test_hidden_tests_are_shown_unless_enabled_as_in_nbgrader():
    nb, _ = HideHiddenTests()(_notebook(), {})
    assert nb.cells[2].source == TESTS and len(nb.cells[2].outputs[0]["traceback"]) == 3


def test_the_placeholder_and_the_markers_are_the_courses_config():
    config = Config()
    config.HideHiddenTests.enabled = True
    config.HideHiddenTests.placeholder = "# (more tests when graded)"
    config.ClearHiddenTests.begin_test_delimeter = "BEGIN SECRET"
    config.ClearHiddenTests.end_test_delimeter = "END SECRET"
    nb = _notebook()
    nb.cells[2].source = "assert f(1) == 2\n# BEGIN SECRET\nassert f(7) == 14\n# END SECRET\nassert f(0) == 0"
    nb, _ = HideHiddenTests(config=config)(nb, {})
    assert nb.cells[2].source == "assert f(1) == 2\n# (more tests when graded)\nassert f(0) == 0"
    assert "BEGIN HIDDEN TESTS" in nb.cells[3].source  # the default markers mean nothing in this course


def test_the_command_hides_hidden_tests_unless_asked_and_leaves_out_hand_grading_unless_asked(monkeypatch, tmp_path):
    from grading import feedback as module
    from grading.cli import main

    calls = []
    monkeypatch.setattr(module, "feedback", lambda course, *a, **kw: calls.append(kw) or module.Feedback([], []))
    root = str(tmp_path)
    main(["--course", root, "feedback"])
    main(["--course", root, "feedback", "--show-hidden-tests", "--include-ungraded"])
    assert [(c["hide_hidden_tests"], c["include_ungraded"]) for c in calls] == [(True, False), (False, True)]


# -- with a gradebook --------------------------------------------------------------------------------------------


@pytest.fixture
def course(compat_course) -> Course:
    """The compatibility course, released (tests/grading/conftest.py), in a copy of this test's own."""
    return compat_course


def _graded(course: Course, student: str, scores: dict, stamp: str = "2026-01-10 12:00:00 UTC") -> None:
    """A submission autograded with ``scores`` for ``problems`` (essay missing), as ``course autograde`` leaves it."""
    folder = course.folder("submitted", "ps1", student)
    folder.mkdir(parents=True)
    (folder / "problems.ipynb").write_text("{}")
    (folder / "timestamp.txt").write_text(stamp)
    sub = Submission(student, "ps1", folder)
    with Recorder(course) as recorder:
        recorder.open([sub])
        recorder.record([(sub, "problems", Outcome("{}", [], scores=scores, comments={}, recorded=True))])
    autograded = course.folder("autograded", "ps1", student)
    autograded.mkdir(parents=True)
    shutil.copy(course.folder("release", "ps1") / "problems.ipynb", autograded / "problems.ipynb")


def test_learners_waiting_for_hand_grading_get_no_feedback_unless_asked(course):
    _graded(course, "alice", {"mean_column_tests": 2.0, "count_words_tests": 1.0, "describe": None})  # needs a person
    written = feedback(course, include_ungraded=False)
    assert written == [] and written.waiting == [("alice", "ps1")]
    assert not course.folder("feedback", "ps1", "alice").exists()


def test_no_autograded_submission_is_a_course_error_saying_what_to_run(course):
    with pytest.raises(CourseError, match=r"no autograded submissions of ps1 from bob in .*: run `course autograde`"):
        feedback(course, ["ps1"], students=["bob"])


def test_the_results_table_shows_each_graded_cells_score_and_why_a_test_failed(course):
    _graded(course, "alice", {"mean_column_tests": 2.0, "count_words_tests": 0.0, "describe": None},
            stamp="2026-01-12 12:00:00 UTC")  # fmt: skip
    nb = nbformat.read(course.folder("autograded", "ps1", "alice") / "problems.ipynb", as_version=4)
    tests = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "count_words_tests")
    tests.outputs = [new_output("error", ename="AssertionError", evalue="three <b>words</b>", traceback=[])]
    info = {"notebook": "problems", "assignment": "ps1", "student": "alice", "db_url": course.db_url,
            "late_penalty": 2.0}  # fmt: skip
    nb, _ = Results().preprocess(nb, {"nbgrader": info})
    table = nb.cells[0]
    assert table.metadata[ROLE_KEY] == {"role": "results"}
    rows = [html.unescape(line) for line in table.source.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [
        "| mean_column_tests | test | 2 / 2 | passed |",
        "| count_words_tests | test | 0 / 1 | AssertionError: three <b>words</b> |",
        "| describe | code answer | - / 2 | waiting to be graded by hand |",
        "| sort_task | task | - / 1 | waiting to be graded by hand |",
    ]
    assert "<b>" not in table.source  # the learner's error message is plain text, never markup
    assert table.source.endswith("Late submission penalty: -2 points.")
