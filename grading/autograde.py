"""Grade a class as ``nbgrader autograde`` would, in parallel jailed kernels, with hardening on top.

Contract: ``autograde(course, jobs=N)`` grades every ``submitted/<student>/<assignment>/``
of an assignment in the gradebook, following nbgrader's ``Autograde`` converter step by
step and using nbgrader's own preprocessors, configured by the course's
``nbgrader_config.py``, wherever no kernel is involved:

1. per submission (this process): the student is created (``Autograde.create_student``),
   the submission recorded with its ``timestamp.txt``, the submission's other files and
   then the source's (data, images; ``exclude_overwriting`` kept) copied to
   ``autograded/<student>/<assignment>/``, unknown notebooks skipped and missing ones
   given 0, as nbgrader does; the gradebook part for many submissions in one transaction
   (``grading.record``);
2. per notebook: ``sanitize.prepare`` (nbgrader's sanitizing preprocessors, then the
   hardening it documents: ``grading.pipeline.prepare``);
3. per notebook (``N`` workers, or the worker threads of a Dask cluster: ``grading.cluster``):
   the notebook runs in a jailed kernel whose working directory holds the assignment's
   other files (``worker``, ``execute``, ``guard``);
4. per notebook: the rest of nbgrader's ``Autograde.autograde_preprocessors``
   (``IgnorePattern``, ``ClearMetadataPreprocessor``, ``LimitOutput``, ``SaveAutoGrades``'s
   scores and comments, ``CheckCellMetadata``) and the autograded notebook's text, grading
   notes on top (``grading.pipeline.finish``);
5. per batch of graded notebooks (this process, the gradebook's only writer, whatever its
   database): the scores, comments, needs-manual-grade flags and ``AssignLatePenalties``'s
   penalties in one transaction (``grading.record``), the notebooks written, and each
   finished submission's folder put in place.

Steps 2 and 4 run on the cluster's workers, beside step 3, when the course's preprocessors
are nbgrader's own (``pipeline.Recipe.portable``), and in this process otherwise and on one
machine; a course that configures recording preprocessors of its own keeps nbgrader's
per-notebook recording (``Recipe.batched``).

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

import contextlib
import fnmatch
import functools
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from grading import pipeline
from grading.coursedir import Course, CourseError, counted
from grading.pipeline import NotebookJob, Outcome, Recipe, snapshot_gradebook
from grading.record import Recorder
from grading.sandbox.protections import Limits, Protections, detect
from grading.sandbox.worker import WorkerPool
from grading.sanitize import Prepared, SourceNotebook, notes_cell, read_submission, role

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

    @functools.cached_property
    def notebooks(self) -> list[str]:
        """The submitted notebooks' names (read once: a run asks several times)."""
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
    coordinator_seconds: float = 0.0  # wall seconds this process spent laying out, sending, receiving, recording
    coordinator_phases: dict[str, float] = field(default_factory=dict)  # its CPU seconds by phase (the serial part)
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
    _recover(dest)  # a run killed while it replaced this result left the previous one aside
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


def _replaced(dest: Path) -> Path:
    """Where a previous autograded folder waits, for the moment of its replacement, to be removed."""
    return dest.with_name(f".{dest.name}.replaced")


def _move_into(staging: Path, dest: Path, whole: bool) -> None:
    """Put a graded submission's staging folder in place of its previous result, if any.

    ``whole`` (every notebook was graded): ``dest`` is swapped for ``staging`` by two renames,
    the old folder removed after; else (``--notebook``) each new file replaces its old one by a
    rename. At every moment the submission has one complete result, old or new; a kill
    between the two renames leaves the old one aside, which ``_recover`` puts back.
    """
    if not dest.exists():
        staging.rename(dest)
    elif whole:
        aside = _replaced(dest)
        if aside.exists():
            shutil.rmtree(aside)
        dest.rename(aside)
        staging.rename(dest)
        shutil.rmtree(aside)
    else:
        for path in sorted(staging.rglob("*"), key=lambda p: len(p.parts)):
            target = dest / path.relative_to(staging)
            if path.is_dir():
                target.mkdir(exist_ok=True)
            else:
                path.replace(target)
        shutil.rmtree(staging)


def _recover(dest: Path) -> None:
    """After a run killed mid-replacement: the previous result back in place (or its leftover removed)."""
    aside = _replaced(dest)
    if aside.is_dir():
        if dest.exists():
            shutil.rmtree(aside)
        else:
            aside.rename(dest)


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


@dataclass
class _State:
    """A submission being graded: its notebooks still out, and what the summary will say."""

    names: list[str] = field(default_factory=list)  # the notebooks graded in this run
    left: int = 0
    notes: list[str] = field(default_factory=list)
    error: bool = False
    seconds: float = 0.0


@dataclass
class _Sent:
    """A notebook in a pool: what it is, and what the coordinator kept of it (``prepared`` when it prepared it)."""

    sub: Submission
    name: str
    job: NotebookJob
    recipe: Recipe
    prepared: Prepared | None = None


class _Clock:
    """The coordinator's time by phase: CPU (this process, every thread) and wall seconds."""

    def __init__(self):
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        cpu, wall = time.process_time(), time.monotonic()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu
            self.wall[name] = self.wall.get(name, 0.0) + time.monotonic() - wall


class _Run:
    """One autograde run: submissions laid out, notebooks sent, results merged into the gradebook in batches.

    Where the work of one notebook happens (``grading.pipeline``): on a cluster whose
    recipe is portable, preparing and recording run on the worker, beside the grading, and
    this process receives ``Outcome`` s; otherwise this process prepares and finishes each
    notebook around the pool's execution. Either way this process alone writes the
    gradebook (``grading.record``, one transaction per batch) and ``autograded/``.
    """

    def __init__(self, course: Course, summary: Summary, pool, glob: str = "*", bar=None):
        from nbgrader.preprocessors import AssignLatePenalties

        self.course = course
        self.summary = summary
        self.pool = pool
        self.glob = glob  # the notebooks to grade (nbgrader's --notebook)
        self.bar = bar
        self.nbgrader = _Nbgrader(course)
        late = next((p for p in self.nbgrader.after_execute if type(p) is AssignLatePenalties), None)
        self.recorder = Recorder(course, self.nbgrader.create_student, late)
        self.recipes: dict[tuple[str, str], Recipe] = {}
        self.pending: dict[Submission, _State] = {}
        self.sent: dict[str, _Sent] = {}  # task key -> the notebook in the pool
        self.outcomes: list[tuple[Submission, str, Outcome]] = []  # graded, for the next batch
        self.first_outcome = 0.0  # when the oldest of them came
        self.remote = hasattr(pool, "submit_notebook")  # a cluster: portable recipes go whole to the workers
        self.clock = _Clock()
        self._keys = 0

    def recipe(self, assignment: str, notebook: str) -> Recipe:
        """What grading any copy of this notebook needs (built once per run; with a snapshot for a cluster)."""
        key = (assignment, notebook)
        if key not in self.recipes:
            released = self.course.folder("release", assignment) / f"{notebook}.ipynb"
            release = read_submission(released.read_bytes())[0] if released.is_file() else None
            gb = self.recorder.gb
            spec = SourceNotebook.from_gradebook(gb, assignment, notebook, release)
            snapshot = snapshot_gradebook(gb, assignment) if self.remote else None
            gb.db.commit()
            self.recipes[key] = Recipe.build(self.course, self.nbgrader, spec, snapshot=snapshot)
        return self.recipes[key]

    # -- submissions in, notebooks out -------------------------------------------------------------

    def start(self, chunk: list[Submission]) -> list[tuple[Submission, str]]:
        """Record a chunk of submissions (one transaction), lay out their folders; their notebooks to grade."""
        opened = self.recorder.open(chunk)
        notebooks = []
        for sub in chunk:
            found = opened[sub]
            state = self.pending[sub] = _State(notes=list(found.notes), error=found.refused)
            if found.refused:
                continue
            selected = _matching(sub.notebooks, self.glob)
            self.lay_out(sub, selected)
            state.notes += _mismatch_notes(sorted(set(selected) - set(found.expected)), found.missing)
            state.names = [name for name in found.expected if name in selected]
            state.left = len(state.names)  # timestamp.txt came with the submission's files, byte for byte
            notebooks += [(sub, name) for name in state.names]
        return notebooks

    def send(self, sub: Submission, name: str) -> None:
        """One notebook to the pool: whole to a cluster's worker, or prepared here."""
        recipe = self.recipe(sub.assignment, name)
        data = (sub.folder / f"{name}.ipynb").read_bytes()
        dest = self.course.folder("autograded", sub.assignment, sub.student)
        job = NotebookJob(sub.student, sub.assignment, name, data, autograded=str(dest))
        key, self._keys = str(self._keys), self._keys + 1
        files = str(self.staging(sub))
        if self.remote and recipe.portable:
            self.sent[key] = _Sent(sub, name, job, recipe)
            self.pool.submit_notebook(key, job, recipe, files)
            return
        prepared, task = pipeline.prepare(job, recipe, self.course.db_url, self.course.root)
        if task is None:
            self._graded(sub, name, self.finish(prepared, None, recipe, job))
            return
        self.sent[key] = _Sent(sub, name, job, recipe, prepared)
        self.pool.submit(key, {**task, "files": files})

    def finish(self, prepared: Prepared, result: dict | None, recipe: Recipe, job: NotebookJob) -> Outcome:
        with self.clock.phase("finish"):
            return pipeline.finish(prepared, result, recipe, job, self.course.db_url)

    def receive(self, key: str, result) -> None:
        """A result from the pool: an ``Outcome`` from a worker, or the grading worker's result to finish here."""
        sent = self.sent.pop(key)
        if isinstance(result, Outcome):
            outcome = result
        else:
            prepared = sent.prepared
            if prepared is None:  # the worker's whole task failed: prepare here to fail every test, as locally
                prepared, _ = pipeline.prepare(sent.job, sent.recipe, self.course.db_url, self.course.root)
            outcome = self.finish(prepared, result, sent.recipe, sent.job)
        self._graded(sent.sub, sent.name, outcome)

    def _graded(self, sub: Submission, name: str, outcome: Outcome) -> None:
        if not self.outcomes:
            self.first_outcome = time.monotonic()
        self.outcomes.append((sub, name, outcome))

    # -- a batch into the gradebook and autograded/ -----------------------------------------------

    def idle(self) -> bool:
        """Whether every notebook still out is already running: then a batch waiting for more gains nothing."""
        return len(self.sent) <= self.pool.jobs

    def patience(self) -> float | None:
        """How long to wait for more results before the graded ones must be flushed (None: as long as it takes)."""
        if not self.outcomes:
            return None
        return max(0.0, self.first_outcome + _BATCH_SECONDS - time.monotonic())

    def flush(self, final: bool = True) -> None:
        """Merge the graded notebooks into the gradebook (one transaction), write them, complete the submissions.

        Unless ``final``, a batch waits to be full (``_BATCH``) or ``_BATCH_SECONDS`` old: a
        transaction per few notebooks was most of the coordinator's work. It is final when
        the pool has no queued work left (``idle``), so a run's last notebooks, or a small
        run's, are written as soon as they are graded.
        """
        if not self.outcomes:
            return
        if not final and len(self.outcomes) < _BATCH and time.monotonic() < self.first_outcome + _BATCH_SECONDS:
            return
        batch, self.outcomes = self._whole_submissions()
        if self.outcomes:  # the rest wait for their submission's other notebooks
            self.first_outcome = time.monotonic()
        if not batch:
            return
        with self.clock.phase("record"):
            problems = self.recorder.record(batch)
        completed = []
        with self.clock.phase("write"):
            for sub, name, outcome in batch:
                extra = problems.get((sub, name), [])
                text = outcome.text if not extra else _with_more_notes(outcome, extra)
                (self.staging(sub) / f"{name}.ipynb").write_text(text, encoding="utf-8")
                state = self.pending[sub]
                notes = [*outcome.notes, *extra]
                several = len(state.names) > 1
                state.notes += [f"{name}.ipynb: {note}" if several else note for note in notes]
                state.seconds += outcome.seconds
                state.error |= outcome.error or bool(extra)
                state.left -= 1
                if state.left == 0:
                    completed.append(sub)
                if self.bar is not None:
                    self.bar.update(1)
        self.complete(completed)

    def lay_out(self, sub: Submission, selected: list[str]) -> None:
        """An empty staging folder with the submission's and the source's other files.

        A previous result (``--force``, or a newer submission) stays in place until the new
        one is complete (``complete``): a run stopped midway leaves every learner a complete
        result, the old one, and a gradebook that still holds its grades.
        """
        dest, staging = self.course.folder("autograded", sub.assignment, sub.student), self.staging(sub)
        _recover(dest)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        _copy_files(self.course, sub, staging, self.nbgrader.exclude)

    def _whole_submissions(self) -> tuple[list[tuple[Submission, str, Outcome]], list[tuple[Submission, str, Outcome]]]:
        """(the graded notebooks of submissions graded whole, the others): a submission's grades go in at once.

        So the gradebook, like ``autograded/``, holds either a submission's previous grades or
        all of its new ones, whenever the run stops.
        """
        graded: dict[Submission, int] = {}
        for sub, _, _ in self.outcomes:
            graded[sub] = graded.get(sub, 0) + 1
        whole = {sub for sub, count in graded.items() if count >= self.pending[sub].left}
        return [o for o in self.outcomes if o[0] in whole], [o for o in self.outcomes if o[0] not in whole]

    def staging(self, sub: Submission) -> Path:
        """Where a submission's autograded folder is built; renamed into place when all of it is graded.

        So an autograded folder exists only for a completed grading: a run stopped midway
        (Ctrl-C, a kill, a crash) leaves the unfinished ones to the next run, which would
        otherwise skip them as already graded.
        """
        dest = self.course.folder("autograded", sub.assignment, sub.student)
        return dest.with_name(f".{dest.name}.grading")

    def complete(self, subs: list[Submission]) -> None:
        """Put finished submissions in place (nbgrader's permissions) and read their totals (one query)."""
        if not subs:
            return
        with self.clock.phase("complete"):
            for sub in subs:
                dest, staging = self.course.folder("autograded", sub.assignment, sub.student), self.staging(sub)
                if staging.is_dir():
                    _move_into(staging, dest, whole=self.glob == "*")
                if dest.is_dir():  # nbgrader's own: files 444 (664 groupshared), folders 2770 added when groupshared
                    self.nbgrader.converter.set_permissions(sub.assignment, sub.student)
            totals = self.recorder.totals(subs)
            for sub in subs:
                state = self.pending.pop(sub)
                graded = Graded(sub, 0.0, 0.0, list(dict.fromkeys(state.notes)), state.error, state.seconds)
                found = totals.get(sub)
                if found is None:  # never recorded (no such student)
                    graded.grader_error = True
                else:
                    graded.score, graded.max_score = found.score, found.max_score
                    graded.late_penalty, graded.needs_manual_grade = found.late_penalty, found.needs_manual_grade
                self.summary.graded.append(graded)


def _with_more_notes(outcome: Outcome, more: list[str]) -> str:
    """The autograded notebook's text with ``more`` notes in its grading-notes cell."""
    nb = nbformat.reads(outcome.text, as_version=4)
    nb.cells = [c for c in nb.cells if role(c) != "notes"]
    nb.cells.insert(0, notes_cell([*outcome.notes, *more], nb))
    return nbformat.writes(nb)


def _ready(pool, timeout: float | None) -> list[tuple[str, object]]:
    """The results the pool has, waiting up to ``timeout`` seconds for a first one (None: until one comes)."""
    if hasattr(pool, "ready"):
        return pool.ready(timeout)
    found = []
    item = pool.next_result(timeout)
    while item is not None:
        found.append(item)
        item = pool.next_result(0)
    return found


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


_CHUNK = 64  # submissions recorded in one transaction before their notebooks are sent
_BATCH = 200  # a batch of graded notebooks is written once it holds this many (one transaction)...
_BATCH_SECONDS = 1.0  # ...or once its oldest has waited this long


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
    bar = _progress(sum(len(_matching(s.notebooks, glob)) for s in todo), progress)
    run = _Run(course, summary, pool, glob, bar)
    clock = run.clock
    with run.recorder:
        for first in range(0, len(todo), _CHUNK):  # the workers grade the first notebooks while the next are sent
            chunk = todo[first : first + _CHUNK]
            with clock.phase("lay out"):
                notebooks = run.start(chunk)
            with clock.phase("send"):
                for sub, name in notebooks:
                    run.send(sub, name)
            run.complete([sub for sub in chunk if run.pending[sub].left == 0])  # nothing to grade in them
            with clock.phase("receive"):
                for key, result in _ready(pool, 0):
                    run.receive(key, result)
            run.flush(final=run.idle())
        while run.sent:
            with clock.phase("wait"):
                ready = _ready(pool, run.patience())
            with clock.phase("receive"):
                for key, result in ready:
                    run.receive(key, result)
            run.flush(final=run.idle())
        run.flush()
    summary.uids = pool.uids
    bar.close()
    course.protect()
    summary.graded.sort(key=lambda g: (g.submission.assignment, g.submission.student))
    summary.seconds = time.monotonic() - started
    summary.coordinator_seconds = sum(s for name, s in clock.wall.items() if name != "wait")
    summary.coordinator_phases = {name: s for name, s in clock.cpu.items() if name != "wait"}
    return summary


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="autograde", unit="nb", disable=not enabled or total == 0)
