"""Extensions per learner: a later due date for one learner of one assignment, where nbgrader's late penalty reads it.

Contract: an extension is nbgrader's own, ``SubmittedAssignment.extension`` in the gradebook
(what ``Gradebook.grant_extension`` and the formgrader set): the learner's due date is the
assignment's plus the extension (``SubmittedAssignment.duedate``), and the late penalty
(``AssignLatePenalties``, applied by ``course autograde`` through ``grading/record.py``) counts
lateness from it (``total_seconds_late``). Extensions do not stack: granting one replaces the
one before, as in nbgrader.

* ``grant(course, assignment, students, days=, hours=, until=)`` sets it, ``until`` being the
  learner's new due date (any text nbgrader's ``parse_utc`` reads, ``2026-02-03 17:00:00 UTC``),
  later than the assignment's. The assignment must be in the gradebook with a due date
  (``course release --duedate``). nbgrader keeps an extension on the learner's submission, so
  for a learner who has not submitted yet the student and an empty submission record are
  created, as ``Gradebook.add_submission`` makes them (no time, nothing flagged for manual
  grading); ``course autograde`` later fills that record in. ``Extension.new_student`` says a
  student was added (a mistyped id makes a new learner: the command prints those). An id
  ``course collect`` could never give a learner (``collect.student_id``) is refused. Such a record has no graded files,
  and ``course export`` and ``course feedback`` count it as not submitted.
* ``remove(course, assignment, students)`` takes the extension away; an empty record made for it
  (no graded files) is removed with it. A student added by ``grant`` stays in the gradebook
  (``nbgrader db student remove ID`` removes a mistyped one).
* ``extensions(course, assignment=None)`` lists the extensions in force.

Each returned ``Extension`` says whether the submission was graded already: its late penalty is
the one computed then, and changes only when it is graded again (``course autograde --force
--assignment A --student S``). Raises ``CourseError`` for an unknown assignment, an assignment
without a due date, a ``until`` that is no time or not after the due date, or a non-positive
length. Nothing runs learner code.
"""

from __future__ import annotations

import datetime
import warnings
from dataclasses import dataclass

from grading.coursedir import Course, counted
from grading.errors import CourseError

__all__ = ["Extension", "extensions", "grant", "remove"]


@dataclass(frozen=True)
class Extension:
    """One learner's extension of one assignment (``length`` None: none), and whether they were graded."""

    assignment: str
    student: str
    length: datetime.timedelta | None
    duedate: datetime.datetime | None  # the learner's due date (UTC), extension included
    graded: bool  # graded already: the change takes effect when graded again
    new_student: bool = False  # not in the gradebook before: check the id (a typo makes a new learner)

    def line(self) -> str:
        """One line for the instructor (the student id is the caller's to escape for its reader)."""
        if self.length is None:
            return f"{self.assignment}  {self.student}: no extension"
        due = f"due {self.duedate:%Y-%m-%d %H:%M:%S} UTC" if self.duedate else "no due date"
        return f"{self.assignment}  {self.student}: extended by {_length(self.length)}, {due}"


def _length(delta: datetime.timedelta) -> str:
    hours = round(delta.total_seconds() / 3600, 6)
    return counted(hours / 24, "day") if hours % 24 == 0 else counted(hours, "hour")


def _graded(course: Course, student: str, assignment: str) -> bool:
    return course.folder("autograded", assignment, student).is_dir()


def _assignment(gb, course: Course, name: str):  # -> nbgrader.api.Assignment
    from nbgrader.api import MissingEntry

    try:
        return gb.find_assignment(name)
    except MissingEntry:
        names = ", ".join(sorted(a.name for a in gb.assignments)) or "none"
        raise CourseError(f"no assignment {name!r} in the gradebook {course.db_label} (it has: {names})") from None


def _check_ids(students: list[str]) -> None:
    """Refuse an empty list, or an id ``course collect`` could never give a learner."""
    from grading.collect import student_id

    if not students:
        raise CourseError("name at least one student")
    wrong = [s for s in students if student_id(s) != s]
    if wrong:
        raise CourseError(f"not a student id: {', '.join(map(repr, wrong))} (use the ids of submitted/)")


def _parse(until: str) -> datetime.datetime:
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(until)
    except (ValueError, OverflowError) as error:
        raise CourseError(f"cannot read the time {until!r} ({error}); write e.g. '2026-02-03 17:00:00 UTC'") from None


def grant(
    course: Course,
    assignment: str,
    students: list[str],
    *,
    days: float | None = None,
    hours: float | None = None,
    until: str | None = None,
) -> list[Extension]:
    """Give each of ``students`` an extension of ``assignment`` (exactly one of days, hours, until); see the module."""
    from nbgrader.api import MissingEntry
    from sqlalchemy.exc import SAWarning

    if sum(x is not None for x in (days, hours, until)) != 1:
        raise CourseError("give exactly one of --days, --hours, --until")
    _check_ids(students)
    done = []
    with course.gradebook() as gb:
        record = _assignment(gb, course, assignment)
        if record.duedate is None:
            raise CourseError(
                f"{assignment} has no due date, so nothing is late: set one with `course release {assignment} "
                "--duedate '...'` first"
            )
        if until is not None:
            length = _parse(until) - record.duedate
            if length <= datetime.timedelta(0):
                raise CourseError(
                    f"{until!r} is not after {assignment}'s due date ({record.duedate:%Y-%m-%d %H:%M:%S} UTC)"
                )
        else:
            length = datetime.timedelta(days=days or 0, hours=hours or 0)
            if length <= datetime.timedelta(0):
                raise CourseError("an extension is longer than 0 (--remove takes one away)")
        for student in students:
            new = False
            try:
                gb.find_student(student)
            except MissingEntry:
                gb.add_student(student)
                new = True
            try:
                submission = gb.find_submission(assignment, student)
            except MissingEntry:  # not submitted yet: the record nbgrader keeps the extension on
                with warnings.catch_warnings():  # nbgrader's add_submission trips SQLAlchemy's autoflush warning
                    warnings.simplefilter("ignore", SAWarning)
                    submission = gb.add_submission(assignment, student)
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        grade.needs_manual_grade = False  # nothing to grade: the formgrader lists nothing
            submission.extension = length
            gb.db.commit()
            graded = _graded(course, student, assignment)
            done.append(Extension(assignment, student, length, submission.duedate, graded, new_student=new))
    return done


def remove(course: Course, assignment: str, students: list[str]) -> list[Extension]:
    """Take away the extensions of ``students`` for ``assignment`` (an empty record made for one goes too)."""
    from nbgrader.api import MissingEntry

    _check_ids(students)
    done = []
    with course.gradebook() as gb:
        _assignment(gb, course, assignment)
        for student in students:
            graded = _graded(course, student, assignment)
            try:
                submission = gb.find_submission(assignment, student)
            except MissingEntry:
                done.append(Extension(assignment, student, None, None, graded))
                continue
            if not graded and submission.timestamp is None:
                gb.remove_submission(assignment, student)  # the empty record `grant` made
            else:
                submission.extension = None
                gb.db.commit()
            done.append(Extension(assignment, student, None, None, graded))
    return done


def extensions(course: Course, assignment: str | None = None) -> list[Extension]:
    """Every extension in force (of ``assignment`` only, when given), by assignment and student."""
    found = []
    with course.gradebook() as gb:
        records = [_assignment(gb, course, assignment)] if assignment else list(gb.assignments)
        for record in records:
            for sub in record.submissions:
                if sub.extension is not None:
                    student = sub.student.id
                    graded = _graded(course, student, record.name)
                    found.append(Extension(record.name, student, sub.extension, sub.duedate, graded))
    return sorted(found, key=lambda e: (e.assignment, e.student))
