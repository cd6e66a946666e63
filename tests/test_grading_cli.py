"""The ``course`` command line: the learner's ``validate`` and the instructor's steps."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from course_utils.grading.cli import main
from course_utils.grading.course import Course
from course_utils.grading.release import release

FIXTURES = Path(__file__).parent / "fixtures" / "grading"
sys.path.insert(0, str(FIXTURES))
import grading_cases as cases  # noqa: E402


def test_help_lists_every_step(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for step in ("release", "collect", "autograde", "feedback", "export", "validate"):
        assert step in out


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
    status = main([*args, "--cell-timeout", "30"])
    out = capsys.readouterr().out
    assert status == 1
    assert "PASS  ex1_matmul_flops_tests (1 pt)" in out and "PASS  ex3_mean_abs_error_tests (1 pt)" in out
    assert "FAIL  ex2_standardize_tests (2 pt): AssertionError: standardize(x) has the right shape" in out
    assert "visible tests: 2 / 4 points" in out
