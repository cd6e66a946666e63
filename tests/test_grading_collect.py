"""``course collect``: nbgrader's layout, flat LMS files, and never losing or mixing up anyone's work."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from grading.collect import CollectError, collect, parse_name
from grading.coursedir import Course

A = "90_grade_fixture_tensors"
ONE = {A: [A], "01_other": ["01_other"]}


@pytest.mark.parametrize(
    ("name", "pattern", "expected"),
    [
        (f"alice_{A}.ipynb", None, ("alice", A, A)),
        (f"alice/{A}.ipynb", None, ("alice", A, A)),
        (f"{A}_bob.ipynb", None, ("bob", A, A)),
        (f"carol_{A}-1.ipynb", None, ("carol", A, A)),
        (f"{A}_12345.ipynb", None, ("12345", A, A)),
        (f"smithj_12345_678901_{A}.ipynb", r"(?P<student>[^_]+)_", ("smithj", A, A)),
        (f"../../etc/evil_{A}.ipynb", None, ("evil", A, A)),
        (f"dan bob's copy_{A}.ipynb", None, ("dan_bob_s_copy", A, A)),
        (f"{A}/{A}.ipynb", None, "no student id in its name or folder (use --student-pattern)"),
        ("alice_homework.ipynb", None, "no assignment of this course in its name or folder (use --assignment)"),
        (f"{A}.ipynb", None, "no student id in its name or folder (use --student-pattern)"),
    ],
)
def test_parse_name(name, pattern, expected):
    assert parse_name(name, ONE, student_pattern=pattern) == expected


def test_parse_name_with_several_notebooks():
    ps1 = {"ps1": ["problems", "essay"]}
    assert parse_name("alice_problems.ipynb", ps1, "ps1") == ("alice", "ps1", "problems")
    assert parse_name("ps1/bob_essay-2.ipynb", ps1) == ("bob", "ps1", "essay")
    assert parse_name("alice_notes.ipynb", ps1, "ps1") == "cannot tell which notebook of ps1 it is (problems, essay)"


def _course(tmp_path: Path, notebooks: dict[str, list[str]] | None = None) -> Course:
    course = Course(root=tmp_path / "grading")
    for assignment, names in (notebooks or {A: [A]}).items():
        (course.source / assignment).mkdir(parents=True)
        for name in names:
            (course.source / assignment / f"{name}.ipynb").write_text("{}")
    return course


def test_collect_zip_keeps_bytes_newest_wins_and_stays_inside(tmp_path):
    course = _course(tmp_path)
    download = tmp_path / "download.zip"
    with zipfile.ZipFile(download, "w") as archive:
        archive.writestr(zipfile.ZipInfo(f"alice_{A}.ipynb", (2026, 1, 1, 9, 0, 0)), b"old")
        archive.writestr(zipfile.ZipInfo(f"alice_{A}-1.ipynb", (2026, 1, 2, 9, 0, 0)), b"\xff not even utf-8")
        archive.writestr(zipfile.ZipInfo(f"../../evil_{A}.ipynb", (2026, 1, 1, 9, 0, 0)), b"{}")
        archive.writestr("readme.txt", b"ignored")
    report = collect(course, download)
    written = sorted(str(r.path.relative_to(course.root)) for r in report if r.path)
    assert written == [f"submitted/alice/{A}", f"submitted/evil/{A}"]
    assert (course.submitted / "alice" / A / f"{A}.ipynb").read_bytes() == b"\xff not even utf-8"
    assert (course.submitted / "alice" / A / "timestamp.txt").read_text().startswith("2026-01-02 09:00:00")
    assert any(f"skipped alice_{A}.ipynb: alice_{A}-1.ipynb is newer" == r.note for r in report)
    assert not (tmp_path.parent / "evil").exists()


def _submission(root: Path, student: str, assignment: str, files: dict[str, bytes], stamp: str | None) -> Path:
    folder = root / student / assignment
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    if stamp:
        (folder / "timestamp.txt").write_text(stamp)
    return folder


def test_nbgraders_layout_is_copied_whole_and_never_mixed_up(tmp_path):
    """The reported bug: ``submitted/<student>/<assignment>/`` took the assignment for the student
    and replaced one student's notebook with another's."""
    course = _course(tmp_path, {"ps1": ["problems", "essay"]})
    other = tmp_path / "other_course" / "submitted"
    files = {"problems.ipynb": b"A1", "essay.ipynb": b"A2", "data/x.csv": b"1"}
    _submission(other, "alice", "ps1", files, "2026-01-09 12:00:00 UTC")
    _submission(other, "bob", "ps1", {"problems.ipynb": b"B1"}, "2026-01-12 18:00:00 UTC")
    report = collect(course, other.parent)  # the course directory itself; its submitted/ is found
    assert sorted(r.student for r in report if r.path) == ["alice", "bob"]
    alice, bob = course.folder("submitted", "ps1", "alice"), course.folder("submitted", "ps1", "bob")
    assert (alice / "problems.ipynb").read_bytes() == b"A1" and (alice / "essay.ipynb").read_bytes() == b"A2"
    assert (alice / "data" / "x.csv").read_bytes() == b"1"
    assert (bob / "problems.ipynb").read_bytes() == b"B1" and not (bob / "essay.ipynb").exists()
    assert (bob / "timestamp.txt").read_text() == "2026-01-12 18:00:00 UTC"


def test_a_submission_is_never_deleted_and_older_input_never_wins(tmp_path):
    course = _course(tmp_path, {"ps1": ["problems"]})
    first = tmp_path / "first"
    _submission(first, "alice", "ps1", {"problems.ipynb": b"v1"}, "2026-01-09 12:00:00 UTC")
    collect(course, first)
    again = collect(course, first)
    assert [r.note for r in again] == ["unchanged alice/ps1"]
    older = tmp_path / "older"
    _submission(older, "alice", "ps1", {"problems.ipynb": b"v0"}, "2026-01-01 12:00:00 UTC")
    assert next(r.note for r in collect(course, older)).startswith("kept alice/ps1")
    newer = tmp_path / "newer"
    _submission(newer, "alice", "ps1", {"problems.ipynb": b"v2"}, "2026-01-10 12:00:00 UTC")
    report = collect(course, newer)
    assert (course.folder("submitted", "ps1", "alice") / "problems.ipynb").read_bytes() == b"v2"
    moved = [r.note for r in report if r.note.startswith("moved the older")]
    kept = next((course.root / "submitted_replaced").rglob("problems.ipynb"))
    assert moved and kept.read_bytes() == b"v1"


def test_ambiguous_input_is_refused_and_nothing_written(tmp_path):
    course = _course(tmp_path)
    folder = tmp_path / "inbox"
    (folder / "bob").mkdir(parents=True)
    (folder / "bob" / f"{A}.ipynb").write_bytes(b"{}")
    (folder / f"bob_{A}.ipynb").write_bytes(b"{}")  # the same student and notebook from two folders
    with pytest.raises(CollectError, match="from different folders"):
        collect(course, folder)
    assert not course.submitted.exists()


def test_nothing_to_collect_says_why(tmp_path):
    course = _course(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CollectError, match="nothing to collect"):
        collect(course, empty)
    (empty / "notes.ipynb").write_bytes(b"{}")
    with pytest.raises(CollectError, match="no assignment of this course"):
        collect(course, empty)
    with pytest.raises(CollectError, match="unknown assignment"):
        collect(course, empty, assignment="nope")
