"""The ``course`` command line: the learner's ``validate``, and clear errors instead of silent no-ops."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from grading.cli import main
from grading.coursedir import REPO_ROOT, Course, default_course
from grading.release import release
from tests.fixtures.grading import grading_cases as cases
from tests.support.paths import FIXTURES


def test_help_lists_every_step(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for step in ("release", "collect", "autograde", "hand-grading", "extend", "feedback", "export", "validate"):
        assert step in out


def test_default_course_is_the_current_directory_with_a_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_course().root == REPO_ROOT / "grading" / "course"
    assert default_course().notebooks == REPO_ROOT / "notebooks"
    (tmp_path / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "other"\n')
    course = default_course()
    assert course.root == tmp_path.resolve() and course.notebooks is None and course.course_id == "other"


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    """A standard course with its assignment released (copied by each test that needs it)."""
    root = tmp_path_factory.mktemp("released") / "course"
    root.mkdir()
    shutil.copytree(FIXTURES / "compat_course" / "source", root / "source")
    release(Course(root))
    return root


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        ("empty", ["release"], "no assignments in"),
        ("empty", ["autograde"], "has no assignments: run `course release` first"),
        ("empty", ["feedback"], "no autograded submissions"),
        ("released", ["autograde", "--assignment", "nope"], "no assignment nope in the gradebook"),
        ("released", ["autograde"], "no submissions of ps1"),
        ("released", ["collect", "missing-folder"], "does not exist"),
        ("released", ["export"], "no graded submissions"),
        ("released", ["validate", "missing.ipynb"], "no notebook at missing.ipynb"),
    ],
)
@pytest.mark.slow
def test_nothing_to_do_says_why_and_fails_without_a_traceback(
    tmp_path, monkeypatch, capsys, released, setup, argv, message
):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "course"
    if setup == "released":
        shutil.copytree(released, root)
    else:
        root.mkdir()
    status = main(["--course", str(root), *argv])
    err = capsys.readouterr().err
    assert status == 1
    assert message in err and "Traceback" not in err


@pytest.mark.slow
def test_validate_reports_visible_tests(tmp_path, capsys):
    course = Course(root=tmp_path / "grading", notebooks=FIXTURES / "notebooks")
    release(course)
    partial = cases.solved()
    next(
        c for c in partial.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex2_standardize"
    ).source = cases.WRONG_EX2
    path = tmp_path / f"{cases.ASSIGNMENT}.ipynb"
    nbformat.write(partial, path)
    args = ["--course", str(course.root), "--notebooks", str(course.notebooks), "validate", str(path)]
    status = main([*args, "--cell-timeout", "30", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert status == 1 and not verdict["ok"] and verdict["changed"] == []
    assert [(c["grade_id"], c["status"]) for c in verdict["cells"]] == [
        ("ex1_matmul_flops_tests", "pass"),
        ("ex2_standardize_tests", "fail"),
        ("ex3_mean_abs_error_tests", "pass"),
    ]
    assert verdict["cells"][1]["message"].startswith("AssertionError: standardize(x) has the right shape")
    assert (verdict["score"], verdict["max_score"]) == (2, 4)


def test_validate_reports_a_test_nbgrader_cannot_score_instead_of_a_traceback(tmp_path, capsys, monkeypatch):
    """A test cell whose last value is a number above its points: nbgrader stops with a ValueError."""
    answer = {"grade": False, "solution": True, "locked": False, "grade_id": "answer", "schema_version": 3}
    test = {"grade": True, "solution": False, "locked": True, "grade_id": "t1", "points": 1, "schema_version": 3}
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("x = 100", metadata={"nbgrader": answer}),
        nbformat.v4.new_code_cell("x", metadata={"nbgrader": test}),
    ]
    path = tmp_path / "partial.ipynb"
    nbformat.write(nb, path)
    monkeypatch.chdir(tmp_path)
    status = main(["validate", str(path), "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert status == 1
    [cell] = verdict["cells"]
    assert (cell["grade_id"], cell["status"]) == ("t1", "fail")
    assert "partial credit cannot be greater than maximum points" in cell["message"]


@pytest.mark.parametrize(
    ("configured", "before", "after"),
    [
        (["IgnorePattern", "Execute", "SaveAutoGrades"], ["IgnorePattern"], ["SaveAutoGrades"]),
        (["IgnorePattern", "SaveAutoGrades"], [], ["IgnorePattern", "SaveAutoGrades"]),  # no Execute: none lost
    ],
)
def test_every_configured_autograde_preprocessor_runs_in_its_place(tmp_path, configured, before, after):
    from grading.converter import AutogradeConverter

    names = ", ".join(f'"nbgrader.preprocessors.{name}"' for name in configured)
    (tmp_path / "nbgrader_config.py").write_text(f"c = get_config()\nc.Autograde.autograde_preprocessors = [{names}]\n")
    steps = AutogradeConverter(Course(tmp_path))
    assert [type(p).__name__ for p in steps.before_execute] == before
    assert [type(p).__name__ for p in steps.after_execute] == after


def test_config_options_nothing_reads_are_reported_on_stderr(tmp_path, capsys):
    """nbgrader warns about an unknown option only once it instantiates the class; every step here
    loads the config, so each typo is reported whatever the step, with a close match."""
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        "c.CourseDirectory.course_id = 'typos'\n"
        "c.CourseDirectory.db_assignments = []\n"  # the option of an old nbgrader
        "c.Execute.timeot = 5\n"
        "c.ClearSolutionz.code_stub = {}\n"
        "c.course_id = 'outside'\n"
        "c.MyCoursesPenalty.points = 2\n"  # a plugin's own class, not imported here: left alone
        "c.NbGraderPreprocessor.enabled = True\n"  # a base class: its subclasses read it
        "c.AutogradeApp.permissions = 644\n"  # nbgrader autograde reads it as Autograde.permissions
    )
    assert main(["--course", str(tmp_path), "collect", "inbox"]) == 1  # no assignments; the config is read first
    err = capsys.readouterr().err
    warnings = [line.split(": ", 3)[3] for line in err.splitlines() if line.startswith("course: warning:")]
    assert warnings == [
        "AutogradeApp.permissions: outdated, read as Autograde (as nbgrader does); write Autograde in the config",
        "option `db_assignments` is not recognized by `CourseDirectory`, so it is ignored; "
        "did you mean `assignment_id`?",
        "option `timeot` is not recognized by `Execute`, so it is ignored; did you mean `timeout`?",
        "`ClearSolutionz` is no class nbgrader knows, so its options are ignored; did you mean `ClearSolutions`?",
        "`c.course_id` is set outside any class, so nothing reads it; did you mean c.CourseDirectory.course_id?",
    ]
    assert Course(tmp_path).config.Autograde.permissions == 644


def test_counts_are_in_the_right_number():
    from grading.autograde import Graded, Submission, Summary

    one = Graded(Submission("alice", "ps1", Path("x")), 1, 2, ["a note"], needs_manual_grade=True)
    summary = Summary(graded=[one], skipped=[one.submission])
    assert summary.line() == (
        "graded 1 submission, 0 grader errors, 1 with notes, 1 needs manual grading, "
        "1 already graded (--force regrades them), in 0.0 s"
    )
    summary.graded.append(Graded(Submission("bob", "ps1", Path("y")), 0, 2, [], grader_error=True))
    assert summary.line().startswith("graded 2 submissions, 1 grader error, 1 with notes, 1 needs manual grading")
