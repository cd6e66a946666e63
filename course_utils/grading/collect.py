"""Import submissions from a folder of notebooks or an LMS zip download.

Contract: ``collect(course, path)`` takes every ``.ipynb`` in a folder (recursively) or in
a ``.zip`` and copies its bytes, unparsed (a broken file is graded, not rejected), to
``submitted/<student>/<assignment>/<assignment>.ipynb`` with a ``timestamp.txt`` (the
zip entry's time or the file's modification time, UTC). The assignment is the released
assignment whose name appears in the file name (or ``assignment=``); the student id is
what precedes it (``alice_01_run_tensors_on_the_gpu.ipynb``, Canvas's
``alice_12345_678_01_run....ipynb`` with ``student_pattern=r"(?P<student>[^_]+)_"``),
else the enclosing folder's name (``alice/01_run_tensors_on_the_gpu.ipynb``). Student
ids are reduced to ``[A-Za-z0-9._-]``. When a student has several files for one
assignment the newest wins. Zip entries are read by name only (no path is ever joined
from a zip), and oversized entries are skipped.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from course_utils.grading.course import Course
from course_utils.grading.rebuild import MAX_SUBMISSION_BYTES

__all__ = ["Collected", "collect", "parse_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Collected:
    student: str
    assignment: str
    timestamp: datetime
    path: Path | None  # where it was written (None when skipped)
    note: str = ""


def _clean(student: str) -> str:
    student = _UNSAFE.sub("_", student).strip("._-")
    return student if student not in {"", ".", ".."} else ""


def parse_name(
    name: str, assignments: list[str], assignment: str | None = None, student_pattern: str | None = None
) -> tuple[str, str] | None:
    """(student, assignment) from a path like ``alice_01_x.ipynb`` or ``alice/01_x.ipynb``; None if unknown."""
    path = PurePosixPath(name)
    stem = path.stem
    if assignment is None:
        matches = [a for a in assignments if a in stem]
        if not matches:
            return None
        assignment = max(matches, key=len)
    before, _, after = stem.partition(assignment) if assignment in stem else (stem, "", "")
    if student_pattern:
        match = re.search(student_pattern, stem)
        student = _clean(match.group("student")) if match else ""
    else:
        student = _clean(before) or _clean(re.sub(r"^[-_ ]*\d*$", "", after))
    if not student and len(path.parts) > 1:
        student = _clean(path.parts[-2])
    return (student, assignment) if student else None


def _entries(source: Path):
    """(name, bytes, timestamp, size) for every notebook in a folder or zip (no bytes when too large)."""
    if source.is_dir():
        for path in sorted(source.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            stamp = datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)
            size = path.stat().st_size
            yield str(path.relative_to(source)), path.read_bytes() if size <= MAX_SUBMISSION_BYTES else b"", stamp, size
    elif zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            for info in archive.infolist():
                if info.is_dir() or not info.filename.endswith(".ipynb") or "__MACOSX" in info.filename:
                    continue
                stamp = datetime(*info.date_time, tzinfo=timezone.utc)
                small = info.file_size <= MAX_SUBMISSION_BYTES
                data = archive.read(info)[: MAX_SUBMISSION_BYTES + 1] if small else b""
                yield info.filename, data, stamp, max(info.file_size, len(data))
    else:
        raise ValueError(f"{source} is neither a folder nor a zip file")


def collect(
    course: Course,
    source: Path,
    *,
    assignment: str | None = None,
    student_pattern: str | None = None,
) -> list[Collected]:
    """Copy every submission found in ``source`` into ``submitted/``; see the module docstring."""
    assignments = course.assignments()
    if assignment is not None and assignment not in assignments:
        raise ValueError(f"unknown assignment {assignment!r} (released: {', '.join(assignments) or 'none'})")
    best: dict[tuple[str, str], tuple[datetime, str, bytes]] = {}
    report: list[Collected] = []
    for name, data, stamp, size in _entries(source):
        parsed = parse_name(name, assignments, assignment, student_pattern)
        if parsed is None:
            report.append(Collected("?", "?", stamp, None, f"skipped {name}: no student id or assignment in the name"))
            continue
        if size > MAX_SUBMISSION_BYTES:
            report.append(Collected(*parsed, stamp, None, f"skipped {name}: {size / 1e6:.0f} MB is too large"))
            continue
        if parsed in best and best[parsed][0] >= stamp:
            report.append(Collected(*parsed, stamp, None, f"skipped {name}: an equal or newer file exists"))
            continue
        if parsed in best:
            report.append(Collected(*parsed, best[parsed][0], None, f"replaced {best[parsed][1]} by newer {name}"))
        best[parsed] = (stamp, name, data)
    for (student, name), (stamp, _, data) in sorted(best.items()):
        folder = course.submitted / student / name
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{name}.ipynb"
        target.write_bytes(data)
        (folder / "timestamp.txt").write_text(stamp.strftime("%Y-%m-%d %H:%M:%S.%f %Z"), encoding="utf-8")
        report.append(Collected(student, name, stamp, target))
    course.protect()
    return report
