"""What the class gets back: HTML feedback per student, and the grades as CSV.

Contract: ``feedback(course)`` runs nbgrader's ``generate_feedback`` for every autograded
submission: ``feedback/<student>/<assignment>/<assignment>.html`` shows each cell, the
score of each test and the grading notes (what went wrong) on top. ``export(course)``
writes ``exports/grades.csv`` (one row per student and assignment: score, max, percent,
time of submission) and ``exports/totals.csv`` (one row per student, one column per
assignment, total and percent; an assignment not submitted counts 0). Both read the
gradebook; neither runs learner code.
"""

from __future__ import annotations

import csv
from pathlib import Path

from course_utils.grading.course import Course

__all__ = ["export", "feedback"]


def feedback(course: Course, assignments: list[str] | None = None) -> list[Path]:
    """Generate HTML feedback for every autograded submission; return the files written."""
    api = course.api()
    written = []
    for assignment in course.assignments():
        if assignments and assignment not in assignments:
            continue
        result = api.generate_feedback(assignment)
        if not result["success"]:
            raise RuntimeError(f"nbgrader could not generate feedback for {assignment}:\n{result['error']}")
        written += sorted(course.feedback.glob(f"*/{assignment}/{assignment}.html"))
    return written


def export(course: Course) -> tuple[Path, Path]:
    """Write ``grades.csv`` and ``totals.csv``; return their paths."""
    course.exports.mkdir(parents=True, exist_ok=True)
    grades_path, totals_path = course.exports / "grades.csv", course.exports / "totals.csv"
    with course.gradebook() as gb:
        assignments = [a.name for a in sorted(gb.assignments, key=lambda a: a.name)]
        maxima = {a: gb.find_assignment(a).max_score for a in assignments}
        rows, totals = [], {}
        for student in sorted(s.id for s in gb.students):
            totals[student] = {}
            for assignment in assignments:
                try:
                    sub = gb.find_submission(assignment, student)
                except Exception:  # nbgrader raises MissingEntry: not submitted
                    continue
                totals[student][assignment] = sub.score
                rows.append(
                    {
                        "student": student,
                        "assignment": assignment,
                        "score": _num(sub.score),
                        "max_score": _num(sub.max_score),
                        "percent": _num(100 * sub.score / sub.max_score if sub.max_score else 0.0),
                        "submitted_at": sub.timestamp.isoformat() if sub.timestamp else "",
                        "needs_manual_grade": sub.needs_manual_grade,
                    }
                )
    fields = ["student", "assignment", "score", "max_score", "percent", "submitted_at", "needs_manual_grade"]
    _write_csv(grades_path, fields, rows)
    grand_max = sum(maxima.values())
    total_rows = []
    for student, scores in totals.items():
        total = sum(scores.values())
        row = {"student": student, **{a: _num(scores.get(a, 0.0)) for a in assignments}}
        row.update(
            total=_num(total), max_total=_num(grand_max), percent=_num(100 * total / grand_max if grand_max else 0)
        )
        total_rows.append(row)
    _write_csv(totals_path, ["student", *assignments, "total", "max_total", "percent"], total_rows)
    return grades_path, totals_path


def _num(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.2f}"


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
