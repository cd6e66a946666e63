"""Grades out of the gradebook: CSV for the instructor, and gradebook import files for Canvas and Moodle.

Contract: every number comes from nbgrader's gradebook, so manual grades given in the
formgrader are included (a cell's score is its manual score when it has one, else its
auto score) and late penalties are the ones nbgrader's ``AssignLatePenalties`` recorded.
``score = raw_score - late_penalty``, as in nbgrader's own CSV export. Nothing runs
learner code.

**Which assignments.** Only assignments graded so far are exported: those with at least one
submission that ``course autograde`` (or plain nbgrader) graded: its
``autograded/<student>/<assignment>/`` folder exists. An assignment that was released (it is
in the gradebook) but has no graded submission yet is left out, and named in
``Exported.left_out``, so an upload mid-term does not create assignments full of zeros in an
LMS. ``assignments=`` exports those only (a name the
gradebook lacks, or one with nothing graded yet, is a ``CourseError``). A gradebook submission
with no graded files (``course extend`` records one for a learner who has not submitted yet,
because nbgrader keeps an extension on the submission) counts as not submitted.

* ``exports/grades.csv``: one row per graded submission: ``student``, ``assignment``,
  ``raw_score``, ``late_penalty``, ``score``, ``max_score``, ``percent``,
  ``submitted_at`` (UTC), ``needs_manual_grade``;
* ``exports/totals.csv``: one row per student, one column per exported assignment (0 when
  not submitted), ``total``, ``max_total`` (the sum of the maxima of the exported
  assignments: those graded so far, not the whole term's), ``percent`` (of ``max_total``);
* ``exports/canvas.csv`` (``lms="canvas"``, with ``roster=``): Canvas's gradebook import
  format. The roster is a CSV with a header row: Canvas's own gradebook export (Grades >
  Export) is the intended one. Its ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID`` and
  ``Section`` columns are copied through (empty when absent); the column named by
  ``match_column`` (default ``SIS Login ID``) holds the student ids used in ``submitted/``.
  Canvas's ``Points Possible`` and muted/posting rows are skipped. Written: those five
  columns, one column per assignment (the roster's header for it when one is titled like the
  assignment, ``ps1 (1234)``, so Canvas updates that assignment; else the assignment's name,
  from which Canvas creates a new assignment), holding the score after the late penalty, a
  ``Points Possible`` row, and two columns for you that Canvas does not import (their
  ``Points Possible`` cell reads ``(read only)``): ``Late penalty`` and ``Needs manual
  grading`` (the assignments still waiting for it). A learner in the gradebook who did not
  submit an exported assignment gets 0 for it (missing), unless an extension of theirs
  (``course extend``) has not run out yet: then the cell is empty (Canvas changes nothing)
  and a warning names them. A roster student with no entry in the gradebook gets empty cells
  (Canvas changes nothing there); a roster row without an id in ``match_column`` (Canvas's
  "Student, Test" has no SIS Login ID) is kept with empty cells and named in a warning;
  gradebook students missing from the roster are returned as warnings.
* ``exports/moodle.csv`` (``lms="moodle"``): for Moodle's *Import grades > CSV file*. A
  header row, then one row per learner: an identifier column, then one column per exported
  assignment headed by its name, holding the score after the late penalty as a plain number
  with a dot decimal (0 when not submitted, empty while an extension runs), UTF-8 without a
  byte-order mark, comma-separated. The identifier is the student id under the header
  ``student`` (map it at import to the user field your ids are: username or ID number); with
  ``roster=``, it is the roster's ``match_column``, under that header, for the roster's
  learners found in the gradebook (map it to the field it holds, e.g. email address). No other
  column, so every column maps to a user field or a grade item.

Every cell of these files, headers included, goes through ``grading.untrusted.csv_cell``:
a text that a spreadsheet would read as a formula (a roster's display name
``=HYPERLINK(...)``, a student id ``=1+1`` from a folder name, ``@SUM(A1)``, ``-2+3``) is
written with a leading ``'``, which spreadsheets show as text; numbers, negative ones
included, are written as they are.
"""

from __future__ import annotations

import csv
import datetime
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from grading.collect import student_id
from grading.coursedir import Course, counted
from grading.errors import CourseError
from grading.untrusted import csv_cell

__all__ = ["CANVAS_IDENTITY", "LMS", "Exported", "export"]

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
LMS = ("canvas", "moodle")
_READ_ONLY = "(read only)"


@dataclass
class Exported:
    """What ``export`` wrote, what it noticed, and the released assignments it left out (nothing graded yet)."""

    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


@dataclass
class _Row:
    student: str
    assignment: str
    raw_score: float
    late_penalty: float
    max_score: float
    submitted_at: str
    needs_manual_grade: bool

    @property
    def score(self) -> float:
        return self.raw_score - self.late_penalty


@dataclass
class _Book:
    """The gradebook as the exports need it."""

    assignments: list[str]  # the exported ones
    maxima: dict[str, float]
    students: list[str]
    rows: list[_Row]  # graded submissions of the exported assignments
    waiting: set[tuple[str, str]]  # (student, assignment): not submitted, an extension still running
    left_out: list[str]  # released, nothing graded yet

    def cell(self, student: str, assignment: str) -> str:
        """The LMS cell of one learner and assignment: the score, 0 when missing, empty while an extension runs."""
        row = self.by_key.get((student, assignment))
        if row is not None:
            return _num(row.score)
        return "" if (student, assignment) in self.waiting else "0"

    @cached_property
    def by_key(self) -> dict[tuple[str, str], _Row]:
        return {(r.student, r.assignment): r for r in self.rows}


def _num(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.2f}"


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """``header`` and ``rows`` as CSV (UTF-8, no byte-order mark), every cell safe for a spreadsheet (``csv_cell``)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([csv_cell(cell) for cell in header])
        writer.writerows([csv_cell(cell) for cell in row] for row in rows)


def _graded(course: Course, student: str, assignment: str) -> bool:
    """Whether this submission was graded (its autograded folder exists; an extension's empty record has none)."""
    return course.folder("autograded", assignment, student).is_dir()


def _book(course: Course, only: list[str] | None) -> _Book:
    """The graded submissions of the assignments to export (``only``, else every one graded so far)."""
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # nbgrader stores naive UTC
    with course.gradebook() as gb:
        released = sorted(a.name for a in gb.assignments)
        unknown = [a for a in only or [] if a not in released]
        if unknown:
            raise CourseError(
                f"no assignment {', '.join(unknown)} in the gradebook {course.db_label} "
                f"(it has: {', '.join(released) or 'none'})"
            )
        maxima = {a: float(gb.find_assignment(a).max_score) for a in released}
        students = sorted(s.id for s in gb.students)
        rows, waiting = [], set()
        for assignment in released:
            for sub in gb.find_assignment(assignment).submissions:
                student = sub.student.id
                if not _graded(course, student, assignment):
                    due = sub.duedate  # the assignment's, plus the learner's extension
                    if sub.extension is not None and (due is None or due > now):
                        waiting.add((student, assignment))
                    continue
                rows.append(
                    _Row(
                        student=student,
                        assignment=assignment,
                        raw_score=float(sub.score),
                        late_penalty=float(sub.late_submission_penalty or 0.0),
                        max_score=float(sub.max_score),
                        submitted_at=sub.timestamp.isoformat() if sub.timestamp else "",
                        needs_manual_grade=bool(sub.needs_manual_grade),
                    )
                )
    graded = sorted({r.assignment for r in rows})
    if only:
        nothing = [a for a in only if a not in graded]
        if nothing:
            raise CourseError(
                f"nothing graded yet in {', '.join(nothing)}: run `course collect` and `course autograde` first"
            )
        chosen = sorted(set(only))
    else:
        chosen = graded
    return _Book(
        assignments=chosen,
        maxima={a: maxima[a] for a in chosen},
        students=students,
        rows=sorted((r for r in rows if r.assignment in chosen), key=lambda r: (r.student, r.assignment)),
        waiting={key for key in waiting if key[1] in chosen},
        left_out=[] if only else [a for a in released if a not in graded],
    )


def _read_roster(path: Path, match_column: str) -> tuple[list[str], list[dict[str, str]]]:
    """The roster's header and its learners' rows (those without an id included; Canvas's extra rows skipped)."""
    try:
        with Path(path).open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise CourseError(f"cannot read the roster {path}: {error}") from None
    if match_column not in header:
        raise CourseError(f"the roster {path} has no {match_column!r} column (it has: {', '.join(header) or 'none'})")
    students = []
    for row in rows:
        first = (row.get("Student") or "").strip()
        if first.startswith("Points Possible"):
            continue
        if all(re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", v or "", re.I) for v in row.values() if v is not None):
            continue
        students.append(row)
    if not any((row.get(match_column) or "").strip() for row in students):
        raise CourseError(f"the roster {path} lists no students (no row has a {match_column!r})")
    return header, students


def _roster_student(person: dict[str, str], match_column: str, known: set[str]) -> str | None:
    """The gradebook student a roster row is, or None."""
    raw = (person.get(match_column) or "").strip()
    if not raw:
        return None
    student = raw if raw in known else student_id(raw)
    return student if student in known else None


def _no_id_warnings(people: list[dict[str, str]], match_column: str) -> list[str]:
    """A warning for each roster row without an id (Canvas's "Student, Test")."""
    warnings = []
    for person in people:
        if not (person.get(match_column) or "").strip():
            name = (person.get("Student") or "").strip() or "a row with no name"
            test = " (Canvas's test student has none)" if re.fullmatch(r"Student, Test|Test Student", name) else ""
            warnings.append(f"{name}: no {match_column} in the roster{test}; its cells are empty")
    return warnings


def _canvas(course: Course, roster: Path, match_column: str, book: _Book) -> tuple[Path, list[str]]:
    roster_header, people = _read_roster(roster, match_column)
    titles = {}
    for assignment in book.assignments:
        pattern = re.compile(re.escape(assignment) + r"(\s*\(\d+\))?")
        titles[assignment] = next((h for h in roster_header if pattern.fullmatch(h.strip())), assignment)
    by_key = book.by_key
    known = set(book.students)
    blank = ["" for _ in book.assignments]
    header = [*CANVAS_IDENTITY, *(titles[a] for a in book.assignments), "Late penalty", "Needs manual grading"]
    points = ["Points Possible", "", "", "", "", *(_num(book.maxima[a]) for a in book.assignments)]
    out, matched, unknown = [[*points, _READ_ONLY, _READ_ONLY]], set(), 0
    for person in people:
        student = _roster_student(person, match_column, known)
        identity = [person.get(column, "") or "" for column in CANVAS_IDENTITY]
        if student is None:
            unknown += bool((person.get(match_column) or "").strip())
            out.append([*identity, *blank, "", ""])
            continue
        matched.add(student)
        penalties, pending = [], []
        for assignment in book.assignments:
            row = by_key.get((student, assignment))
            if row and row.late_penalty:
                penalties.append(f"{assignment}: -{_num(row.late_penalty)}")
            if row and row.needs_manual_grade:
                pending.append(assignment)
        scores = [book.cell(student, a) for a in book.assignments]
        out.append([*identity, *scores, "; ".join(penalties), "; ".join(pending)])
    path = course.exports / "canvas.csv"
    _write_csv(path, header, out)
    warnings = [f"{s}: in the gradebook but not in the roster (not in canvas.csv)" for s in sorted(known - matched)]
    warnings += _no_id_warnings(people, match_column)
    if unknown:
        who = f"{counted(unknown, 'roster student')} {'has' if unknown == 1 else 'have'}"
        cells = "its cells are" if unknown == 1 else "their cells are"
        warnings.append(f"{who} no grades in the gradebook ({cells} empty)")
    return path, warnings


def _moodle(course: Course, roster: Path | None, match_column: str, book: _Book) -> tuple[Path, list[str]]:
    warnings: list[str] = []
    if roster is None:
        ids = [(s, s) for s in book.students]
        id_header = "student"
    else:
        _, people = _read_roster(roster, match_column)
        known = set(book.students)
        ids, matched = [], set()
        for person in people:
            student = _roster_student(person, match_column, known)
            if student is not None:
                ids.append(((person.get(match_column) or "").strip(), student))
                matched.add(student)
        warnings += [
            f"{s}: in the gradebook but not in the roster (not in moodle.csv)" for s in sorted(known - matched)
        ]
        warnings += _no_id_warnings(people, match_column)
        id_header = match_column
    path = course.exports / "moodle.csv"
    _write_csv(
        path, [id_header, *book.assignments], [[i, *(book.cell(s, a) for a in book.assignments)] for i, s in ids]
    )
    return path, warnings


def export(
    course: Course,
    *,
    roster: Path | None = None,
    match_column: str = "SIS Login ID",
    assignments: list[str] | None = None,
    lms: str | None = None,
) -> Exported:
    """Write ``grades.csv``, ``totals.csv`` and an LMS file; see the module docstring.

    ``lms`` is ``"canvas"`` (needs ``roster``) or ``"moodle"``; ``None`` means ``"canvas"`` when a
    roster is given, else no LMS file. Raises ``CourseError`` when nothing is graded yet, for an
    unknown or ungraded assignment in ``assignments``, or for an unreadable roster.
    """
    if lms is None and roster is not None:
        lms = "canvas"
    if lms is not None and lms not in LMS:
        raise CourseError(f"no export for {lms!r}: the LMS files are {', '.join(LMS)}")
    if lms == "canvas" and roster is None:
        raise CourseError("the Canvas file needs the class's roster: Canvas's gradebook export, with --roster")
    book = _book(course, assignments)
    if not book.rows:
        raise CourseError(f"the gradebook {course.db_label} has no graded submissions: run `course autograde` first")
    course.exports.mkdir(parents=True, exist_ok=True)
    result = Exported(left_out=book.left_out)
    grades = course.exports / "grades.csv"
    fields = ["student", "assignment", "raw_score", "late_penalty", "score", "max_score", "percent", "submitted_at"]
    _write_csv(
        grades,
        [*fields, "needs_manual_grade"],
        [
            [
                r.student,
                r.assignment,
                _num(r.raw_score),
                _num(r.late_penalty),
                _num(r.score),
                _num(r.max_score),
                _num(100 * r.score / r.max_score if r.max_score else 0.0),
                r.submitted_at,
                str(r.needs_manual_grade),
            ]
            for r in book.rows
        ],
    )
    totals = course.exports / "totals.csv"
    grand = sum(book.maxima.values())
    by_key = book.by_key
    table = []
    for student in book.students:
        scores = [by_key[(student, a)].score if (student, a) in by_key else 0.0 for a in book.assignments]
        total = sum(scores)
        table.append([student, *map(_num, scores), _num(total), _num(grand), _num(100 * total / grand if grand else 0)])
    _write_csv(totals, ["student", *book.assignments, "total", "max_total", "percent"], table)
    result.files += [grades, totals]
    if lms is not None:
        if roster is not None and lms == "canvas":
            path, warnings = _canvas(course, roster, match_column, book)
        else:
            path, warnings = _moodle(course, roster, match_column, book)
        result.files.append(path)
        result.warnings += warnings
    waiting = sorted(book.waiting)
    if waiting and lms is not None:
        who = ", ".join(f"{s} ({a})" for s, a in waiting)
        result.warnings.append(f"not submitted yet, with an extension still running (cell left empty): {who}")
    course.protect()
    return result
