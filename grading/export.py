"""Grades out of the gradebook: CSV for the instructor, and a gradebook import file for Canvas.

Contract: every number comes from nbgrader's gradebook, so manual grades given in the
formgrader are included (a cell's score is its manual score when it has one, else its
auto score) and late penalties are the ones nbgrader's ``AssignLatePenalties`` recorded.
``score = raw_score - late_penalty``, as in nbgrader's own CSV export. Nothing runs
learner code.

* ``exports/grades.csv``: one row per submission: ``student``, ``assignment``,
  ``raw_score``, ``late_penalty``, ``score``, ``max_score``, ``percent``,
  ``submitted_at`` (UTC), ``needs_manual_grade``;
* ``exports/totals.csv``: one row per student, one column per assignment (0 when not
  submitted), ``total``, ``max_total``, ``percent``;
* ``exports/canvas.csv`` (with ``roster=``): Canvas's gradebook import format. The roster
  is a CSV with a header row: Canvas's own gradebook export (Grades > Export) is the
  intended one. Its ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID`` and ``Section``
  columns are copied through (empty when absent); the column named by ``match_column``
  (default ``SIS Login ID``) holds the student ids used in ``submitted/``. Canvas's
  ``Points Possible`` and muted/posting rows are skipped. Written: those five columns,
  one column per assignment (the roster's header for it when one is titled like the
  assignment, ``ps1 (1234)``, so Canvas updates that assignment; else the assignment's
  name, from which Canvas creates a new assignment), holding the score after the late
  penalty, a ``Points Possible`` row, and two columns for you that Canvas does not import
  (their ``Points Possible`` cell reads ``(read only)``): ``Late penalty`` and ``Needs
  manual grading`` (the assignments still waiting for it). A roster student with no
  entry in the gradebook gets empty cells (Canvas changes nothing there); gradebook
  students missing from the roster are returned as warnings.

Every cell of the three files, headers included, goes through ``grading.untrusted.csv_cell``:
a text that a spreadsheet would read as a formula (a roster's display name
``=HYPERLINK(...)``, a student id ``=1+1`` from a folder name, ``@SUM(A1)``, ``-2+3``) is
written with a leading ``'``, which spreadsheets show as text; numbers, negative ones
included, are written as they are.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from grading.collect import student_id
from grading.coursedir import Course, CourseError, counted
from grading.untrusted import csv_cell

__all__ = ["CANVAS_IDENTITY", "Exported", "export"]

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
_READ_ONLY = "(read only)"


@dataclass
class Exported:
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


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


def _num(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.2f}"


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """``header`` and ``rows`` as CSV, every cell safe for a spreadsheet (``csv_cell``)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([csv_cell(cell) for cell in header])
        writer.writerows([csv_cell(cell) for cell in row] for row in rows)


def _rows(course: Course) -> tuple[list[str], dict[str, float], list[str], list[_Row]]:
    """(assignments, their max scores, every student id, one row per submission) from the gradebook."""
    with course.gradebook() as gb:
        assignments = sorted(a.name for a in gb.assignments)
        maxima = {a: float(gb.find_assignment(a).max_score) for a in assignments}
        students = sorted(s.id for s in gb.students)
        rows = []
        for assignment in assignments:
            for sub in gb.find_assignment(assignment).submissions:
                rows.append(
                    _Row(
                        student=sub.student.id,
                        assignment=assignment,
                        raw_score=float(sub.score),
                        late_penalty=float(sub.late_submission_penalty or 0.0),
                        max_score=float(sub.max_score),
                        submitted_at=sub.timestamp.isoformat() if sub.timestamp else "",
                        needs_manual_grade=bool(sub.needs_manual_grade),
                    )
                )
    return assignments, maxima, students, sorted(rows, key=lambda r: (r.student, r.assignment))


def _read_roster(path: Path, match_column: str) -> list[dict[str, str]]:
    try:
        with Path(path).open(newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.DictReader(handle))
            header = rows[0].keys() if rows else []
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise CourseError(f"cannot read the roster {path}: {error}") from None
    if match_column not in header:
        raise CourseError(f"the roster {path} has no {match_column!r} column (it has: {', '.join(header) or 'none'})")
    students = []
    for row in rows:
        first = (row.get("Student") or "").strip()
        if first.startswith("Points Possible") or not (row.get(match_column) or "").strip():
            continue
        if all(re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", v or "", re.I) for v in row.values()):
            continue
        students.append(row)
    if not students:
        raise CourseError(f"the roster {path} lists no students")
    return students


def _canvas(course: Course, roster: Path, match_column: str, data) -> tuple[Path, list[str]]:
    assignments, maxima, students, rows = data
    people = _read_roster(roster, match_column)
    with Path(roster).open(newline="", encoding="utf-8-sig") as handle:
        roster_header = next(csv.reader(handle))
    titles = {}
    for assignment in assignments:
        pattern = re.compile(re.escape(assignment) + r"(\s*\(\d+\))?")
        titles[assignment] = next((h for h in roster_header if pattern.fullmatch(h.strip())), assignment)
    by_key = {(r.student, r.assignment): r for r in rows}
    known = set(students)
    header = [*CANVAS_IDENTITY, *(titles[a] for a in assignments), "Late penalty", "Needs manual grading"]
    points = ["Points Possible", "", "", "", "", *(_num(maxima[a]) for a in assignments), _READ_ONLY, _READ_ONLY]
    out, matched = [points], set()
    for person in people:
        raw = person[match_column].strip()
        student = raw if raw in known else student_id(raw)
        identity = [person.get(column, "") or "" for column in CANVAS_IDENTITY]
        if student not in known:
            out.append([*identity, *("" for _ in assignments), "", ""])
            continue
        matched.add(student)
        scores, penalties, pending = [], [], []
        for assignment in assignments:
            row = by_key.get((student, assignment))
            scores.append(_num(row.score) if row else "0")
            if row and row.late_penalty:
                penalties.append(f"{assignment}: -{_num(row.late_penalty)}")
            if row and row.needs_manual_grade:
                pending.append(assignment)
        out.append([*identity, *scores, "; ".join(penalties), "; ".join(pending)])
    path = course.exports / "canvas.csv"
    _write_csv(path, header, out)
    warnings = [f"{s}: in the gradebook but not in the roster (not in canvas.csv)" for s in sorted(known - matched)]
    unknown = sum(1 for row in out[1:] if not any(row[len(CANVAS_IDENTITY) : -2]))
    if unknown:
        who = f"{counted(unknown, 'roster student')} {'has' if unknown == 1 else 'have'}"
        cells = "its cells are" if unknown == 1 else "their cells are"
        warnings.append(f"{who} no grades in the gradebook ({cells} empty)")
    return path, warnings


def export(course: Course, *, roster: Path | None = None, match_column: str = "SIS Login ID") -> Exported:
    """Write ``grades.csv``, ``totals.csv`` and, with a roster, ``canvas.csv``; see the module docstring."""
    data = _rows(course)
    assignments, maxima, students, rows = data
    if not rows:
        raise CourseError(f"the gradebook {course.db_label} has no graded submissions: run `course autograde` first")
    course.exports.mkdir(parents=True, exist_ok=True)
    result = Exported()
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
            for r in rows
        ],
    )
    totals = course.exports / "totals.csv"
    grand = sum(maxima.values())
    by_key = {(r.student, r.assignment): r.score for r in rows}
    table = []
    for student in students:
        scores = [by_key.get((student, a), 0.0) for a in assignments]
        total = sum(scores)
        table.append([student, *map(_num, scores), _num(total), _num(grand), _num(100 * total / grand if grand else 0)])
    _write_csv(totals, ["student", *assignments, "total", "max_total", "percent"], table)
    result.files += [grades, totals]
    if roster is not None:
        path, warnings = _canvas(course, roster, match_column, data)
        result.files.append(path)
        result.warnings += warnings
    course.protect()
    return result
