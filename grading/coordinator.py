"""One autograde run in the coordinator: submissions laid out, notebooks sent, results merged in batches.

Contract: ``Run(course, summary, pool, glob, bar)``, used inside ``with run.recorder:``, is
driven by ``autograde``'s loop: ``start(chunk)`` records a chunk of submissions in the
gradebook (one transaction), lays out their staging folders (``grading.staging``) and returns
their notebooks to grade; ``send`` hands one to the ``grading.pool.Pool``; ``receive`` takes a
result back; ``flush`` writes a batch of graded notebooks (``Batch``) into the gradebook (one
transaction, ``grading.record``) and into the staging folders; ``complete`` puts finished
submissions in place and adds them to the summary as ``Graded``.

Where the work of one notebook happens (``grading.pipeline``): on a pool whose slots are
remote (a cluster) and a recipe that is portable, preparing and recording run there, beside
the grading, and this process receives ``Outcome`` s; otherwise this process prepares and
finishes each notebook around the pool's execution. Either way this process alone writes
the gradebook and ``autograded/``. ``Clock`` times the coordinator's phases.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import nbformat

from grading import pipeline
from grading.converter import AutogradeConverter
from grading.coursedir import Course, counted
from grading.jobs import NotebookJob, Outcome, Result
from grading.pipeline import Recipe, snapshot_gradebook
from grading.pool import Pool
from grading.record import Recorder
from grading.sanitize import Prepared, SourceNotebook, notes_cell, read_submission, role
from grading.staging import autograded_folder, lay_out, move_into, staging_folder
from grading.submissions import Submission, matching_notebooks
from grading.summary import Graded, Summary

__all__ = ["BATCH", "BATCH_SECONDS", "Batch", "Clock", "Run"]

BATCH = 200  # a batch of graded notebooks is written once it holds this many (one transaction)...
BATCH_SECONDS = 1.0  # ...or once its oldest has waited this long

GradedNotebook = tuple[Submission, str, Outcome]


class Clock:
    """The coordinator's time by phase: CPU (this process, every thread) and wall seconds."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        cpu, wall = time.process_time(), time.monotonic()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu
            self.wall[name] = self.wall.get(name, 0.0) + time.monotonic() - wall


class Batch:
    """Graded notebooks waiting to go into the gradebook together, and since when the oldest waits."""

    def __init__(self) -> None:
        self.outcomes: list[GradedNotebook] = []
        self.since = 0.0  # when the oldest of them came

    def add(self, sub: Submission, name: str, outcome: Outcome) -> None:
        if not self.outcomes:
            self.since = time.monotonic()
        self.outcomes.append((sub, name, outcome))

    def patience(self) -> float | None:
        """How long to wait for more results before this batch must be flushed (None: as long as it takes)."""
        if not self.outcomes:
            return None
        return max(0.0, self.since + BATCH_SECONDS - time.monotonic())

    def due(self, final: bool) -> bool:
        """Whether to write it now: ``final``, or full (``BATCH``), or ``BATCH_SECONDS`` old."""
        if not self.outcomes:
            return False
        return final or len(self.outcomes) >= BATCH or time.monotonic() >= self.since + BATCH_SECONDS

    def take_whole(self, left: dict[Submission, int]) -> list[GradedNotebook]:
        """The graded notebooks of submissions graded whole (``left``: each one's notebooks still out); the rest wait.

        So the gradebook, like ``autograded/``, holds either a submission's previous grades or
        all of its new ones, whenever the run stops.
        """
        graded: dict[Submission, int] = {}
        for sub, _, _ in self.outcomes:
            graded[sub] = graded.get(sub, 0) + 1
        whole = {sub for sub, count in graded.items() if count >= left[sub]}
        taken = [o for o in self.outcomes if o[0] in whole]
        self.outcomes = [o for o in self.outcomes if o[0] not in whole]
        if self.outcomes:  # the rest wait for their submission's other notebooks
            self.since = time.monotonic()
        return taken


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


class Run:
    """One autograde run; see the module docstring."""

    def __init__(self, course: Course, summary: Summary, pool: Pool, glob: str = "*", bar: Any = None):
        from nbgrader.preprocessors import AssignLatePenalties

        self.course = course
        self.summary = summary
        self.pool = pool
        self.glob = glob  # the notebooks to grade (nbgrader's --notebook)
        self.bar = bar
        self.nbgrader = AutogradeConverter(course)
        late = next((p for p in self.nbgrader.after_execute if type(p) is AssignLatePenalties), None)
        self.recorder = Recorder(course, self.nbgrader.create_student, late)
        self.recipes: dict[tuple[str, str], Recipe] = {}
        self.pending: dict[Submission, _State] = {}
        self.sent: dict[str, _Sent] = {}  # task key -> the notebook in the pool
        self.batch = Batch()  # graded, for the next transaction
        self.clock = Clock()
        self._keys = 0

    def recipe(self, assignment: str, notebook: str) -> Recipe:
        """What grading any copy of this notebook needs (built once per run; with a snapshot for a cluster)."""
        key = (assignment, notebook)
        if key not in self.recipes:
            released = self.course.folder("release", assignment) / f"{notebook}.ipynb"
            release = read_submission(released.read_bytes())[0] if released.is_file() else None
            gb = self.recorder.gb
            spec = SourceNotebook.from_gradebook(gb, assignment, notebook, release)
            snapshot = snapshot_gradebook(gb, assignment) if self.pool.remote else None
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
            selected = matching_notebooks(sub.notebooks, self.glob)
            lay_out(self.course, sub, self.nbgrader.exclude)
            state.notes += _mismatch_notes(sorted(set(selected) - set(found.expected)), found.missing)
            state.names = [name for name in found.expected if name in selected]
            state.left = len(state.names)  # timestamp.txt came with the submission's files, byte for byte
            notebooks += [(sub, name) for name in state.names]
        return notebooks

    def send(self, sub: Submission, name: str) -> None:
        """One notebook to the pool: whole to a remote pool's slot, or prepared here."""
        recipe = self.recipe(sub.assignment, name)
        data = (sub.folder / f"{name}.ipynb").read_bytes()
        job = NotebookJob(sub.student, sub.assignment, name, data, autograded=str(autograded_folder(self.course, sub)))
        key, self._keys = str(self._keys), self._keys + 1
        files = str(staging_folder(self.course, sub))
        if self.pool.remote and recipe.portable:
            self.sent[key] = _Sent(sub, name, job, recipe)
            self.pool.submit_notebook(key, job, recipe, files)
            return
        prepared, task = pipeline.prepare(job, recipe, self.course.db_url, self.course.root)
        if task is None:
            self.batch.add(sub, name, self._finish(prepared, None, recipe, job))
            return
        self.sent[key] = _Sent(sub, name, job, recipe, prepared)
        self.pool.submit(key, replace(task, files=files))

    def receive(self, key: str, result: Result | Outcome) -> None:
        """A result from the pool: an ``Outcome`` from a remote slot, or the grading worker's result to finish here."""
        sent = self.sent.pop(key)
        if isinstance(result, Outcome):
            outcome = result
        else:
            prepared = sent.prepared
            if prepared is None:  # the worker's whole task failed: prepare here to fail every test, as locally
                prepared, _ = pipeline.prepare(sent.job, sent.recipe, self.course.db_url, self.course.root)
            outcome = self._finish(prepared, result, sent.recipe, sent.job)
        self.batch.add(sent.sub, sent.name, outcome)

    def _finish(self, prepared: Prepared, result: Result | None, recipe: Recipe, job: NotebookJob) -> Outcome:
        with self.clock.phase("finish"):
            return pipeline.finish(prepared, result, recipe, job, self.course.db_url)

    # -- a batch into the gradebook and autograded/ -----------------------------------------------

    def idle(self) -> bool:
        """Whether every notebook still out is already running: then a batch waiting for more gains nothing."""
        return len(self.sent) <= self.pool.jobs

    def flush(self, final: bool = True) -> None:
        """Merge the graded notebooks into the gradebook (one transaction), write them, complete the submissions.

        Unless ``final``, a batch waits to be full (``BATCH``) or ``BATCH_SECONDS`` old: a
        transaction per few notebooks was most of the coordinator's work. It is final when
        the pool has no queued work left (``idle``), so a run's last notebooks, or a small
        run's, are written as soon as they are graded.
        """
        if not self.batch.due(final):
            return
        batch = self.batch.take_whole({sub: state.left for sub, state in self.pending.items()})
        if not batch:
            return
        with self.clock.phase("record"):
            problems = self.recorder.record(batch)
        completed = []
        with self.clock.phase("write"):
            for sub, name, outcome in batch:
                extra = problems.get((sub, name), [])
                text = outcome.text if not extra else _with_more_notes(outcome, extra)
                (staging_folder(self.course, sub) / f"{name}.ipynb").write_text(text, encoding="utf-8")
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

    def complete(self, subs: list[Submission]) -> None:
        """Put finished submissions in place (nbgrader's permissions) and read their totals (one query)."""
        if not subs:
            return
        with self.clock.phase("complete"):
            for sub in subs:
                dest, staging = autograded_folder(self.course, sub), staging_folder(self.course, sub)
                if staging.is_dir():
                    move_into(staging, dest, whole=self.glob == "*")
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


def _with_more_notes(outcome: Outcome, more: list[str]) -> str:
    """The autograded notebook's text with ``more`` notes in its grading-notes cell."""
    nb = nbformat.reads(outcome.text, as_version=4)
    nb.cells = [c for c in nb.cells if role(c) != "notes"]
    nb.cells.insert(0, notes_cell([*outcome.notes, *more], nb))
    return nbformat.writes(nb)
