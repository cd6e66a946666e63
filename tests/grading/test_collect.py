"""``course collect``: nbgrader's layout, flat LMS files, and never losing or mixing up anyone's work."""

from __future__ import annotations

import shutil
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grading.collect import CollectError, collect, parse_name
from grading.coursedir import Course
from tests.support.paths import FIXTURES

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


# -- zips written by Info-ZIP (Linux's and macOS's `zip`) and Windows tools --------------------------

INFOZIP_FIXTURE = FIXTURES / "infozip_utf8_names.zip"
NOTEBOOK = "problème"  # a notebook name that is not ASCII
INFOZIP_FILES = {  # name in the zip -> (student, modification time in UTC)
    f"hw1/alice_{NOTEBOOK}.ipynb": ("alice", "2026-01-09 12:34:56"),
    "hw1/bob_proble\u0300me.ipynb": ("bob", "2026-01-10 08:00:00"),  # decomposed (NFD), as macOS writes it
    "hw1/carol_essay.ipynb": ("carol", "2026-01-10 23:30:00"),
}


def build_infozip_archive(target: Path) -> Path:
    """The zip Info-ZIP's ``zip`` writes of ``INFOZIP_FILES`` on a machine in New York (UTC-5).

    Also how the committed ``INFOZIP_FIXTURE`` was made (``zip`` 3.0, Debian).
    """
    import os
    import subprocess

    work = target.parent / "infozip-work"
    for name, (student, when) in INFOZIP_FILES.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f'{{"student": "{student}"}}'.encode())
        stamp = datetime.strptime(when, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
        os.utime(path, (stamp, stamp))
    env = {**os.environ, "TZ": "America/New_York", "LC_ALL": "C.UTF-8"}
    subprocess.run(["zip", "-q", str(target), *INFOZIP_FILES], cwd=work, env=env, check=True)
    return target


@pytest.fixture(params=["committed", "fresh"])
def infozip_archive(request, tmp_path) -> Path:
    if request.param == "committed":
        return INFOZIP_FIXTURE
    if shutil.which("zip") is None:
        pytest.skip("Info-ZIP's zip is not installed (the committed archive is tested)")
    return build_infozip_archive(tmp_path / "download.zip")


def test_infozip_names_that_are_not_ascii_and_times_in_utc(tmp_path, infozip_archive):
    """Info-ZIP stores UTF-8 names without the UTF-8 flag (Python reads them as cp437) and local
    times in the header, the UTC time in its extended-timestamp field (0x5455)."""
    with zipfile.ZipFile(infozip_archive) as archive:  # what the bug was made of
        info = archive.infolist()[0]
        assert not info.flag_bits & 0x800 and info.filename != info.filename.encode("cp437").decode("utf-8")
        assert info.date_time[3] == 7  # 12:34 UTC is 07:34 in New York
    course = _course(tmp_path, {"hw1": [NOTEBOOK, "essay"]})
    report = collect(course, infozip_archive)
    assert [r.note for r in report if not r.path] == []
    for student, when in INFOZIP_FILES.values():
        folder = course.folder("submitted", "hw1", student)
        notebook = "essay" if student == "carol" else NOTEBOOK
        assert (folder / f"{notebook}.ipynb").read_bytes() == f'{{"student": "{student}"}}'.encode()
        assert (folder / "timestamp.txt").read_text().startswith(when), student


def _patched_zip(path: Path, placeholder: str, stored: bytes, extra: bytes = b"") -> None:
    """A zip of one entry whose name is stored as ``stored`` (bytes of a legacy code page, no UTF-8 flag)."""
    info = zipfile.ZipInfo(placeholder, (2026, 1, 9, 7, 34, 56))
    info.extra = extra
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(info, b"{}")
    assert len(placeholder) == len(stored)
    path.write_bytes(path.read_bytes().replace(placeholder.encode(), stored))


def test_windows_unicode_path_field_and_legacy_names(tmp_path):
    """A Windows archiver stores the name in the OEM code page and adds its UTF-8 form in an Info-ZIP
    Unicode Path field (0x7075), valid while its CRC matches the stored name; without one, cp437."""
    import struct
    import zlib

    from grading.collect import zip_entry_name

    stored = f"alice_{NOTEBOOK}.ipynb".encode("cp850")
    utf8 = f"alice_{NOTEBOOK}.ipynb".encode()
    field = struct.pack("<BI", 1, zlib.crc32(stored)) + utf8
    _patched_zip(tmp_path / "windows.zip", "x" * len(stored), stored, struct.pack("<HH", 0x7075, len(field)) + field)
    with zipfile.ZipFile(tmp_path / "windows.zip") as archive:
        assert zip_entry_name(archive.infolist()[0]) == f"alice_{NOTEBOOK}.ipynb"
    stale = struct.pack("<BI", 1, zlib.crc32(b"renamed since")) + b"other.ipynb"  # the name changed after
    _patched_zip(tmp_path / "stale.zip", "x" * len(stored), stored, struct.pack("<HH", 0x7075, len(stale)) + stale)
    _patched_zip(tmp_path / "legacy.zip", "x" * len(stored), stored)
    for name in ("stale.zip", "legacy.zip"):
        with zipfile.ZipFile(tmp_path / name) as archive:
            assert zip_entry_name(archive.infolist()[0]) == stored.decode("cp437")  # not UTF-8: as Python reads it


def test_ntfs_times_and_no_time_field(tmp_path):
    import struct

    from grading.collect import zip_entry_time

    when = datetime(2026, 1, 9, 12, 34, 56, tzinfo=UTC)
    ticks = int((when.timestamp() + 11_644_473_600) * 10**7)
    ntfs = struct.pack("<IHH3Q", 0, 1, 24, ticks, ticks, ticks)
    info = zipfile.ZipInfo("a.ipynb", (2026, 1, 9, 13, 34, 56))  # written in Paris (UTC+1)
    info.extra = struct.pack("<HH", 0x000A, len(ntfs)) + ntfs
    assert zip_entry_time(info) == when
    info.extra = b""
    assert zip_entry_time(info) == datetime(2026, 1, 9, 13, 34, 56, tzinfo=UTC)  # no zone known: UTC


LINK = "a symbolic link (collect never follows one)"


def test_symbolic_links_under_the_source_are_never_followed(tmp_path):
    """The reported attack: ``mallory -> <another course>/submitted/bob`` collected bob's files as mallory's."""
    course = _course(tmp_path, {"ps1": ["problems"]})
    bob = tmp_path / "other_course" / "submitted" / "bob" / "ps1"
    _submission(bob.parent.parent, "bob", "ps1", {"problems.ipynb": b"BOB", "private.txt": b"bob's secret"}, "")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the instructor's secret")
    inbox = tmp_path / "inbox"
    _submission(inbox, "alice", "ps1", {"problems.ipynb": b"ALICE"}, "2026-01-09 12:00:00 UTC")
    alice = inbox / "alice" / "ps1"
    (alice / "notes.txt").symlink_to(secret)  # a file inside a submission, pointing outside
    (alice / "data").symlink_to(bob, target_is_directory=True)  # a folder inside a submission
    (inbox / "mallory").symlink_to(bob.parent, target_is_directory=True)  # a student folder
    (inbox / "carol").mkdir()
    (inbox / "carol" / "ps1").symlink_to(bob, target_is_directory=True)  # an assignment folder
    (inbox / "dave_ps1.ipynb").symlink_to(bob / "problems.ipynb")  # a flat file
    report = collect(course, inbox)
    assert [r.student for r in report if r.path] == ["alice"]
    assert sorted(p.name for p in course.submitted.iterdir()) == ["alice"]
    collected = course.folder("submitted", "ps1", "alice")
    assert sorted(p.name for p in collected.iterdir()) == ["problems.ipynb", "timestamp.txt"]
    assert (collected / "problems.ipynb").read_bytes() == b"ALICE"
    for link in (alice / "notes.txt", alice / "data", inbox / "mallory", inbox / "carol" / "ps1",
                 inbox / "dave_ps1.ipynb"):  # fmt: skip
        assert f"skipped {link}: {LINK}" in [r.note for r in report], link
    everything = b"".join(p.read_bytes() for p in course.root.rglob("*") if p.is_file())
    assert b"BOB" not in everything and b"secret" not in everything


def test_a_zip_entry_stored_as_a_symbolic_link_is_skipped(tmp_path):
    course = _course(tmp_path)
    download = tmp_path / "download.zip"
    with zipfile.ZipFile(download, "w") as archive:
        archive.writestr(zipfile.ZipInfo(f"alice_{A}.ipynb", (2026, 1, 1, 9, 0, 0)), b"ALICE")
        link = zipfile.ZipInfo(f"mallory_{A}.ipynb", (2026, 1, 1, 9, 0, 0))
        link.create_system = 3  # Unix: the mode is in the high 16 bits, as Info-ZIP's `zip --symlinks` writes
        link.external_attr = 0o120777 << 16  # S_IFLNK: the entry's bytes are the link's target
        archive.writestr(link, b"../../other_course/submitted/bob/ps1/problems.ipynb")
    report = collect(course, download)
    assert [r.student for r in report if r.path] == ["alice"]
    assert f"skipped mallory_{A}.ipynb: {LINK}" in [r.note for r in report]
    assert not course.folder("submitted", A, "mallory").exists()
