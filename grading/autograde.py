"""Grade a class as ``nbgrader autograde`` would, in parallel jailed kernels, with hardening on top.

Contract: ``autograde(course, jobs=N)`` grades every ``submitted/<student>/<assignment>/``
of an assignment in the gradebook, following nbgrader's ``Autograde`` converter step by
step and using nbgrader's own preprocessors, configured by the course's
``nbgrader_config.py``, wherever no kernel is involved:

1. per submission (this process): the student is created (``Autograde.create_student``),
   the submission recorded with its ``timestamp.txt``, the submission's other files and
   then the source's (data, images; ``exclude_overwriting`` kept) copied to
   ``autograded/<student>/<assignment>/``, unknown notebooks skipped and missing ones
   given 0, as nbgrader does;
2. per notebook (this process): ``sanitize.prepare`` (nbgrader's sanitizing preprocessors,
   then the hardening it documents);
3. per notebook (``N`` workers, or the worker threads of a Dask cluster: ``grading.cluster``):
   the notebook runs in a jailed kernel whose working directory holds the assignment's
   other files (``worker``, ``execute``, ``guard``);
4. per notebook (this process, the gradebook's only writer, whatever its database): the rest of nbgrader's
   ``Autograde.autograde_preprocessors`` (``IgnorePattern``, ``ClearMetadataPreprocessor``,
   ``LimitOutput``, ``SaveAutoGrades``, ``AssignLatePenalties``, ``CheckCellMetadata``),
   then the autograded notebook, grading notes on top, is written.

A submission already autograded and not newer than its autograded copy is skipped, as
by ``nbgrader autograde`` without ``--force``. nbgrader's selections are honoured:
``notebooks`` (``--notebook``, else ``CourseDirectory.notebook_id``) grades only the
notebooks it matches and keeps the others' autograded files, ``CourseDirectory.student_id_exclude``
leaves students out; ``Execute.enabled = False`` (``--no-execute``) is refused. The autograded folder is built aside and
put in place only when the whole submission is graded, so a run that is stopped midway
leaves its unfinished submissions to be graded by the next one. Problems the instructor
can fix (nothing released, an unknown assignment, no submissions) raise ``CourseError``
with the reason. Returns a ``Summary``.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
from nbformat import NotebookNode

from grading.coursedir import Course, CourseError, counted
from grading.measure import measured_tests
from grading.sandbox.execute import GRADER_PROBLEM
from grading.sandbox.protections import Limits, Protections, detect
from grading.sandbox.worker import WorkerPool
from grading.sanitize import (
    Prepared,
    SourceNotebook,
    fail_all_tests,
    notes_cell,
    prepare,
    read_submission,
    stand_in,
    with_grader_cells,
    without_grader_cells,
)

if TYPE_CHECKING:
    from grading.cluster import ClusterPool

__all__ = [
    "Graded",
    "Submission",
    "Summary",
    "autograde",
    "default_limits",
    "find_submissions",
    "notebook_glob",
    "refuse_no_execute",
]


@dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    folder: Path

    @property
    def notebooks(self) -> list[str]:
        return Course.notebook_names(self.folder)

    @property
    def timestamp(self) -> str | None:
        stamp = self.folder / "timestamp.txt"
        text = stamp.read_text(encoding="utf-8", errors="replace").strip() if stamp.is_file() else ""
        return text or None


@dataclass
class Graded:
    """One graded submission, as the gradebook has it after autograding."""

    submission: Submission
    score: float  # before the late penalty (nbgrader's ``SubmittedAssignment.score``)
    max_score: float
    notes: list[str]
    grader_error: bool = False
    seconds: float = 0.0  # in the workers (0 for notebooks that could not be run)
    late_penalty: float = 0.0
    needs_manual_grade: bool = False


@dataclass
class Summary:
    graded: list[Graded] = field(default_factory=list)
    skipped: list[Submission] = field(default_factory=list)  # already autograded and not newer
    ignored: list[str] = field(default_factory=list)  # submissions of assignments nbgrader does not know
    seconds: float = 0.0
    coordinator_seconds: float = 0.0  # spent in this process preparing, sending and recording (the serial part)
    protections: Protections | None = None
    uids: list[int] = field(default_factory=list)

    @property
    def errors(self) -> list[Graded]:
        """Submissions the grader could not grade properly (not a learner's mistake)."""
        return [g for g in self.graded if g.grader_error]

    def line(self) -> str:
        troubled = sum(1 for g in self.graded if g.notes)
        manual = sum(1 for g in self.graded if g.needs_manual_grade)
        parts = [
            f"graded {counted(len(self.graded), 'submission')}, {counted(len(self.errors), 'grader error')}, "
            f"{troubled} with notes",
            f"{manual} {'needs' if manual == 1 else 'need'} manual grading" if manual else "",
            f"{len(self.skipped)} already graded (--force regrades them)" if self.skipped else "",
        ]
        return ", ".join(p for p in parts if p) + f", in {self.seconds:.1f} s"


def default_limits(course: Course, **overrides) -> Limits:
    """The sandbox limits, with the cell timeout of the course's config (nbgrader's ``Execute.timeout``)."""
    from nbgrader.preprocessors import Execute

    timeout = Execute(config=course.config).timeout
    values = {"cell_timeout": float(timeout) if timeout and timeout > 0 else Limits().cell_timeout}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Limits(**values)


def refuse_no_execute(option: str) -> CourseError:
    """Why ``course autograde`` refuses nbgrader's ``--no-execute`` rather than ignore it."""
    return CourseError(
        f"{option}: nbgrader would then grade the outputs saved in each submission, which a learner can "
        "write by hand; `course autograde` always runs the notebooks, so it refuses rather than ignore the "
        "option (plain `nbgrader autograde --no-execute` does it)"
    )


def _excluded(course: Course) -> set[str]:
    """``CourseDirectory.student_id_exclude``: the comma-separated student ids nbgrader leaves out."""
    return {student.strip() for student in course.coursedir.student_id_exclude.split(",") if student.strip()}


def notebook_glob(course: Course, notebooks: str | None = None) -> str:
    """Which notebooks to grade: ``notebooks`` (``--notebook``), else ``CourseDirectory.notebook_id``."""
    return (notebooks if notebooks is not None else course.coursedir.notebook_id).strip() or "*"


def _matching(names: list[str], glob: str) -> list[str]:
    """The notebook names nbgrader's ``--notebook`` glob selects (matched as ``<glob>.ipynb``)."""
    return [name for name in names if fnmatch.fnmatchcase(f"{name}.ipynb", f"{glob}.ipynb")]


def find_submissions(
    course: Course,
    assignments: list[str] | None = None,
    students: list[str] | None = None,
    notebooks: str | None = None,
) -> tuple[list[Submission], list[str]]:
    """The submissions to grade, and notes on the ones nbgrader would not grade either.

    Without ``assignments`` or ``students``, the course config's ``CourseDirectory.assignment_id``
    and ``student_id`` (globs, as nbgrader reads them) choose; ``CourseDirectory.student_id_exclude``
    leaves students out and ``notebooks`` (a glob, else ``CourseDirectory.notebook_id``) skips
    submissions with no notebook it matches, as in nbgrader, each with a note. Raises
    ``CourseError`` when there is nothing to grade, saying why.
    """
    with course.gradebook() as gb:
        known = sorted(a.name for a in gb.assignments)
    if not known:
        raise CourseError(f"the gradebook {course.db_label} has no assignments: run `course release` first")
    unknown = sorted(set(assignments or []) - set(known))
    if unknown:
        raise CourseError(f"no assignment {', '.join(unknown)} in the gradebook (released: {', '.join(known)})")
    coursedir, excluded, glob = course.coursedir, _excluded(course), notebook_glob(course, notebooks)
    wanted = set(assignments or fnmatch.filter(known, coursedir.assignment_id or "*"))
    if not wanted:
        raise CourseError(
            f"CourseDirectory.assignment_id {coursedir.assignment_id!r} matches no assignment "
            f"in the gradebook (released: {', '.join(known)})"
        )
    found, ignored = [], []
    for student, assignment, folder in course.submissions("*", "*" if students else coursedir.student_id or "*"):
        if students and student not in students:
            continue
        if assignment not in known:
            if not assignments:
                ignored.append(f"{student}/{assignment}: no assignment {assignment!r} in the gradebook")
            continue
        if assignment not in wanted:
            continue
        if student in excluded:
            ignored.append(f"{student}/{assignment}: excluded by CourseDirectory.student_id_exclude")
        elif not _matching(Course.notebook_names(folder), glob):
            ignored.append(f"{student}/{assignment}: no notebook matches --notebook {glob!r}")
        else:
            found.append(Submission(student, assignment, folder))
    if not found:
        who = f" from {', '.join(students)}" if students else ""
        why = f"; {'; '.join(ignored)}" if ignored else ""
        raise CourseError(
            f"no submissions{who} of {', '.join(sorted(wanted)) or 'any assignment'} to grade in {course.submitted} "
            f"(expected {course.submitted}/<student>/<assignment>/<notebook>.ipynb; `course collect` puts them there)"
            + why
        )
    if students:
        missing = sorted(set(students) - {s.student for s in found} - excluded)
        if missing:
            raise CourseError(f"no submissions from {', '.join(missing)} in {course.submitted}")
    return found, ignored


def _preprocessors(classes: list, parent) -> list:
    """nbgrader preprocessors from a configured list (classes, import strings or callables)."""
    from traitlets.utils.importstring import import_item

    made = []
    for item in classes:
        item = import_item(item) if isinstance(item, str) else item
        made.append(item(parent=parent) if isinstance(item, type) else item)
    return made


class _Nbgrader:
    """nbgrader's converter settings for this course, and its preprocessors split around ``Execute``."""

    def __init__(self, course: Course):
        from nbgrader.converters import Autograde
        from nbgrader.preprocessors import Execute

        self.converter = course.configurable(Autograde, coursedir=course.coursedir)
        self.sanitize = _preprocessors(self.converter.sanitize_preprocessors, self.converter)
        steps = _preprocessors(self.converter.autograde_preprocessors, self.converter)
        # nbgrader runs them in order, Execute among them; ours runs in the sandbox in its place.
        split = next((i for i, p in enumerate(steps) if isinstance(p, Execute)), None)
        if split is not None and not steps[split].enabled:
            raise refuse_no_execute("Execute.enabled = False is set in the config (nbgrader's --no-execute)")
        self.before_execute = steps[:split] if split is not None else []
        self.after_execute = steps[split + 1 :] if split is not None else steps
        self.create_student = self.converter.create_student
        self.exclude = self.converter.exclude_overwriting


def _stale(course: Course, sub: Submission, glob: str = "*") -> bool:
    """nbgrader's rule without --force: grade when never graded or submitted again since.

    With a ``--notebook`` glob, "never graded" means that one of the notebooks it selects
    has no autograded copy (nbgrader's ``init_destination``).
    """
    from nbgrader.utils import parse_utc

    dest = course.folder("autograded", sub.assignment, sub.student)
    if not dest.exists():
        return True
    if glob != "*" and any(not (dest / f"{name}.ipynb").exists() for name in _matching(sub.notebooks, glob)):
        return True
    old, new = dest / "timestamp.txt", sub.timestamp
    try:
        return bool(new and old.is_file() and parse_utc(new) > parse_utc(old.read_text().strip()))
    except (ValueError, OverflowError):
        return True


def _mismatch_notes(unknown: list[str], missing: dict[str, float]) -> list[str]:
    """Notes on notebooks the assignment does not have and on the ones missing (score 0), as nbgrader treats them.

    When both happen (a renamed notebook), the first note says both, since the command
    prints each submission's first note.
    """
    files = ", ".join(f"`{name}.ipynb`" for name in unknown)
    lost = ", ".join(f"`{name}.ipynb` ({counted(points, 'point')})" for name, points in missing.items())
    if unknown and missing:
        hint = ""
        if len(unknown) == len(missing) == 1:
            hint = f" If it is `{next(iter(missing))}.ipynb` renamed, rename it back and run autograde with --force."
        what = "is not a notebook" if len(unknown) == 1 else "are not notebooks"
        return [
            f"{files} {what} of this assignment, so not graded; and {lost} "
            f"{'is' if len(missing) == 1 else 'are'} missing from the submission and "
            f"score{'s' if len(missing) == 1 else ''} 0 (as in nbgrader).{hint}"
        ]
    notes = [f"`{name}.ipynb` is not a notebook of this assignment: not graded (as in nbgrader)." for name in unknown]
    for name, points in missing.items():
        notes.append(f"No `{name}.ipynb` in the submission: its {counted(points, 'point')} score 0.")
    return notes


def _move_into(staging: Path, dest: Path) -> None:
    """Put a graded submission's staging folder in place (merged into ``dest`` when one is left)."""
    if not dest.exists():
        staging.rename(dest)
        return
    for path in sorted(staging.rglob("*"), key=lambda p: len(p.parts)):
        target = dest / path.relative_to(staging)
        if path.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.unlink(missing_ok=True)
            path.rename(target)
    shutil.rmtree(staging)


def _copy_files(course: Course, sub: Submission, dest: Path, exclude: dict) -> None:
    """The submission's other files, then the source's over them (nbgrader's ``init_assignment``)."""
    from nbgrader.utils import find_all_files

    ignore = [*course.coursedir.ignore, "*.ipynb"]
    source = course.folder("source", sub.assignment)
    excluded = {str(source / name) for name in exclude.get(sub.assignment, [])}
    for root in (sub.folder, source):
        for name in find_all_files(str(root), ignore):
            if root == source and name in excluded:
                continue
            target = dest / os.path.relpath(name, root)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                target.unlink()
            if not Path(name).is_symlink():
                shutil.copyfile(name, target)


class _Run:
    """One autograde run: the bookkeeping between preparing, executing and recording."""

    def __init__(self, course: Course, summary: Summary, glob: str = "*"):
        self.course = course
        self.summary = summary
        self.glob = glob  # the notebooks to grade (nbgrader's --notebook)
        self.nbgrader = _Nbgrader(course)
        self.specs: dict[tuple[str, str], SourceNotebook] = {}
        self.pending: dict[Submission, dict] = {}  # notebooks still out, notes, errors, seconds

    def spec(self, assignment: str, notebook: str) -> SourceNotebook:
        key = (assignment, notebook)
        if key not in self.specs:
            released = self.course.folder("release", assignment) / f"{notebook}.ipynb"
            release = None
            if released.is_file():
                release, _, _ = read_submission(released.read_bytes())
            with self.course.gradebook() as gb:
                self.specs[key] = SourceNotebook.from_gradebook(gb, assignment, notebook, release)
        return self.specs[key]

    def resources(self, sub: Submission, notebook: str) -> dict:
        return {
            "nbgrader": {
                "student": sub.student,
                "assignment": sub.assignment,
                "notebook": notebook,
                "db_url": self.course.db_url,
            },
            "metadata": {"path": str(self.course.folder("autograded", sub.assignment, sub.student))},
        }

    def start(self, sub: Submission) -> list[tuple[str, Prepared]]:
        """Record the submission, lay out its autograded folder; return its prepared notebooks."""
        from nbgrader.api import MissingEntry
        from nbgrader.utils import parse_utc

        state = {"left": 0, "notes": [], "error": False, "seconds": 0.0, "left_names": []}
        self.pending[sub] = state
        notes = state["notes"]
        with self.course.gradebook() as gb:
            try:
                gb.find_student(sub.student)
            except MissingEntry:
                if not self.nbgrader.create_student:
                    notes.append(f"Not graded: no student {sub.student!r} in the gradebook (Autograde.create_student).")
                    state["error"] = True
                    return []
                gb.update_or_create_student(sub.student)
            stamp = None
            if sub.timestamp:
                try:
                    stamp = parse_utc(sub.timestamp)
                except (ValueError, OverflowError):
                    notes.append(f"timestamp.txt ({sub.timestamp[:40]!r}) is not a time; the submission has none.")
            gb.update_or_create_submission(sub.assignment, sub.student, **({"timestamp": stamp} if stamp else {}))
            expected = [n.name for n in gb.find_assignment(sub.assignment).notebooks]
            submitted = sub.notebooks
            selected = _matching(submitted, self.glob)
            self.lay_out(sub, selected)
            missing = {}
            for name in expected:
                if name not in submitted:
                    record = gb.find_submission_notebook(name, sub.assignment, sub.student)
                    for grade in record.grades:
                        grade.auto_score, grade.needs_manual_grade = 0, False
                    gb.db.commit()
                    missing[name] = float(record.max_score)
            notes += _mismatch_notes(sorted(set(selected) - set(expected)), missing)
        prepared = []
        for name in expected:
            if name not in selected:
                continue
            data = (sub.folder / f"{name}.ipynb").read_bytes()
            spec = self.spec(sub.assignment, name)
            try:
                resources = self.resources(sub, name)
                item = prepare(data, spec, self.nbgrader.sanitize, resources)
                for preprocessor in self.nbgrader.before_execute if item.runnable else ():
                    item.nb, resources = preprocessor(item.nb, resources)
            except Exception as error:  # nbgrader's own checks refused the notebook
                why = f"{type(error).__name__}: {error}"
                problem = f"{GRADER_PROBLEM}: could not prepare it ({why})."
                item = Prepared(stand_in(spec, "not graded"), [problem], False)
                state["error"] = True
            prepared.append((name, item))
        state["left"] = len(prepared)  # timestamp.txt came with the submission's files, byte for byte
        return prepared

    def lay_out(self, sub: Submission, selected: list[str]) -> None:
        """An empty staging folder with the submission's and the source's other files.

        The autograded notebooks about to be graded are removed first (the whole autograded
        folder when every notebook is), so that a run stopped midway leaves them to the next.
        """
        dest, staging = self.course.folder("autograded", sub.assignment, sub.student), self.staging(sub)
        if staging.exists():
            shutil.rmtree(staging)
        if self.glob == "*" and dest.exists():
            shutil.rmtree(dest)
        for name in selected if self.glob != "*" else ():  # nbgrader's "Removing existing notebook"
            (dest / f"{name}.ipynb").unlink(missing_ok=True)
        staging.mkdir(parents=True)
        _copy_files(self.course, sub, staging, self.nbgrader.exclude)

    def staging(self, sub: Submission) -> Path:
        """Where a submission's autograded folder is built; renamed into place when all of it is graded.

        So an autograded folder exists only for a completed grading: a run stopped midway
        (Ctrl-C, a kill, a crash) leaves the unfinished ones to the next run, which would
        otherwise skip them as already graded.
        """
        dest = self.course.folder("autograded", sub.assignment, sub.student)
        return dest.with_name(f".{dest.name}.grading")

    def finish(self, sub: Submission, notebook: str, nb: NotebookNode, notes: list[str], seconds: float) -> None:
        """Record one executed notebook with nbgrader's preprocessors and write it out."""
        state = self.pending[sub]
        resources = self.resources(sub, notebook)
        nb = without_grader_cells(nb, [])
        try:
            for preprocessor in self.nbgrader.after_execute:
                nb, resources = preprocessor(nb, resources)
        except Exception as error:  # the grades of this notebook may be incomplete: say so
            notes = [*notes, f"{GRADER_PROBLEM}: recording the grades failed ({type(error).__name__}: {error})."]
        if notes:
            nb.cells.insert(0, notes_cell(notes, nb))
        nbformat.write(nb, self.staging(sub) / f"{notebook}.ipynb")
        several = len(state["left_names"]) > 1
        state["notes"] += [f"{notebook}.ipynb: {note}" if several else note for note in notes]
        state["seconds"] += seconds
        state["left"] -= 1
        if any(note.startswith(GRADER_PROBLEM) or note.startswith("Grader error") for note in notes):
            state["error"] = True

    def done(self, sub: Submission) -> None:
        from nbgrader.api import MissingEntry

        state = self.pending.pop(sub)
        dest, staging = self.course.folder("autograded", sub.assignment, sub.student), self.staging(sub)
        if staging.is_dir():
            _move_into(staging, dest)
        if dest.is_dir():  # nbgrader's own: files 444 (664 groupshared), folders 2770 added when groupshared
            self.nbgrader.converter.set_permissions(sub.assignment, sub.student)
        graded = Graded(sub, 0.0, 0.0, list(dict.fromkeys(state["notes"])), state["error"], state["seconds"])
        with self.course.gradebook() as gb:
            try:
                record = gb.find_submission(sub.assignment, sub.student)
            except MissingEntry:
                graded.grader_error = True
            else:
                graded.score, graded.max_score = float(record.score), float(record.max_score)
                graded.late_penalty = float(record.late_submission_penalty or 0.0)
                graded.needs_manual_grade = bool(record.needs_manual_grade)
        self.summary.graded.append(graded)


def autograde(
    course: Course,
    *,
    jobs: int = 2,
    limits: Limits | None = None,
    protections: Protections | None = None,
    assignments: list[str] | None = None,
    students: list[str] | None = None,
    force: bool = True,
    progress: bool = True,
    pool: WorkerPool | ClusterPool | None = None,
    notebooks: str | None = None,
) -> Summary:
    """Grade every matching submission; see the module docstring.

    ``pool`` is a started ``WorkerPool`` to use (the command starts one before importing
    this module, so that the workers get ready meanwhile), or a connected
    ``grading.cluster.ClusterPool`` to grade on a Dask cluster; by default one of ``jobs``
    workers is started first thing. ``notebooks`` is nbgrader's ``--notebook`` glob
    (default: the config's ``CourseDirectory.notebook_id``, ``*``): only the notebooks it
    matches are graded and written; the others' autograded files stay.
    """
    from sqlalchemy.exc import SAWarning

    selection = (assignments, students, notebooks, force)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's gradebook warns about its own session use
        if pool is not None:
            return _autograde(course, pool, limits, selection, progress)
        protections = protections or detect()
        hide = course.hidden_paths()
        with WorkerPool(jobs, protections, Limits(), hide) as started:  # the workers get ready meanwhile
            return _autograde(course, started, limits, selection, progress)


def _autograde(course, pool, limits, selection, progress) -> Summary:
    started = time.monotonic()
    assignments, students, notebooks, force = selection
    submissions, ignored = find_submissions(course, assignments, students, notebooks)
    glob = notebook_glob(course, notebooks)
    limits = limits or default_limits(course)
    threads = max(1, _cores() // pool.jobs)  # one kernel thread per core is enough: the workers use the cores
    pool.limits = Limits(**{**limits.to_dict(), "threads": threads})
    summary = Summary(protections=pool.protections, ignored=ignored)
    todo = [s for s in submissions if force or _stale(course, s, glob)]
    summary.skipped = [s for s in submissions if s not in todo]
    run = _Run(course, summary, glob)
    jobs_of: dict[str, tuple[Submission, str, Prepared]] = {}
    bar = _progress(sum(len(_matching(s.notebooks, glob)) for s in todo), progress)
    busy = time.monotonic()  # the coordinator's own time (preparing, sending, recording): the serial part
    for sub in todo:  # the workers run the first notebooks while the next submissions are prepared
        prepared = run.start(sub)
        run.pending[sub]["left_names"] = [name for name, _ in prepared]
        for name, item in prepared:
            if item.runnable:
                key = str(len(jobs_of))
                jobs_of[key] = (sub, name, item)
                measured, problems = measured_tests(item.nb, course.root)  # test cells from the gradebook
                item.notes += problems
                job = {"nb": with_grader_cells(item.nb), "files": str(run.staging(sub)), "measured": measured}
                pool.submit(key, job)
            else:
                run.finish(sub, name, item.nb, item.notes, 0.0)
                bar.update(1)
        if run.pending[sub]["left"] == 0:
            run.done(sub)
    summary.coordinator_seconds = time.monotonic() - busy
    for key, result in pool.results():
        busy = time.monotonic()
        sub, name, item = jobs_of[key]
        notes = item.notes + result.get("notes", [])
        if "nb" in result:
            nb = nbformat.from_dict(result["nb"])
        else:
            nb = fail_all_tests(item.nb, f"grader error: {result['error']}")
            notes.append(f"Grader error: {result['error']}.")
        run.finish(sub, name, nb, notes, result.get("seconds", 0.0))
        if run.pending[sub]["left"] == 0:
            run.done(sub)
        summary.coordinator_seconds += time.monotonic() - busy
        bar.update(1)
    summary.uids = pool.uids
    bar.close()
    course.protect()
    summary.graded.sort(key=lambda g: (g.submission.assignment, g.submission.student))
    summary.seconds = time.monotonic() - started
    return summary


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="autograde", unit="nb", disable=not enabled or total == 0)
