"""nbgrader's gradebook, written by the coordinator in batched transactions.

Contract: ``Recorder(course, create_student, late)`` is used as a context manager around an
autograde run; it keeps one gradebook session (nbgrader's ``Gradebook``, whatever its
database) and writes what nbgrader's ``Autograde`` writes, many submissions per transaction
instead of one commit per cell:

* ``open(submissions)``: each student (``Autograde.create_student``, else a refusal), each
  submission with its timestamp and, for a new one, its notebooks, grades and comments as
  ``Gradebook.add_submission`` builds them (nbgrader's own model classes); the notebooks
  missing from a submission score 0. One transaction. Returns, per submission, the
  assignment's notebooks and the notes so far.
* ``record(items)``: per graded notebook, what ``SaveAutoGrades`` writes (each grade's
  automatic score, and needs-manual-grade when a manual score exists or there is no
  automatic one; each comment's automatic text) and then what ``AssignLatePenalties`` writes
  (the course's late-penalty plugin on the notebook's new score and the submission's
  lateness, clamped as nbgrader clamps it), by primary key, in one transaction.
* ``totals(submissions)``: each submission's score, maximum, late penalty and
  needs-manual-grade, read in one query (nbgrader's column properties).

The values are those of nbgrader's preprocessors (``jobs.Outcome`` carries what
``SaveAutoGrades`` computes); only the batching is ours. A grade id the gradebook does not
have, which nbgrader's ``find_grade`` would refuse, is reported in the returned notes.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grading.sandbox.execute import GRADER_PROBLEM

if TYPE_CHECKING:
    from grading.coursedir import Course
    from grading.jobs import Outcome
    from grading.submissions import Submission

__all__ = ["Opened", "Recorder", "Totals"]


@dataclass
class Opened:
    """A submission recorded in the gradebook: the assignment's notebooks, and what the recording noticed."""

    expected: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refused: bool = False  # no such student and Autograde.create_student is off: not graded
    missing: dict[str, float] = field(default_factory=dict)  # notebooks not submitted -> their points


@dataclass(frozen=True)
class Totals:
    score: float
    max_score: float
    late_penalty: float
    needs_manual_grade: bool


class Recorder:
    """See the module docstring."""

    def __init__(self, course: Course, create_student: bool = True, late: Any = None):
        self.course = course
        self.create_student = create_student
        self.late = late  # nbgrader's AssignLatePenalties of the course (its plugin), or None
        self.gb: Any = None
        self._assignments: dict[str, Any] = {}  # name -> (id, [(notebook id, name, grade cells, ...)])
        self._students: set[str] = set()

    def __enter__(self) -> Recorder:
        from nbgrader.api import Student
        from sqlalchemy import select

        self.gb = self.course.gradebook().__enter__()
        self._students = set(self.gb.db.scalars(select(Student.id)))
        self.gb.db.commit()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.gb is not None:
            self.gb.db.rollback()  # whatever a failed batch left uncommitted
            self.gb.__exit__(*exc_info)
            self.gb = None

    def _assignment(self, name: str) -> Any:
        """The assignment's definition, read once: its row and, per notebook, the cells a submission mirrors."""
        if name not in self._assignments:
            assignment = self.gb.find_assignment(name)
            notebooks = []
            for notebook in assignment.notebooks:
                grades = [c.id for c in notebook.grade_cells] + [c.id for c in notebook.task_cells]
                comments = [c.id for c in notebook.solution_cells] + [c.id for c in notebook.task_cells]
                points = float(notebook.max_score)
                notebooks.append(types.SimpleNamespace(id=notebook.id, name=notebook.name, grades=grades,
                                                       comments=comments, max_score=points))  # fmt: skip
            self._assignments[name] = types.SimpleNamespace(id=assignment.id, notebooks=notebooks)
        return self._assignments[name]

    # -- a chunk of submissions --------------------------------------------------------------------

    def open(self, submissions: list[Submission]) -> dict[Submission, Opened]:
        """Record students and submissions (one transaction); see the module docstring."""
        from nbgrader.api import Comment, Grade, Student, SubmittedAssignment, SubmittedNotebook
        from nbgrader.utils import parse_utc
        from sqlalchemy import select

        db = self.gb.db
        opened: dict[Submission, Opened] = {}
        by_assignment: dict[str, list[Submission]] = {}
        for sub in submissions:
            by_assignment.setdefault(sub.assignment, []).append(sub)
        for name, subs in by_assignment.items():
            definition = self._assignment(name)
            students = [s.student for s in subs]
            existing = {
                row.student_id: row
                for row in db.scalars(
                    select(SubmittedAssignment).where(
                        SubmittedAssignment.assignment_id == definition.id,
                        SubmittedAssignment.student_id.in_(students),
                    )
                )
            }
            for sub in subs:
                state = opened[sub] = Opened(expected=[n.name for n in definition.notebooks])
                if sub.student not in self._students:
                    if not self.create_student:
                        state.notes.append(
                            f"Not graded: no student {sub.student!r} in the gradebook (Autograde.create_student)."
                        )
                        state.refused = True
                        continue
                    db.add(Student(id=sub.student))  # Gradebook.add_student
                    self._students.add(sub.student)
                stamp = None
                if sub.timestamp:
                    try:
                        stamp = parse_utc(sub.timestamp)
                    except (ValueError, OverflowError):
                        state.notes.append(
                            f"timestamp.txt ({sub.timestamp[:40]!r}) is not a time; the submission has none."
                        )
                record = existing.get(sub.student)
                if record is None:  # Gradebook.add_submission: the submission mirrors the assignment
                    record = SubmittedAssignment(assignment_id=definition.id, student_id=sub.student)
                    if stamp is not None:
                        record.timestamp = stamp
                    for notebook in definition.notebooks:
                        submitted = SubmittedNotebook(notebook_id=notebook.id, assignment=record)
                        for cell in notebook.grades:
                            Grade(cell_id=cell, notebook=submitted)
                        for cell in notebook.comments:
                            Comment(cell_id=cell, notebook=submitted)
                    db.add(record)
                elif stamp is not None:  # Gradebook.update_or_create_submission: the new timestamp
                    record.timestamp = stamp
                submitted_names = set(sub.notebooks)
                state.missing = {n.name: n.max_score for n in definition.notebooks if n.name not in submitted_names}
        db.flush()
        self._zero_missing(opened)
        db.commit()
        return opened

    def _zero_missing(self, opened: dict[Submission, Opened]) -> None:
        """A notebook missing from a submission scores 0, and needs no manual grading (as nbgrader's autograde)."""
        from nbgrader.api import Grade

        wanted = [(sub, name) for sub, state in opened.items() if not state.refused for name in state.missing]
        if not wanted:
            return
        rows = self._grade_rows(wanted)
        if rows:
            zero = [{"id": gid, "auto_score": 0.0, "needs_manual_grade": False} for gid, _ in rows.values()]
            self.gb.db.execute(_update(Grade), zero)

    # -- graded notebooks --------------------------------------------------------------------------

    def _keys(self, wanted: list[tuple[Submission, str]]) -> tuple[dict[str, set[str]], set[str]]:
        assignments: dict[str, set[str]] = {}
        for sub, _ in wanted:
            assignments.setdefault(sub.assignment, set()).add(sub.student)
        return assignments, {name for _, name in wanted}

    def _rows(self, model: Any, columns: tuple, wanted: list[tuple[Submission, str]]) -> dict[tuple, tuple]:
        """(assignment, student, notebook, grade id) -> ``columns`` of its ``model`` row (Grade or Comment)."""
        from nbgrader.api import Assignment, BaseCell, Notebook, SubmittedAssignment, SubmittedNotebook
        from sqlalchemy import select

        found = {}
        assignments, notebooks = self._keys(wanted)
        for assignment, students in assignments.items():
            query = (
                select(SubmittedAssignment.student_id, Notebook.name, BaseCell.name, *columns)
                .join(SubmittedNotebook, model.notebook_id == SubmittedNotebook.id)
                .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
                .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                .join(BaseCell, model.cell_id == BaseCell.id)
                .where(Assignment.name == assignment, SubmittedAssignment.student_id.in_(students),
                       Notebook.name.in_(notebooks))
            )  # fmt: skip
            for student, notebook, cell, *values in self.gb.db.execute(query):
                found[(assignment, student, notebook, cell)] = tuple(values)
        return found

    def _grade_rows(self, wanted: list[tuple[Submission, str]]) -> dict[tuple[str, str, str, str], tuple[str, Any]]:
        """(assignment, student, notebook, grade id) -> (Grade's primary key, its manual score)."""
        from nbgrader.api import Grade

        return self._rows(Grade, (Grade.id, Grade.manual_score), wanted)

    def _comment_rows(self, wanted: list[tuple[Submission, str]]) -> dict[tuple[str, str, str, str], str]:
        """(assignment, student, notebook, grade id) -> Comment's primary key."""
        from nbgrader.api import Comment

        return {key: comment_id for key, (comment_id,) in self._rows(Comment, (Comment.id,), wanted).items()}

    def record(self, items: list[tuple[Submission, str, Outcome]]) -> dict[tuple[Submission, str], list[str]]:
        """Write the batch's grades, comments and late penalties (one transaction); problems by notebook."""
        from nbgrader.api import Comment, Grade

        problems: dict[tuple[Submission, str], list[str]] = {}
        wanted = [(sub, name) for sub, name, outcome in items if outcome.recorded]
        if not wanted:
            return problems
        grade_rows, comment_rows = self._grade_rows(wanted), self._comment_rows(wanted)
        grades, comments = [], []
        for sub, name, outcome in items:
            if not outcome.recorded:
                continue
            prefix = (sub.assignment, sub.student, name)
            for grade_id, score in outcome.scores.items():
                row = grade_rows.get((*prefix, grade_id))
                if row is None:
                    problems.setdefault((sub, name), []).append(f"no grade `{grade_id}` in the gradebook")
                    continue
                gid, manual = row
                # SaveAutoGrades._add_score: a manual score, or no automatic one, means a person must look;
                # then measure.flag_unmeasured: a measured test its referee could not measure, and a test
                # whose hidden text an output showed without proving anything (leaks.flagged_for_review)
                flagged = manual is not None or score is None or grade_id in outcome.manual
                grades.append({"id": gid, "auto_score": score, "needs_manual_grade": flagged})
            for grade_id, text in outcome.comments.items():
                cid = comment_rows.get((*prefix, grade_id))
                if cid is None:
                    problems.setdefault((sub, name), []).append(f"no comment `{grade_id}` in the gradebook")
                    continue
                comments.append({"id": cid, "auto_comment": text})
        db = self.gb.db
        if grades:
            db.execute(_update(Grade), grades)
        if comments:
            db.execute(_update(Comment), comments)
        late = [(sub, name) for sub, name, outcome in items if outcome.recorded and outcome.late]
        if late and self.late is not None:
            self._late_penalties(late)
        db.commit()
        return {
            key: [f"{GRADER_PROBLEM}: recording the grades failed ({'; '.join(why)})."] for key, why in problems.items()
        }

    def _late_penalties(self, wanted: list[tuple[Submission, str]]) -> None:
        """AssignLatePenalties for each notebook, on its score after this batch's grades (flushed first)."""
        from nbgrader.api import Assignment, Notebook, SubmittedAssignment, SubmittedNotebook
        from sqlalchemy import select
        from sqlalchemy.orm import joinedload

        db = self.gb.db
        db.flush()
        assignments, notebooks = self._keys(wanted)
        rows: dict[tuple[str, str, str], tuple[str, float, float]] = {}
        for assignment, students in assignments.items():
            submissions = db.scalars(
                select(SubmittedAssignment)
                .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                .where(Assignment.name == assignment, SubmittedAssignment.student_id.in_(students))
                .options(joinedload(SubmittedAssignment.assignment))
            ).unique()
            late = {s.id: (s.student_id, s.total_seconds_late) for s in submissions}  # nbgrader's own property
            query = (
                select(SubmittedNotebook.id, SubmittedNotebook.assignment_id, Notebook.name, SubmittedNotebook.score)
                .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
                .where(SubmittedNotebook.assignment_id.in_(list(late)), Notebook.name.in_(notebooks))
            )
            for nid, sid, name, score in db.execute(query):
                student, seconds = late[sid]
                rows[(assignment, student, name)] = (nid, float(score), seconds)
        self.late.init_plugin()  # AssignLatePenalties.preprocess does this for each notebook
        updates = []
        for sub, name in wanted:
            nid, score, seconds = rows[(sub.assignment, sub.student, name)]
            penalty = None
            if seconds > 0:
                penalty = self.late.plugin_inst.late_submission_penalty(sub.student, score, seconds)
                if penalty is not None:
                    penalty = self.late._check_late_penalty(types.SimpleNamespace(score=score), penalty)
            updates.append({"id": nid, "late_submission_penalty": penalty})
        db.execute(_update(SubmittedNotebook), updates)

    def totals(self, submissions: list[Submission]) -> dict[Submission, Totals]:
        """Score, maximum, late penalty and needs-manual-grade of each submission (one query per assignment)."""
        from nbgrader.api import Assignment, SubmittedAssignment
        from sqlalchemy import select

        found: dict[Submission, Totals] = {}
        by_assignment: dict[str, dict[str, Submission]] = {}
        for sub in submissions:
            by_assignment.setdefault(sub.assignment, {})[sub.student] = sub
        for assignment, subs in by_assignment.items():
            query = (
                select(
                    SubmittedAssignment.student_id,
                    SubmittedAssignment.score,
                    SubmittedAssignment.max_score,
                    SubmittedAssignment.late_submission_penalty,
                    SubmittedAssignment.needs_manual_grade,
                )
                .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                .where(Assignment.name == assignment, SubmittedAssignment.student_id.in_(list(subs)))
            )
            for student, score, max_score, penalty, manual in self.gb.db.execute(query):
                found[subs[student]] = Totals(float(score), float(max_score), float(penalty or 0.0), bool(manual))
        self.gb.db.commit()  # ends the read transaction: SQLite keeps no lock between batches
        return found


def _update(model: Any) -> Any:
    """An ORM bulk UPDATE by primary key (SQLAlchemy's executemany with a list of dicts)."""
    from sqlalchemy import update

    return update(model)
