"""Import submissions into ``submitted/<student>/<assignment>/``: from nbgrader's own layout,
a folder of notebooks, or an LMS zip download.

Contract: ``collect(course, path)`` reads, never changes, ``path`` and copies bytes as they
are (a broken file is graded, with an explanation, not rejected):

* **nbgrader's layout** (``path`` is a course directory, its ``submitted/``, or any folder
  shaped ``<student>/<assignment>/`` with notebooks inside, for an assignment of this
  course): each submission folder is copied whole (notebooks, data, images) with its
  ``timestamp.txt`` (else the newest file's time);
* **flat files** (a folder, searched recursively, or a ``.zip``): each ``.ipynb`` is matched
  to an assignment (``assignment=``, else the assignment named in its file name or folder),
  to one of that assignment's notebooks (the notebook named in its file name; an
  assignment of one notebook takes any file), and to a student: ``student_pattern`` (a
  regex with a ``(?P<student>...)`` group, e.g. Canvas's ``login_userid_subid_name`` with
  ``(?P<student>[^_]+)_``), else what the file name has besides the assignment and
  notebook names (``alice_ps1.ipynb``), else the nearest enclosing folder that is not the
  assignment's. The time is the zip entry's (``zip_entry_time``: the UTC time Info-ZIP or
  NTFS fields hold, else the header's local time taken as UTC) or the file's. Zip entry
  names are read as their maker wrote them (``zip_entry_name``: Info-ZIP's UTF-8 names
  without the UTF-8 flag, its Unicode Path field) and names compare in Unicode NFC.

Student ids are reduced to ``[A-Za-z0-9._-]``. Several files of one student for one
notebook in one folder (an LMS's ``-1`` resubmission) are versions: the newest is taken.
The same student, assignment and notebook from two different folders is ambiguous, and
so is a source where a student id cannot be told apart from an assignment: ``collect``
then refuses (``CollectError``) and writes nothing. A submission already in
``submitted/`` is never deleted: identical input leaves it alone, older input is not
taken, and newer input replaces it only after the old folder is moved to
``submitted_replaced/<time>/``. Zip entries are read by name only (no path is ever joined
from a zip), and oversized files are skipped.

Nothing under ``path`` that is a symbolic link is followed or copied: a student folder, an
assignment folder, a file or folder inside a submission, a zip entry stored as a link. Each
is skipped and named in the report (``skipped NAME: a symbolic link ...``); the rest is
collected. (A link could otherwise make one student's folder collect another's work, from
another course or from anywhere the instructor can read.) Folders are walked with
``os.fwalk`` and files opened with ``O_NOFOLLOW`` relative to their folder, so a link
swapped in while ``collect`` runs is not followed either. ``path`` itself may be a link.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import struct
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from grading.coursedir import Course
from grading.errors import CourseError
from grading.sanitize import MAX_SUBMISSION_BYTES

__all__ = ["CollectError", "Collected", "collect", "parse_name", "student_id", "zip_entry_name", "zip_entry_time"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RESUBMISSION = re.compile(r"(?:-\d+|\s*\(\d+\))\s*$")  # an LMS's "-1" or "(1)" copy of a file
_MAX_FOLDER_BYTES = 200 * 1024 * 1024
_STAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"
_UTF8_FLAG = 0x800  # general purpose bit 11: the name is UTF-8
_EXTENDED_TIMESTAMP_FIELD = 0x5455  # Info-ZIP "UT": modification time in UTC
_UNICODE_PATH_FIELD = 0x7075  # Info-ZIP "up": the name in UTF-8
_NTFS_FIELD = 0x000A  # NTFS times in UTC
_FILETIME_EPOCH = 11_644_473_600  # seconds from 1601-01-01 to 1970-01-01
_LINK_NOTE = "a symbolic link (collect never follows one)"


class CollectError(CourseError):
    """The input is ambiguous or holds nothing to collect; nothing was written."""


@dataclass(frozen=True)
class Collected:
    student: str
    assignment: str
    timestamp: datetime | None
    path: Path | None  # the submission folder written (None when nothing was written)
    note: str = ""


@dataclass
class _Incoming:
    student: str
    assignment: str
    origin: str  # where it came from, for messages
    timestamp: datetime
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes
    stamp_text: str | None = None  # a timestamp.txt to copy verbatim


def student_id(student: str) -> str:
    """A name made safe as a student id (what collect and export do to the names they read)."""
    student = _UNSAFE.sub("_", student).strip("._-")
    return student if student not in {"", ".", ".."} else ""


def _nfc(text: str) -> str:
    """Names compared in one Unicode form (macOS writes file names decomposed, NFD)."""
    return unicodedata.normalize("NFC", text)


def parse_name(
    name: str,
    assignments: dict[str, list[str]],
    assignment: str | None = None,
    student_pattern: str | None = None,
) -> tuple[str, str, str] | str:
    """(student, assignment, notebook) for a flat file such as ``alice_ps1.ipynb``, or why not.

    ``assignments`` maps each assignment to its notebook names.
    """
    path = PurePosixPath(_nfc(name))
    stem = path.stem
    folders = [part for part in path.parts[:-1] if part not in ("", ".", "..")]
    if assignment is None:
        named = [a for a in assignments if _nfc(a) in stem or _nfc(a) in folders]
        if not named:
            return "no assignment of this course in its name or folder (use --assignment)"
        assignment = max(named, key=len)
    notebooks = assignments[assignment]
    matches = [n for n in notebooks if _nfc(n) in stem]
    if matches:
        notebook = max(matches, key=len)
    elif len(notebooks) == 1:
        notebook = notebooks[0]
    else:
        return f"cannot tell which notebook of {assignment} it is ({', '.join(notebooks)})"
    if student_pattern:
        match = re.search(student_pattern, path.stem)
        student = student_id(match.group("student")) if match else ""
    else:
        rest = stem
        for word in sorted({_nfc(notebook), _nfc(assignment)}, key=len, reverse=True):
            rest = rest.replace(word, " ")
        student = student_id(_RESUBMISSION.sub("", rest))
    if not student:
        taken = {_nfc(word) for word in [*assignments, *notebooks]}
        candidates = [f for f in reversed(folders) if f not in taken]
        student = student_id(candidates[0]) if candidates else ""
    if not student:
        return "no student id in its name or folder (use --student-pattern)"
    if student in assignments:
        return f"its student id {student!r} is also an assignment's name"
    return student, assignment, notebook


def _nbgrader_layout(source: Path, assignments: dict[str, list[str]]) -> list[Path]:
    """``<student>/<assignment>/`` folders with notebooks under ``source`` (or its ``submitted/``)."""
    submitted = source / "submitted"
    base = submitted if _is_folder(submitted) else source
    found = []
    for student in sorted(p for p in base.iterdir() if _is_folder(p) and not p.name.startswith(".")):
        for folder in sorted(p for p in student.iterdir() if _is_folder(p)):
            if folder.name in assignments and any(folder.glob("*.ipynb")):
                found.append(folder)
    return found


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder itself, not a symbolic link to one."""
    return path.is_dir() and not path.is_symlink()


def _read_at(folder_fd: int, name: str, shown: Path) -> bytes:
    """The bytes of the regular file ``name`` in the open folder ``folder_fd`` (``shown`` is its path, for messages).

    Opened without following a link; if it became a link or anything but a regular file
    since it was listed, ``CollectError`` (nothing is written then).
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise OSError("not a regular file")
            return handle.read()
    except OSError as error:
        raise CollectError(
            f"cannot read {shown} ({error}): did it change while collect ran? Nothing was collected"
        ) from None


def _files_under(
    top: Path, links: list[str], prune: tuple[Path, ...] = ()
) -> Iterator[tuple[Path, os.stat_result, Callable[[], bytes]]]:
    """(path, its ``lstat``, a reader of its bytes) for every regular file under ``top``, links never followed.

    Every symbolic link met (to a file or a folder, or dangling) is appended to ``links``
    and neither followed nor read. ``.ipynb_checkpoints`` folders and the folders in
    ``prune`` are not entered. The reader must be called before the next item is taken.
    """
    for here, folders, names, folder_fd in os.fwalk(top, follow_symlinks=False):
        where, entered = Path(here), []
        for name in sorted(folders + names):
            try:
                info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            except FileNotFoundError:  # gone meanwhile
                continue
            if stat.S_ISLNK(info.st_mode):
                links.append(str(where / name))
            elif stat.S_ISDIR(info.st_mode) and name in folders:
                if name != ".ipynb_checkpoints" and where / name not in prune:
                    entered.append(name)
            elif stat.S_ISREG(info.st_mode) and name in names:
                yield where / name, info, functools.partial(_read_at, folder_fd, name, where / name)
        folders[:] = entered


def _read_folder(folder: Path, student: str, assignment: str, origin: str, links: list[str]) -> _Incoming:
    from nbgrader.utils import parse_utc

    files, newest, total = {}, 0.0, 0
    for path, info, read in _files_under(folder, links):
        total += info.st_size
        if total > _MAX_FOLDER_BYTES:
            raise CollectError(f"{folder} holds more than {_MAX_FOLDER_BYTES >> 20} MB; nothing was collected")
        files[str(path.relative_to(folder))] = read()
        newest = max(newest, info.st_mtime)
    stamp_text = files.pop("timestamp.txt", b"").decode("utf-8", "replace").strip() or None
    when = datetime.fromtimestamp(newest, tz=UTC)
    if stamp_text:
        try:
            when = parse_utc(stamp_text)
        except (ValueError, OverflowError):
            message = f"{folder}/timestamp.txt is not a time ({stamp_text[:40]!r}); nothing was collected"
            raise CollectError(message) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
    return _Incoming(student, assignment, origin, when, files, stamp_text)


def _extra_fields(extra: bytes) -> dict[int, bytes]:
    """A zip entry's extra fields by tag (the first of each; a truncated field is cut short)."""
    fields: dict[int, bytes] = {}
    offset = 0
    while offset + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, offset)
        fields.setdefault(tag, extra[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return fields


def zip_entry_name(info: zipfile.ZipInfo) -> str:
    """A zip entry's name as its author wrote it, NFC-normalised.

    Python decodes a name without the UTF-8 flag (bit 11) as cp437, the zip format's
    default; but Info-ZIP's ``zip`` on Linux and macOS stores UTF-8 names without that
    flag, and on Windows adds the UTF-8 name in an Info-ZIP Unicode Path field (0x7075,
    valid while its CRC matches the stored name). So: the Unicode Path field if valid,
    else the stored bytes as UTF-8 if they are, else cp437. macOS writes decomposed
    (NFD) names; the course's notebook names are compared in NFC.
    """
    if info.flag_bits & _UTF8_FLAG:
        return _nfc(info.filename)
    raw = info.orig_filename.encode("cp437")  # Python decoded the stored bytes as cp437: get them back
    field = _extra_fields(info.extra).get(_UNICODE_PATH_FIELD, b"")
    if len(field) > 5 and field[0] == 1 and struct.unpack_from("<I", field, 1)[0] == zlib.crc32(raw):
        return _nfc(field[5:].decode("utf-8", "replace"))
    try:
        return _nfc(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return _nfc(info.filename)


def _ntfs_time(field: bytes) -> datetime | None:
    """The modification time of an NTFS extra field (attribute 1: three FILETIMEs), if it has one."""
    offset = 4  # reserved
    while offset + 4 <= len(field):
        tag, size = struct.unpack_from("<HH", field, offset)
        if tag == 1 and size >= 8 and offset + 12 <= len(field):
            ticks = struct.unpack_from("<Q", field, offset + 4)[0]  # 100 ns since 1601-01-01 UTC
            try:
                return datetime.fromtimestamp(ticks / 1e7 - _FILETIME_EPOCH, tz=UTC)
            except (OverflowError, OSError, ValueError):
                return None
        offset += 4 + size
    return None


def zip_entry_time(info: zipfile.ZipInfo) -> datetime:
    """When a zip entry's file was last modified, in UTC.

    The zip header's own time is the local time of an unknown zone; Info-ZIP's extended
    timestamp field (0x5455, written by ``zip`` on Linux and macOS) and the NTFS field
    (0x000a, 7-Zip and others on Windows) hold the time in UTC: either is used when
    present. Without them the header's time is taken as UTC.
    """
    fields = _extra_fields(info.extra)
    extended = fields.get(_EXTENDED_TIMESTAMP_FIELD, b"")
    if len(extended) >= 5 and extended[0] & 1:  # flag bit 0: the modification time comes first
        return datetime.fromtimestamp(struct.unpack_from("<I", extended, 1)[0], tz=UTC)
    ntfs = _ntfs_time(fields.get(_NTFS_FIELD, b""))
    return ntfs or datetime(*info.date_time, tzinfo=UTC)


def _flat_entries(source: Path, skip: list[Path], links: list[str]):
    """(name, bytes, timestamp, size) for every notebook in a folder or zip (no bytes when too large).

    Symbolic links (in the folder, or zip entries stored as links) are appended to ``links``, never read.
    """
    if source.is_dir():
        for path, info, read in _files_under(source, links, prune=tuple(skip)):
            if path.suffix != ".ipynb":
                continue
            stamp = datetime.fromtimestamp(info.st_mtime, tz=UTC)
            size = info.st_size
            yield str(path.relative_to(source)), read() if size <= MAX_SUBMISSION_BYTES else b"", stamp, size
    elif zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            for entry in archive.infolist():
                name = zip_entry_name(entry)
                if stat.S_ISLNK(entry.external_attr >> 16):  # a Unix mode in the high bits: a link entry
                    links.append(name)
                    continue
                if entry.is_dir() or not name.endswith(".ipynb") or "__MACOSX" in name:
                    continue
                small = entry.file_size <= MAX_SUBMISSION_BYTES
                data = archive.read(entry)[: MAX_SUBMISSION_BYTES + 1] if small else b""
                yield name, data, zip_entry_time(entry), max(entry.file_size, len(data))
    elif source.exists():
        raise CollectError(f"{source} is neither a folder nor a zip file")
    else:
        raise CollectError(f"{source} does not exist")


def _gather(course: Course, source: Path, assignment, student_pattern, report) -> dict[tuple[str, str], _Incoming]:
    assignments = {a: course.notebook_names(course.folder("source", a)) for a in course.assignments()}
    incoming: dict[tuple[str, str], _Incoming] = {}
    links: list[str] = []
    layout = _nbgrader_layout(source, assignments) if source.is_dir() else []
    for folder in layout:
        student, name = student_id(folder.parent.name), folder.name
        if assignment is not None and name != assignment:
            continue
        if not student or student in assignments:
            raise CollectError(f"{folder}: the folder above the assignment ({folder.parent.name!r}) is no student id")
        key = (student, name)
        if key in incoming:
            raise CollectError(f"two submissions of {name} for {student}: {incoming[key].origin} and {folder}")
        incoming[key] = _read_folder(folder, student, name, str(folder), links)
    versions: dict[tuple[str, str, str], tuple[datetime, str, bytes]] = {}
    for name, data, stamp, size in _flat_entries(source, layout, links):
        parsed = parse_name(name, assignments, assignment, student_pattern)
        if isinstance(parsed, str):
            report.append(Collected("?", "?", stamp, None, f"skipped {name}: {parsed}"))
            continue
        if size > MAX_SUBMISSION_BYTES:
            note = f"skipped {name}: {size / 1e6:.0f} MB is too large"
            report.append(Collected(parsed[0], parsed[1], stamp, None, note))
            continue
        if parsed in versions:
            other = versions[parsed][1]
            if PurePosixPath(other).parent != PurePosixPath(name).parent:
                raise CollectError(
                    f"{other} and {name} are both {parsed[0]}'s {parsed[2]}.ipynb of {parsed[1]}, from different "
                    "folders: say which to take (move one away, or give --student-pattern); nothing was collected"
                )
            older, newer = sorted([versions[parsed], (stamp, name, data)], key=lambda v: (v[0], v[1]))
            report.append(Collected(parsed[0], parsed[1], older[0], None, f"skipped {older[1]}: {newer[1]} is newer"))
            versions[parsed] = newer
        else:
            versions[parsed] = (stamp, name, data)
    for link in sorted(set(links)):
        report.append(Collected("?", "?", None, None, f"skipped {link}: {_LINK_NOTE}"))
    for (student, name, notebook), (stamp, origin, data) in sorted(versions.items()):
        key = (student, name)
        if key in incoming and incoming[key].stamp_text is not None:
            raise CollectError(f"{origin} and the submission folder {incoming[key].origin} are both {student}'s {name}")
        entry = incoming.setdefault(key, _Incoming(student, name, origin, stamp))
        entry.files[f"{notebook}.ipynb"] = data
        entry.timestamp = max(entry.timestamp, stamp)
    return incoming


def _existing(folder: Path) -> tuple[dict[str, bytes], datetime | None]:
    from nbgrader.utils import parse_utc

    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    stamp = files.pop("timestamp.txt", b"").decode("utf-8", "replace").strip()
    try:
        when = parse_utc(stamp) if stamp else None
    except (ValueError, OverflowError):
        when = None
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return files, when


def collect(
    course: Course,
    source: Path,
    *,
    assignment: str | None = None,
    student_pattern: str | None = None,
) -> list[Collected]:
    """Copy every submission found in ``source`` into ``submitted/``; see the module docstring."""
    source = Path(source)
    known = course.assignments()
    if not known:
        raise CollectError(f"the course has no assignments in {course.source}: nothing to collect for")
    if assignment is not None and assignment not in known:
        raise CollectError(f"unknown assignment {assignment!r} (the course has: {', '.join(known)})")
    if student_pattern is not None:
        try:
            if "student" not in re.compile(student_pattern).groupindex:
                raise CollectError("--student-pattern needs a (?P<student>...) group")
        except re.error as error:
            raise CollectError(f"--student-pattern is not a regular expression: {error}") from None
    report: list[Collected] = []
    incoming = _gather(course, source, assignment, student_pattern, report)
    if not incoming:
        reasons = "; ".join(r.note for r in report[:5]) or "no notebooks found"
        raise CollectError(f"nothing to collect from {source}: {reasons}")
    replaced = course.root / "submitted_replaced" / datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    for (student, name), entry in sorted(incoming.items()):
        folder = course.folder("submitted", name, student)
        if folder.exists():
            files, when = _existing(folder)
            if files == entry.files:
                report.append(Collected(student, name, entry.timestamp, None, f"unchanged {student}/{name}"))
                continue
            if when is not None and when >= entry.timestamp:
                note = f"kept {student}/{name}: {entry.origin} is not newer"
                report.append(Collected(student, name, entry.timestamp, None, note))
                continue
            backup = replaced / student / name
            backup.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(folder), backup)
            report.append(Collected(student, name, when, None, f"moved the older {student}/{name} to {backup}"))
        folder.mkdir(parents=True)
        for relative, data in entry.files.items():
            target = folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        stamp = entry.stamp_text or entry.timestamp.strftime(_STAMP_FORMAT)
        (folder / "timestamp.txt").write_text(stamp, encoding="utf-8")
        report.append(Collected(student, name, entry.timestamp, folder))
    course.protect()
    return report
