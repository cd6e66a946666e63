"""``course release``: student versions without solutions or hidden tests, kept current."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from course_utils.grading.course import REPO_ROOT, Course, default_course
from course_utils.grading.release import find_leaks, release, secret_blocks, stale_releases

FIXTURES = Path(__file__).parent / "fixtures" / "grading" / "notebooks"
REAL_NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def fixture_course(tmp_path_factory):
    course = Course(root=tmp_path_factory.mktemp("fixture") / "grading", notebooks=FIXTURES)
    release(course)
    return course


def test_release_replaces_solutions_and_drops_hidden_tests(fixture_course):
    course = fixture_course
    name = "90_grade_fixture_tensors"
    source = nbformat.read(course.notebook(course.source, name), as_version=4)
    released = nbformat.read(course.notebook(course.release, name), as_version=4)
    assert len(secret_blocks(source)) == 6  # three solutions, three hidden-test blocks
    assert find_leaks(source, released) == []
    text = course.notebook(course.release, name).read_text()
    for secret in ("return 2 * m * n * k", "matmul_flops(7, 5, 3)", "BEGIN HIDDEN", "BEGIN SOLUTION"):
        assert secret not in text
    stubs = [c for c in released.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert len(stubs) == 3 and all("raise NotImplementedError()" in c.source for c in stubs)
    assert all(
        not c.get("outputs") and c.get("execution_count") is None for c in released.cells if c.cell_type == "code"
    )
    with course.gradebook() as gb:  # the gradebook keeps the hidden tests for grading
        cells = {c.name: c.source for c in gb.find_notebook(name, name).source_cells}
    assert "matmul_flops(7, 5, 3)" in cells["ex1_matmul_flops_tests"]


def test_find_leaks_reports_a_solution_line_in_the_release(fixture_course):
    course = fixture_course
    name = "90_grade_fixture_tensors"
    source = nbformat.read(course.notebook(course.source, name), as_version=4)
    released = nbformat.read(course.notebook(course.release, name), as_version=4)
    released.cells[0].source += "\n\nHint: `return 2 * m * n * k`"
    released.cells[-1].source += '\ncheck_int(matmul_flops(7, 5, 3), 210, "matmul_flops(7, 5, 3)")'
    leaks = find_leaks(source, released)
    assert any("solution line" in leak for leak in leaks) and any("hidden test line" in leak for leak in leaks)


def test_stale_release_is_reported(fixture_course, tmp_path):
    copy = Course(root=tmp_path / "grading", notebooks=fixture_course.notebooks)
    shutil.copytree(fixture_course.root, copy.root)
    assert stale_releases(copy, fixture_course) == []
    target = copy.notebook(copy.release, "90_grade_fixture_tensors")
    target.write_text(target.read_text().replace("Exercise 1", "Exercise one"))
    assert stale_releases(copy, fixture_course) == [
        "90_grade_fixture_tensors: release is out of date with notebooks/ (run `course release`)"
    ]


@pytest.fixture(scope="module")
def real_release(tmp_path_factory):
    if not REAL_NOTEBOOKS:
        pytest.skip("no notebooks in notebooks/ yet")
    course = Course(root=tmp_path_factory.mktemp("real") / "grading", notebooks=REPO_ROOT / "notebooks")
    release(course)  # raises on an nbgrader failure or a leak
    return course


def test_release_of_every_real_notebook_works_and_leaks_nothing(real_release):
    for path in REAL_NOTEBOOKS:
        released = nbformat.read(real_release.notebook(real_release.release, path.stem), as_version=4)
        assert find_leaks(nbformat.read(path, as_version=4), released) == []


def test_committed_releases_are_current(real_release):
    problems = stale_releases(default_course(), real_release)
    assert not problems, "\n".join(problems)
