"""``course collect``: student ids and assignments from file names, bytes kept as they are."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from course_utils.grading.collect import collect, parse_name
from course_utils.grading.course import Course

A = "90_grade_fixture_tensors"


@pytest.mark.parametrize(
    ("name", "pattern", "expected"),
    [
        (f"alice_{A}.ipynb", None, ("alice", A)),
        (f"alice/{A}.ipynb", None, ("alice", A)),
        (f"{A}_bob.ipynb", None, ("bob", A)),
        (f"carol_{A}-1.ipynb", None, ("carol", A)),
        (f"smithj_12345_678901_{A}.ipynb", r"(?P<student>[^_]+)_", ("smithj", A)),
        (f"../../etc/evil_{A}.ipynb", None, ("evil", A)),
        (f"dan bob's copy_{A}.ipynb", None, ("dan_bob_s_copy", A)),
        ("alice_homework.ipynb", None, None),
        (f"{A}.ipynb", None, None),
    ],
)
def test_parse_name(name, pattern, expected):
    assert parse_name(name, [A, "01_other"], student_pattern=pattern) == expected


def _course(tmp_path: Path) -> Course:
    course = Course(root=tmp_path / "grading")
    (course.source / A).mkdir(parents=True)
    (course.source / A / f"{A}.ipynb").write_text("{}")
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
    assert written == [f"submitted/alice/{A}/{A}.ipynb", f"submitted/evil/{A}/{A}.ipynb"]
    assert (course.submitted / "alice" / A / f"{A}.ipynb").read_bytes() == b"\xff not even utf-8"
    assert (course.submitted / "alice" / A / "timestamp.txt").read_text().startswith("2026-01-02 09:00:00")
    assert any("replaced" in r.note for r in report)
    assert not (tmp_path.parent / "evil").exists()


def test_collect_folder(tmp_path):
    course = _course(tmp_path)
    folder = tmp_path / "inbox"
    (folder / "bob").mkdir(parents=True)
    (folder / "bob" / f"{A}.ipynb").write_bytes(b"{}")
    (folder / "notes.ipynb").write_bytes(b"{}")
    report = collect(course, folder)
    assert [(r.student, r.assignment) for r in report if r.path] == [("bob", A)]
    assert any("skipped notes.ipynb" in r.note for r in report)
