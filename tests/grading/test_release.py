"""``course release``: student versions without solutions or hidden tests, for any course, kept current."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from grading.cli import main
from grading.coursedir import REPO_ROOT, Course, default_course
from grading.release import ReleaseError, find_leaks, release, secret_blocks, stale_releases
from tests.support.paths import FIXTURES

REAL_NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NAME = "90_grade_fixture_tensors"


@pytest.fixture(scope="module")
def fixture_course(tmp_path_factory):
    course = Course(root=tmp_path_factory.mktemp("fixture") / "grading", notebooks=FIXTURES / "notebooks")
    release(course)
    return course


def _read(course: Course, step: str, assignment: str, notebook: str) -> nbformat.NotebookNode:
    return nbformat.read(course.folder(step, assignment) / f"{notebook}.ipynb", as_version=4)


@pytest.mark.slow
def test_release_replaces_solutions_and_drops_hidden_tests(fixture_course):
    course = fixture_course
    source, released = _read(course, "source", NAME, NAME), _read(course, "release", NAME, NAME)
    assert len(secret_blocks(source)) == 6  # three solutions, three hidden-test blocks
    assert find_leaks(source, released) == []
    text = (course.folder("release", NAME) / f"{NAME}.ipynb").read_text()
    for secret in ("return 2 * m * n * k", "matmul_flops(7, 5, 3)", "BEGIN HIDDEN", "BEGIN SOLUTION"):
        assert secret not in text
    stubs = [c for c in released.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert len(stubs) == 3 and all("raise NotImplementedError()" in c.source for c in stubs)
    assert all(
        not c.get("outputs") and c.get("execution_count") is None for c in released.cells if c.cell_type == "code"
    )
    with course.gradebook() as gb:  # the gradebook keeps the hidden tests for grading
        cells = {c.name: c.source for c in gb.find_notebook(NAME, NAME).source_cells}
    assert "matmul_flops(7, 5, 3)" in cells["ex1_matmul_flops_tests"]


@pytest.mark.slow
def test_any_course_releases_every_notebook_and_file_of_source(tmp_path):
    """A standard nbgrader course: notebooks of any name, data and images beside them, a due date."""
    course = Course(tmp_path / "compat")
    shutil.copytree(FIXTURES / "compat_course", course.root)
    written = release(course, duedate="2026-01-10 17:00:00 UTC")
    assert sorted(p.name for p in written) == ["essay.ipynb", "problems.ipynb"]
    folder = course.folder("release", "ps1")
    assert (folder / "data" / "points.csv").is_file() and (folder / "images" / "diagram.png").is_file()
    essay = _read(course, "release", "ps1", "essay")
    assert "YOUR ANSWER HERE" in essay.cells[2].source  # the written answer's model text is gone
    with course.gradebook() as gb:
        assert gb.find_assignment("ps1").duedate.isoformat() == "2026-01-10T17:00:00"
    assert stale_releases(course) == []


def test_nothing_to_release_or_an_unknown_name_is_an_error(tmp_path):
    with pytest.raises(ReleaseError, match="no assignments in"):
        release(Course(tmp_path / "empty"))
    course = Course(tmp_path / "compat")
    shutil.copytree(FIXTURES / "compat_course", course.root)
    with pytest.raises(ReleaseError, match=r"no such assignment.*ps2.*have: ps1"):
        release(course, ["ps2"])
    with pytest.raises(ReleaseError, match="cannot read the due date"):
        release(course, duedate="next tuesday-ish")


@pytest.mark.slow
def test_find_leaks_reports_a_solution_line_in_the_release(fixture_course):
    course = fixture_course
    source, released = _read(course, "source", NAME, NAME), _read(course, "release", NAME, NAME)
    released.cells[0].source += "\n\nHint: `return 2 * m * n * k`"
    released.cells[-1].source += '\ncheck_int(matmul_flops(7, 5, 3), 210, "matmul_flops(7, 5, 3)")'
    leaks = find_leaks(source, released)
    assert any("solution line" in leak for leak in leaks) and any("hidden test line" in leak for leak in leaks)


def test_stale_release_is_reported(fixture_course, tmp_path):
    copy = Course(root=tmp_path / "grading", notebooks=fixture_course.notebooks)
    shutil.copytree(fixture_course.root, copy.root)
    assert stale_releases(copy, fixture_course) == []
    target = copy.folder("release", NAME) / f"{NAME}.ipynb"
    target.write_text(target.read_text().replace("Exercise 1", "Exercise one"))
    assert stale_releases(copy, fixture_course) == [
        f"{NAME}: release is out of date with notebooks/ (changed {NAME}.ipynb; run `course release`)"
    ]


@pytest.fixture(scope="module")
def real_release(tmp_path_factory):
    if not REAL_NOTEBOOKS:
        pytest.skip("no notebooks in notebooks/ yet")
    course = Course(root=tmp_path_factory.mktemp("real") / "grading", notebooks=REPO_ROOT / "notebooks")
    release(course)  # raises on an nbgrader failure or a leak
    return course


@pytest.mark.slow
def test_release_of_every_real_notebook_works_and_leaks_nothing(real_release):
    for path in REAL_NOTEBOOKS:
        released = _read(real_release, "release", path.stem, path.stem)
        assert find_leaks(nbformat.read(path, as_version=4), released) == []


@pytest.mark.slow
def test_committed_releases_are_current(real_release):
    problems = stale_releases(default_course(REPO_ROOT / "grading" / "course"), real_release)
    assert not problems, "\n".join(problems)


def _typo_course(root: Path) -> Course:
    """The compatibility course with a hidden-test block whose markers are misspelt (a real course's)."""
    course = Course(root)
    shutil.copytree(FIXTURES / "compat_course", course.root)
    path = course.folder("source", "ps1") / "problems.ipynb"
    nb = nbformat.read(path, as_version=4)
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "mean_column_tests")
    test.source = test.source.replace("### BEGIN HIDDEN TESTS", "### BEGIN HIDDEN TEST").replace(
        "### END HIDDEN TESTS", "### END HIDDENT TEST"
    )
    nbformat.write(nb, path)
    return course


@pytest.mark.slow
def test_a_misspelt_marker_stops_the_release(tmp_path, capsys):
    """nbgrader finds markers by exact text: with `### BEGIN HIDDEN TEST` it releases the hidden tests."""
    plain = _typo_course(tmp_path / "plain")
    assert plain.api().generate_assignment("ps1")["success"]
    leaked = (plain.folder("release", "ps1") / "problems.ipynb").read_text()
    assert 'mean_of_column(\\"data/points.csv\\", \\"y\\")' in leaked  # plain nbgrader released the hidden test

    course = _typo_course(tmp_path / "ours")
    with pytest.raises(ReleaseError) as caught:
        release(course)
    message = str(caught.value)
    first = "ps1/problems.ipynb: mean_column_tests, line 2: '### BEGIN HIDDEN TEST' looks like 'BEGIN HIDDEN TESTS'"
    assert first in message
    assert "mean_column_tests, line 4: '### END HIDDENT TEST' looks like 'END HIDDEN TESTS'" in message
    assert not course.release.exists()
    assert main(["--course", str(course.root), "release"]) == 1
    assert "nothing was released" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "meant"),
    [
        ("### begin solution", "BEGIN SOLUTION"),  # nbgrader's test is case-sensitive
        ("    ### END SOLUTON", "END SOLUTION"),
        ("# BEGIN_HIDDEN_TESTS", "BEGIN HIDDEN TESTS"),
        ("### BEGIN SOLUTION", None),  # the marker itself
        ("### BEGIN SOLUTIONS", None),  # contains the marker: nbgrader takes it
        ("# Hidden tests", None),  # a comment, not a marker
        ("# Solution", None),
        ("# the end of the tests", None),
    ],
)
def test_what_counts_as_a_misspelt_marker(line, meant):
    from grading.release import misspelt_markers

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = 1\n{line}")])
    markers = ["BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"]
    expected = [f"cell 1, line 2: {line.strip()!r} looks like {meant!r} but is not one"] if meant else []
    assert misspelt_markers(nb, markers) == expected
