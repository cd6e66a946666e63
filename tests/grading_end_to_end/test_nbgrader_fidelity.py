"""``course autograde`` does what plain ``nbgrader autograde`` does with what nbgrader's own app tests check.

The cases come from nbgrader 0.9.6's ``tests/apps/test_nbgrader_autograde.py``: ``timestamp.txt``
copied byte for byte (``test_update_newer``), identical submissions giving identical
autograded files (``test_force_single_notebook``), a ``groupshared`` course's folder modes
(``test_permissions``), ``CourseDirectory.student_id_exclude`` (``test_student_id_exclude``),
the ``--notebook`` filter (``test_update_newer_single_notebook``) and ``--no-execute``, which
``course`` refuses. Where it is cheap, plain nbgrader grades the same input (its command,
``nbgrader autograde``, in a copy of the course) and the results are compared.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grading.autograde import autograde
from grading.cli import main
from grading.coursedir import Course, CourseError
from grading.feedback import feedback
from grading.release import release

# Plain nbgrader and course on the same courses: `make grading-test` (and CI) runs this file, `make test` does not.
pytestmark = pytest.mark.slow_grading

A = "ps1"
STAMP = "2015-02-02 15:58:23.948203 America/Los_Angeles"  # nbgrader's test writes it without a newline
NEWER = "2015-02-02 16:58:23.948203 America/Los_Angeles"
SOLUTION = {"grade": False, "grade_id": "answer", "locked": False, "schema_version": 3, "solution": True, "task": False}
TEST = {"grade": True, "grade_id": "answer_tests", "locked": True, "points": 1, "schema_version": 3, "solution": False,
        "task": False}  # fmt: skip
NBGRADER = Path(sys.executable).parent / "nbgrader"
ANSWER = "def one():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"


def _source() -> nbformat.NotebookNode:
    nb = new_notebook(
        cells=[
            new_markdown_cell("Return one."),
            new_code_cell(ANSWER, metadata={"nbgrader": SOLUTION}),
            new_code_cell('assert one() == 1, "one() should be 1"', metadata={"nbgrader": TEST}),
        ]
    )
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def _answered(released: Path, body: str = "    return 1", kernel: str = "python3") -> bytes:
    nb = nbformat.read(released, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "answer")
    cell.source = cell.source.split("# YOUR CODE HERE")[0].rstrip(" ") + body
    nb.metadata["kernelspec"] = {"display_name": kernel, "language": "python", "name": kernel}
    return nbformat.writes(nb).encode()


def _make_course(root: Path, config: str = "") -> Course:
    """A course of one assignment with two identical notebooks, ``p1`` and ``p2``, released."""
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.course_id = 'fidelity'\n{config}")
    course = Course(root)  # its config is read on first use
    for name in ("p1", "p2"):
        (course.source / A).mkdir(parents=True, exist_ok=True)
        nbformat.write(_source(), course.source / A / f"{name}.ipynb")
    (course.source / A / "data.txt").write_text("data")
    release(course)
    return course


def _submit(course: Course, student: str, files: dict[str, bytes], stamp: str | None = STAMP) -> Path:
    folder = course.folder("submitted", A, student)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if stamp is not None:
        (folder / "timestamp.txt").write_bytes(stamp.encode())
    return folder


def _plain(course: Course, *args: str) -> subprocess.CompletedProcess:
    """Plain ``nbgrader autograde`` on the course (its own command, run in the course directory)."""
    return subprocess.run(
        [str(NBGRADER), "autograde", A, *args], cwd=course.root, capture_output=True, text=True, timeout=300
    )


def _mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))[2:]


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, Course]:
    """A groupshared course that excludes two students, graded by plain nbgrader and by ``course``."""
    tmp = tmp_path_factory.mktemp("fidelity")
    config = "c.CourseDirectory.groupshared = True\nc.CourseDirectory.student_id_exclude = 'bar,baz'\n"
    ours = _make_course(tmp / "ours", config)
    released = ours.folder("release", A)
    blah = _answered(released / "p1.ipynb", kernel="blah")  # a note ("asked for kernel blah") in each notebook
    for student in ("foo", "bar", "baz"):
        _submit(ours, student, {"p1.ipynb": blah, "p2.ipynb": blah})
    plain = Course(tmp / "plain")
    shutil.copytree(ours.root, plain.root)
    result = _plain(plain)
    assert result.returncode == 0, result.stderr
    summary = autograde(ours, jobs=1, progress=False)
    return {"ours": ours, "plain": plain, "summary": summary}


def test_timestamp_is_copied_byte_for_byte(shared):
    for course in (shared["plain"], shared["ours"]):
        assert (course.folder("autograded", A, "foo") / "timestamp.txt").read_bytes() == STAMP.encode()
    feedback(shared["ours"], students=["foo"])  # nbgrader's generate_feedback copies it along
    assert (shared["ours"].folder("feedback", A, "foo") / "timestamp.txt").read_bytes() == STAMP.encode()


def test_identical_submissions_give_identical_files(shared):
    folder = shared["ours"].folder("autograded", A, "foo")
    p1, p2 = (folder / "p1.ipynb").read_bytes(), (folder / "p2.ipynb").read_bytes()
    assert b"Grading notes" in p1 and b"kernel &#96;blah&#96;" in p1
    assert p1 == p2


def test_groupshared_modes_are_nbgraders(shared):
    for name in ("plain", "ours"):
        folder = shared[name].folder("autograded", A, "foo")
        assert _mode(folder) == "2775", name
        assert {p.name: _mode(p) for p in folder.iterdir()} == dict.fromkeys(
            ["p1.ipynb", "p2.ipynb", "data.txt", "timestamp.txt"], "664"
        ), name


def test_student_id_exclude_is_honoured(shared):
    for name in ("plain", "ours"):
        course = shared[name]
        assert not course.folder("autograded", A, "bar").exists() and not course.folder("autograded", A, "baz").exists()
        with course.gradebook() as gb:
            assert sorted(s.student.id for s in gb.find_assignment(A).submissions) == ["foo"], name
    assert shared["summary"].ignored == [
        f"{student}/{A}: excluded by CourseDirectory.student_id_exclude" for student in ("bar", "baz")
    ]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict[str, Course]:
    """foo's p1 and p2 graded, then both resubmitted (newer) but only p1 regraded with --notebook p1."""
    tmp = tmp_path_factory.mktemp("single")
    ours = _make_course(tmp / "ours")
    released = ours.folder("release", A)
    right = _answered(released / "p1.ipynb")
    _submit(ours, "foo", {"p1.ipynb": right, "p2.ipynb": right})
    plain = Course(tmp / "plain")
    shutil.copytree(ours.root, plain.root)
    assert _plain(plain).returncode == 0
    autograde(ours, jobs=1, progress=False)
    before = {"ours": _files(ours), "plain": _files(plain)}
    wrong = _answered(released / "p1.ipynb", "    return 2")
    for course in (ours, plain):
        _submit(course, "foo", {"p1.ipynb": wrong, "p2.ipynb": wrong}, NEWER)
    result = _plain(plain, "--notebook", "p1")
    assert result.returncode == 0, result.stderr
    assert main(["--course", str(ours.root), "autograde", "--notebook", "p1", "--jobs", "1", "--no-progress"]) == 0
    return {"ours": ours, "plain": plain, "before": before}


def _files(course: Course) -> dict[str, bytes]:
    folder = course.folder("autograded", A, "foo")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_notebook_filter_regrades_only_the_notebooks_it_matches(single):
    for name in ("plain", "ours"):
        course, before = single[name], single["before"][name]
        after = _files(course)
        assert after["p1.ipynb"] != before["p1.ipynb"] and after["p2.ipynb"] == before["p2.ipynb"], name
        assert after["timestamp.txt"] == NEWER.encode(), name
        with course.gradebook() as gb:
            scores = {nb.name: nb.score for nb in gb.find_submission(A, "foo").notebooks}
        assert scores == {"p1": 0, "p2": 1}, name  # p1 regraded (now wrong), p2 kept


def test_notebook_filter_skips_a_submission_without_the_notebook(single, capsys):
    course = single["ours"]
    _submit(course, "qux", {"p2.ipynb": _answered(course.folder("release", A) / "p2.ipynb")})
    args = ["--course", str(course.root), "autograde", "--notebook", "p1", "--student", "qux", "--no-progress"]
    assert main(args) == 1
    assert f"qux/{A}: no notebook matches --notebook 'p1'" in capsys.readouterr().err


def test_no_execute_is_refused_not_ignored(tmp_path, capsys):
    course = _make_course(tmp_path / "course", "c.Execute.enabled = False\n")
    _submit(course, "foo", {"p1.ipynb": _answered(course.folder("release", A) / "p1.ipynb")})
    with pytest.raises(CourseError, match=r"Execute.enabled = False is set in the config \(nbgrader's --no-execute\)"):
        autograde(course, jobs=1, progress=False)
    assert not course.folder("autograded", A, "foo").exists()
    assert main(["--course", str(course.root), "autograde", "--no-execute"]) == 1
    assert "--no-execute: nbgrader would then grade the outputs saved" in capsys.readouterr().err


def test_a_renamed_notebook_says_the_expected_one_is_missing_and_scores_0(tmp_path, capsys):
    course = _make_course(tmp_path / "course")
    answered = _answered(course.folder("release", A) / "p1.ipynb")
    _submit(course, "foo", {"p1 (1).ipynb": answered, "p2.ipynb": answered})
    assert main(["--course", str(course.root), "autograde", "--jobs", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert (
        f"{A}  foo: 1/2 - `p1 (1).ipynb` is not a notebook of this assignment, so not graded; and `p1.ipynb` "
        "(1 point) is missing from the submission and scores 0 (as in nbgrader). If it is `p1.ipynb` renamed, "
        "rename it back and run autograde with --force."
    ) in out
    assert "graded 1 submission, 0 grader errors, 1 with notes" in out


def _v0(data: bytes) -> bytes:
    """A notebook with nbgrader's metadata as it was before schema versions (``nbgrader update`` upgrades it)."""
    nb = nbformat.reads(data.decode(), as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if meta:
            cell.metadata["nbgrader"] = {k: meta[k] for k in ("grade", "grade_id", "solution", "locked") if k in meta}
            if meta.get("grade"):
                cell.metadata["nbgrader"]["points"] = str(meta["points"])  # v0 kept points as text
    return nbformat.writes(nb).encode()


def test_old_metadata_is_graded_where_nbgrader_asks_for_nbgrader_update(tmp_path):
    ours = _make_course(tmp_path / "ours")
    answered = _answered(ours.folder("release", A) / "p1.ipynb")
    _submit(ours, "foo", {"p1.ipynb": _v0(answered), "p2.ipynb": _v0(answered)})
    plain = Course(tmp_path / "plain")
    shutil.copytree(ours.root, plain.root)
    result = _plain(plain)
    assert result.returncode == 1 and "nbgrader update" in result.stderr
    summary = autograde(ours, jobs=1, progress=False)
    [graded] = summary.graded
    assert (graded.score, graded.max_score, graded.grader_error) == (2, 2, False)


def test_config_selections_choose_the_submissions(shared, tmp_path):
    """``CourseDirectory.assignment_id`` and ``student_id`` in the config are globs nbgrader grades by."""
    from grading.autograde import find_submissions

    shutil.copytree(shared["ours"].root, tmp_path / "copy")
    with (tmp_path / "copy" / "nbgrader_config.py").open("a") as config:
        config.write("c.CourseDirectory.student_id_exclude = ''\nc.CourseDirectory.student_id = 'f*'\n")
        config.write("c.CourseDirectory.assignment_id = 'ps*'\n")
    course = Course(tmp_path / "copy")  # its config is read on first use
    _submit(course, "fred", {"p1.ipynb": b"{}"})
    found, ignored = find_submissions(course)
    assert [s.student for s in found] == ["foo", "fred"] and ignored == []
    assert [s.student for s in find_submissions(course, students=["bar"])[0]] == ["bar"]  # --student wins
