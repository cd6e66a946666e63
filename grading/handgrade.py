"""Hand grading from files: what needs a person goes out as CSV, their scores and comments come back.

For an instructor, or a team of teaching assistants who split a class, grading written
answers without a browser (the formgrader does the same on nbgrader's gradebook).

Contract:

* ``export_hand_grading(course, assignments, students, everything, parts)`` writes
  ``exports/hand-grading/<assignment>.csv`` (or ``<assignment>-part-K-of-N.csv``, each part a
  contiguous run of students, none split across parts): one row per graded cell that a
  person must score: written answers, hand-graded code answers and tasks, and tests the
  grader flagged for a person (nbgrader's needs-manual-grade). With ``everything``, cells
  already graded by hand are included too (their score and comment filled in), for a second
  look. Columns: ``student``, ``assignment``, ``notebook``, ``cell``, ``kind``, ``points
  possible``, ``automatic score``, ``score`` and ``comment`` (to fill in), ``answer`` (the
  learner's cell as autograded), ``instructor's version`` (the source's cell: the model
  answer, or the task as set, which serves as the rubric). Every text cell goes through
  ``grading.untrusted.csv_cell``, so a learner's answer is never a formula in a spreadsheet.
* ``import_hand_grading(course, files)`` reads every file and checks every row before it
  writes anything: an unknown student, assignment, notebook or cell; a cell that is not
  graded by hand; a score that is not a number, negative or over the points possible; a
  cell given two different grades; a file without the needed columns. Any mistake raises
  ``CourseError`` naming each one (file, line, what) and nothing is written. Otherwise every
  score and comment is written in one transaction, as the formgrader writes them: the manual
  score, needs-manual-grade cleared, the manual comment. A row whose ``score`` and ``comment``
  are both empty is left alone (not graded yet); an empty ``comment`` beside a score removes
  the cell's manual comment, as clearing the formgrader's box does.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grading.coursedir import Course, counted
from grading.errors import CourseError
from grading.untrusted import csv_cell

__all__ = ["COLUMNS", "Imported", "export_hand_grading", "import_hand_grading"]

COLUMNS = [
    "student",
    "assignment",
    "notebook",
    "cell",
    "kind",
    "points possible",
    "automatic score",
    "score",
    "comment",
    "answer",
    "instructor's version",
]
_KEY = ("student", "assignment", "notebook", "cell")
_NEEDED = (*_KEY, "score", "comment")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class Imported:
    """What ``import_hand_grading`` wrote."""

    scores: int = 0
    comments: int = 0
    left: int = 0  # rows with neither a score nor a comment
    files: list[Path] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{counted(self.scores, 'score')} and {counted(self.comments, 'comment')} written from "
            f"{counted(len(self.files), 'file')}; {counted(self.left, 'row')} left ungraded"
        )


def _kind(gb, grade) -> str:
    from nbgrader.api import MissingEntry

    cell = grade.cell
    notebook, assignment = cell.notebook.name, cell.notebook.assignment.name
    try:
        gb.find_task_cell(cell.name, notebook, assignment)
        return "task"
    except MissingEntry:
        pass
    try:
        gb.find_solution_cell(cell.name, notebook, assignment)
    except MissingEntry:
        return "test flagged for a person"
    return "written answer" if cell.cell_type == "markdown" else "code answer"


def _cell_sources(path: Path) -> dict[str, str]:
    """grade_id -> source of the notebook at ``path`` (empty when it cannot be read)."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # a broken file still gets its rows, without the text
        return {}
    found = {}
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id:
            found[grade_id] = cell.get("source", "")
    return found


def _comment(gb, cell: str, notebook: str, assignment: str, student: str):  # -> nbgrader Comment | None
    """The cell's comment record: answers and tasks have one, tests none."""
    from nbgrader.api import MissingEntry

    try:
        return gb.find_comment(cell, notebook, assignment, student)
    except MissingEntry:
        return None


def _number(value: float | None) -> str:
    return "" if value is None else f"{float(value):g}"


def export_hand_grading(
    course: Course,
    assignments: list[str] | None = None,
    students: list[str] | None = None,
    everything: bool = False,
    parts: int = 1,
) -> list[Path]:
    """Write the CSV files of what needs grading by hand; return their paths (``CourseError`` if none)."""
    if parts < 1:
        raise CourseError("--parts must be 1 or more")
    written = []
    with course.gradebook() as gb:
        names = assignments or [a.name for a in gb.assignments]
        for assignment in names:
            try:
                record = gb.find_assignment(assignment)
            except Exception:
                raise CourseError(f"no assignment {assignment!r} in the gradebook") from None
            rows: list[list[object]] = []
            sources: dict[str, dict[str, str]] = {}
            for submission in sorted(record.submissions, key=lambda s: s.student.id):
                student = submission.student.id
                if students and student not in students:
                    continue
                for notebook in sorted(submission.notebooks, key=lambda n: n.name):
                    answers = _cell_sources(course.folder("autograded", assignment, student) / f"{notebook.name}.ipynb")
                    if notebook.name not in sources:
                        sources[notebook.name] = _cell_sources(
                            course.folder("source", assignment) / f"{notebook.name}.ipynb"
                        )
                    for grade in sorted(notebook.grades, key=lambda g: g.cell.name):
                        if not (grade.needs_manual_grade or (everything and grade.manual_score is not None)):
                            continue
                        comment = _comment(gb, grade.cell.name, notebook.name, assignment, student)
                        rows.append(
                            [
                                student,
                                assignment,
                                notebook.name,
                                grade.cell.name,
                                _kind(gb, grade),
                                grade.max_score,
                                _number(grade.auto_score),
                                _number(grade.manual_score),
                                (comment.manual_comment if comment is not None else None) or "",
                                answers.get(grade.cell.name, ""),
                                sources[notebook.name].get(grade.cell.name, ""),
                            ]
                        )
            if rows:
                written += _write_parts(course.exports / "hand-grading", assignment, rows, parts)
    if not written:
        what = "graded by hand before or waiting" if everything else "waiting"
        raise CourseError(f"no cell {what} for a person in the gradebook (autograde first?)")
    return written


def _write_parts(folder: Path, assignment: str, rows: list[list[object]], parts: int) -> list[Path]:
    """Rows split into ``parts`` files of about equal size, never splitting a student."""
    folder.mkdir(parents=True, exist_ok=True)
    learners = list(dict.fromkeys(str(row[0]) for row in rows))
    parts = min(parts, len(learners))
    per = math.ceil(len(learners) / parts)
    paths = []
    for part in range(parts):
        group = set(learners[part * per : (part + 1) * per])
        if not group:
            continue
        name = f"{assignment}.csv" if parts == 1 else f"{assignment}-part-{part + 1}-of-{parts}.csv"
        path = folder / name
        with path.open("w", newline="", encoding="utf-8") as handle:
            out = csv.writer(handle)
            out.writerow(COLUMNS)
            out.writerows([csv_cell(v) for v in row] for row in rows if str(row[0]) in group)
        paths.append(path)
    return paths


def _text(value: str) -> str:
    """A cell read back: the ``'`` that ``csv_cell`` put before a formula-like text removed."""
    if value.startswith("'") and value[1:].startswith(_FORMULA):
        return value[1:]
    return value


@dataclass(frozen=True)
class _Entry:
    where: str
    key: tuple[str, str, str, str]
    score: float | None
    comment: str | None  # None: the file has no comment for it (score only)


def _read(path: Path, problems: list[str]) -> list[_Entry]:
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as error:
        problems.append(f"{path}: cannot be read ({error.strerror})")
        return []
    entries = []
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _NEEDED if c not in (reader.fieldnames or [])]
        if missing:
            names = ", ".join(repr(c) for c in missing)
            problems.append(f"{path}: no column {names} (`course hand-grading export` writes them)")
            return []
        for row in reader:
            where = f"{path.name}, line {reader.line_num}"
            student, assignment, notebook, cell = (_text((row.get(c) or "").strip()) for c in _KEY)
            key = (student, assignment, notebook, cell)
            raw_score, comment = (row.get("score") or "").strip(), _text(row.get("comment") or "")
            if not raw_score and not comment.strip():
                entries.append(_Entry(where, key, None, None))
                continue
            score = None
            if raw_score:
                try:
                    score = float(raw_score)
                except ValueError:
                    problems.append(f"{where}: score {raw_score!r} is not a number")
                    continue
                if not math.isfinite(score):
                    problems.append(f"{where}: score {raw_score!r} is not a number")
                    continue
            entries.append(_Entry(where, key, score, comment))
    return entries


def import_hand_grading(course: Course, files: list[Path]) -> Imported:
    """Check every row of ``files``, then write them all in one transaction (or nothing, with every mistake)."""
    from nbgrader.api import MissingEntry

    if not files:
        raise CourseError("name the CSV files to import")
    problems: list[str] = []
    entries = [entry for path in files for entry in _read(path, problems)]
    seen: dict[tuple, _Entry] = {}
    result = Imported(files=list(files))
    with course.gradebook() as gb:
        work = []
        for entry in entries:
            student, assignment, notebook, cell = entry.key
            if entry.score is None and entry.comment is None:
                result.left += 1
                continue
            earlier = seen.get(entry.key)
            if earlier is not None and (earlier.score, earlier.comment) != (entry.score, entry.comment):
                problems.append(f"{entry.where}: {student}'s {notebook}/{cell} is graded otherwise at {earlier.where}")
                continue
            seen[entry.key] = entry
            try:
                gb.find_student(student)
            except MissingEntry:
                problems.append(f"{entry.where}: no student {student!r} in the gradebook")
                continue
            try:
                grade = gb.find_grade(cell, notebook, assignment, student)
            except MissingEntry:
                problems.append(
                    f"{entry.where}: {student!r} has no graded cell {cell!r} in {assignment}/{notebook} "
                    "(unknown assignment, notebook or cell, or not submitted)"
                )
                continue
            if entry.score is not None:
                if not (grade.needs_manual_grade or grade.manual_score is not None):
                    problems.append(f"{entry.where}: {assignment}/{notebook}/{cell} is graded automatically")
                    continue
                if entry.score < 0 or entry.score > float(grade.max_score):
                    problems.append(
                        f"{entry.where}: score {entry.score:g} for {cell} is outside 0 to {float(grade.max_score):g}"
                    )
                    continue
            comment = _comment(gb, cell, notebook, assignment, student)
            if comment is None and (entry.comment or "").strip():
                problems.append(f"{entry.where}: {cell} is a test, which takes no comment (leave the column empty)")
                continue
            work.append((grade, comment, entry))
        if problems:
            gb.db.rollback()
            shown = "\n  ".join(problems)
            raise CourseError(f"nothing imported: {counted(len(problems), 'mistake')} to fix first:\n  {shown}")
        try:
            for grade, comment, entry in work:
                if entry.score is not None:
                    grade.manual_score = entry.score
                    grade.needs_manual_grade = False  # the formgrader's rule: a person scored it
                    result.scores += 1
                text = (entry.comment or "").strip()
                if comment is not None and (entry.score is not None or text):
                    comment.manual_comment = text or None
                    result.comments += bool(text)
            gb.db.commit()
        except Exception:
            gb.db.rollback()
            raise
    return result
