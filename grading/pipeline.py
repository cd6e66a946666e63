"""One notebook's grading around its execution: prepared for the kernel before, made into grades after.

Contract: ``Recipe.build(course, nbgrader, spec, snapshot=...)`` gathers, once per run and
assignment notebook, everything that grading one submitted copy needs besides the copy: the
instructor's cells (``SourceNotebook``), nbgrader's configured preprocessors as picklable
``Step`` s, the referees of its measured tests, and, for a cluster, a snapshot of the
assignment's definitions in a gradebook of its own (``snapshot_gradebook``). With it, anywhere (a cluster's worker,
or the coordinator when it grades on this machine):

* ``prepare(job, recipe, ...)``: the submitted bytes (a ``jobs.NotebookJob``) become the
  notebook to run (``sanitize.sanitize_and_harden`` with nbgrader's ``sanitize_preprocessors`` and the
  ``autograde_preprocessors`` before ``Execute``), and the pool's ``jobs.Task`` for it, or
  None when it cannot run;
* ``finish(prepared, result, recipe)``: the executed notebook (the pool's ``jobs.Result``,
  or the worker's error) loses
  the grader's cells, goes through the ``autograde_preprocessors`` after ``Execute``, and
  becomes an ``Outcome``: the autograded notebook's text, grading notes on top, and what
  nbgrader's ``SaveAutoGrades`` would write for it (each grade cell's automatic score, each
  answer's and task's automatic comment), computed here by nbgrader's own code.

Nothing here writes the gradebook: the coordinator merges ``Outcome`` s into it in batched
transactions (``grading.record``), where the rest of ``SaveAutoGrades`` (needs-manual-grade,
which depends on a manual score in the gradebook) and ``AssignLatePenalties`` (the course's
late-penalty plugin, on the notebook's score) happen. That is ``Recipe.batched``: nbgrader's
own recording preprocessors, in their order, and otherwise only preprocessors that do not
write the gradebook. A course that configures others keeps nbgrader's per-notebook recording
in the coordinator (``autograde``'s legacy path). ``Recipe.portable``: every preprocessor is
nbgrader's or nbconvert's (importable on a worker without the course directory); those that
read the gradebook (``OverwriteCells``, ``OverwriteKernelspec``) read the snapshot there.
"""

from __future__ import annotations

import contextlib
import pickle
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import nbformat

from grading.jobs import NotebookJob, Outcome, Result, Task
from grading.safe_html import make_safe_to_read
from grading.sandbox.execute import GRADER_PROBLEM
from grading.sanitize import (
    Prepared,
    SourceNotebook,
    fail_all_tests,
    notes_cell,
    sanitize_and_harden,
    stand_in,
    with_grader_cells,
    without_grader_cells,
)

__all__ = ["NotebookJob", "Outcome", "Recipe", "Step", "finish", "grader_error", "prepare", "snapshot_gradebook"]

_RECORD, _LATE = "record", "late"  # SaveAutoGrades and AssignLatePenalties, done by the coordinator's batches
_PACKAGES = ("nbgrader.", "nbconvert.")  # importable wherever the course's environment is installed
_WRITES_GRADEBOOK = {"SaveCells", "SaveAutoGrades", "AssignLatePenalties", "Execute"}  # never on a worker
_READS_GRADEBOOK = {"OverwriteCells", "OverwriteKernelspec", "GetGrades"}  # the assignment's definitions, or grades


@dataclass(frozen=True)
class Step:
    """One configured preprocessor, as its class's import path and configured trait values (picklable)."""

    cls: str
    values: dict[str, Any]

    @classmethod
    def of(cls, preprocessor: Any) -> Step:
        kind = type(preprocessor)
        return cls(f"{kind.__module__}.{kind.__qualname__}", dict(preprocessor.trait_values(config=True)))

    @property
    def name(self) -> str:
        return self.cls.rsplit(".", 1)[-1]

    @property
    def portable(self) -> bool:
        """Whether a worker can run it: nbgrader's or nbconvert's own, configured with plain values."""
        if not self.cls.startswith(_PACKAGES) or self.name in _WRITES_GRADEBOOK or self.name == "GetGrades":
            return False
        try:
            pickle.dumps(self.values)
        except Exception:
            return False
        return True

    def make(self) -> Any:
        """A new preprocessor of this class, with these values."""
        from traitlets.utils.importstring import import_item

        return import_item(self.cls)(**self.values)


def _recording(steps: list[Any]) -> tuple[list[Step | str], bool]:
    """The after-``Execute`` steps, nbgrader's two recording preprocessors as markers; whether batching applies.

    Batching applies when ``SaveAutoGrades`` and ``AssignLatePenalties`` are nbgrader's own
    classes (not subclasses), in that order, each at most once, and every other step is
    nbgrader's or nbconvert's and touches no gradebook. Otherwise every step is kept as it
    is, to run as nbgrader runs it (the legacy path).
    """
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    marked: list[Step | str] = []
    for preprocessor in steps:
        if type(preprocessor) is SaveAutoGrades:
            marked.append(_RECORD)
        elif type(preprocessor) is AssignLatePenalties:
            marked.append(_LATE)
        else:
            marked.append(Step.of(preprocessor))
    markers = [m for m in marked if isinstance(m, str)]
    others = [m for m in marked if isinstance(m, Step)]
    batched = markers in ([], [_RECORD], [_RECORD, _LATE]) and all(
        s.cls.startswith(_PACKAGES) and s.name not in _READS_GRADEBOOK | _WRITES_GRADEBOOK for s in others
    )
    return (marked if batched else [Step.of(p) for p in steps]), batched


@dataclass(frozen=True)
class Recipe:
    """What grading any copy of one assignment notebook needs; see the module docstring."""

    assignment: str
    notebook: str
    spec: SourceNotebook
    sanitize: tuple[Step, ...]
    before_execute: tuple[Step, ...]
    after_execute: tuple[Step | str, ...]
    batched: bool
    referees: dict[str, str] = field(default_factory=dict)  # the measured tests' referees: name -> source
    snapshot: bytes | None = None  # a gradebook of the assignment's definitions (for a worker)
    token: str = field(default_factory=lambda: secrets.token_hex(8))  # names this recipe in a worker's caches

    @property
    def portable(self) -> bool:
        steps = [*self.sanitize, *self.before_execute, *(s for s in self.after_execute if isinstance(s, Step))]
        return self.batched and self.snapshot is not None and all(s.portable for s in steps)

    @classmethod
    def build(cls, course: Any, nbgrader: Any, spec: SourceNotebook, *, snapshot: bytes | None = None) -> Recipe:
        """From the course and its nbgrader settings (``converter.AutogradeConverter``); ``snapshot`` for a cluster."""
        from grading.measure import find_measured

        after, batched = _recording(nbgrader.after_execute)
        referees: dict[str, str] = {}
        probe = stand_in(spec, "probe")  # the instructor's test cells, where measured tests are marked
        for measured in find_measured(probe):
            path = course.root / f"{measured.referee}.py"
            with contextlib.suppress(OSError):  # a missing referee: measured_tests says so in the notes
                referees[measured.referee] = path.read_text(encoding="utf-8")
        return cls(
            spec.assignment,
            spec.name,
            spec,
            tuple(Step.of(p) for p in nbgrader.sanitize),
            tuple(Step.of(p) for p in nbgrader.before_execute),
            tuple(after),
            batched,
            referees,
            snapshot,
        )


def snapshot_gradebook(gb: Any, assignment: str) -> bytes:
    """A new SQLite gradebook with ``assignment``'s definitions only (notebooks, cells, kernelspecs), as bytes.

    What ``OverwriteCells`` and ``OverwriteKernelspec`` read, and nothing of any student: a
    worker opens it with nbgrader's own ``Gradebook``, as those preprocessors do.
    """
    from nbgrader.api import Gradebook
    from sqlalchemy import text

    record = gb.find_assignment(assignment)
    with tempfile.TemporaryDirectory(prefix="course-snapshot-") as folder:
        path = Path(folder) / "gradebook.db"
        with Gradebook(f"sqlite:///{path}") as snap:
            snap.db.execute(text("PRAGMA synchronous = OFF"))  # a scratch file: no fsync for each of its commits
            snap.update_or_create_assignment(assignment, duedate=record.duedate)
            for nb in record.notebooks:
                snap.update_or_create_notebook(nb.name, assignment, kernelspec=nb.kernelspec)
                for cell in nb.grade_cells:
                    snap.update_or_create_grade_cell(
                        cell.name, nb.name, assignment, max_score=cell.max_score, cell_type=cell.cell_type
                    )
                for cell in nb.solution_cells:
                    snap.update_or_create_solution_cell(cell.name, nb.name, assignment)
                for cell in nb.task_cells:
                    snap.update_or_create_task_cell(
                        cell.name, nb.name, assignment, max_score=cell.max_score, cell_type=cell.cell_type
                    )
                for cell in nb.source_cells:
                    snap.update_or_create_source_cell(
                        cell.name,
                        nb.name,
                        assignment,
                        source=cell.source,
                        cell_type=cell.cell_type,
                        locked=cell.locked,
                        checksum=cell.checksum,
                    )
        return path.read_bytes()


def grader_error(notes: list[str]) -> bool:
    """Whether the notes say the grader itself failed (not the learner)."""
    return any(note.startswith(GRADER_PROBLEM) or note.startswith("Grader error") for note in notes)


def _resources(job: NotebookJob, db_url: str) -> dict[str, Any]:
    return {
        "nbgrader": {"student": job.student, "assignment": job.assignment, "notebook": job.notebook, "db_url": db_url},
        "metadata": {"path": job.autograded},
    }


class _Made:
    """Preprocessor instances of a recipe, made once per process and recipe (a worker grades many copies)."""

    cache: ClassVar[dict[tuple[str, str], list[Any]]] = {}

    @classmethod
    def of(cls, recipe: Recipe, which: str) -> list[Any]:
        key = (recipe.token, which)
        if key not in cls.cache:
            cls.cache[key] = [s.make() if isinstance(s, Step) else s for s in getattr(recipe, which)]
        return cls.cache[key]


def prepare(job: NotebookJob, recipe: Recipe, db_url: str, referees: Path | None) -> tuple[Prepared, Task | None]:
    """The notebook to run and the pool's task for it (None when it cannot run).

    ``db_url`` is the gradebook the sanitizing preprocessors read (the course's, or the
    recipe's snapshot on a worker); ``referees`` the folder with the measured tests' referees
    (the course directory, or where a worker wrote ``recipe.referees``). The task lacks only
    ``files``, which the caller fills in.
    """
    from grading.measure import measured_tests

    resources = _resources(job, db_url)
    try:
        item = sanitize_and_harden(job.data, recipe.spec, _Made.of(recipe, "sanitize"), resources)
        for preprocessor in _Made.of(recipe, "before_execute") if item.runnable else ():
            item.nb, resources = preprocessor(item.nb, resources)
    except Exception as error:  # nbgrader's own checks refused the notebook
        problem = f"{GRADER_PROBLEM}: could not prepare it ({type(error).__name__}: {error})."
        item = Prepared(stand_in(recipe.spec, "not graded"), [problem], False)
    item.notes = [*job.notes, *item.notes]
    if not item.runnable:
        return item, None
    measured, problems = measured_tests(item.nb, referees)  # test cells from the gradebook
    item.notes += problems
    return item, Task(with_grader_cells(item.nb), measured=tuple(measured))


def _collector() -> Any:
    """nbgrader's ``SaveAutoGrades`` without the gradebook: what it would write, collected for a batch.

    The cell dispatch (``preprocess_cell``: grade cells get a score, answers and tasks a
    comment) is nbgrader's own; the score is ``utils.determine_grade`` and the comment its
    checksum rule, as in ``SaveAutoGrades._add_score`` and ``_add_comment``. Needs-manual-grade
    depends on a manual score in the gradebook, so the coordinator decides it as it writes.
    """
    from nbgrader import utils
    from nbgrader.preprocessors import NbGraderPreprocessor, SaveAutoGrades

    class CollectAutoGrades(SaveAutoGrades):
        def preprocess(self, nb, resources):
            self.scores, self.comments = {}, {}
            return NbGraderPreprocessor.preprocess(self, nb, resources)  # the cells, no gradebook

        def _add_score(self, cell, resources):
            self.scores[cell.metadata["nbgrader"]["grade_id"]] = utils.determine_grade(cell, self.log)[0]

        def _add_comment(self, cell, resources):
            unchanged = cell.metadata.nbgrader.get("checksum", None) == utils.compute_checksum(cell)
            answered = not unchanged or utils.is_task(cell)
            self.comments[cell.metadata["nbgrader"]["grade_id"]] = None if answered else "No response."

    return CollectAutoGrades()


def finish(
    prepared: Prepared, result: Result | Mapping[str, Any] | None, recipe: Recipe, job: NotebookJob, db_url: str
) -> Outcome:
    """The autograded notebook and its grades from the pool's ``result`` (None: it did not run).

    ``result`` may be a ``Result``'s dict form. On a batched recipe nothing is written to the
    gradebook here; on a legacy one nbgrader's preprocessors record as they always do, into
    ``db_url`` (the coordinator's gradebook).
    """
    from grading.measure import flag_unmeasured, unmeasured
    from grading.sandbox.leaks import flagged_for_review

    notes = list(prepared.notes)
    seconds = 0.0
    if result is None:
        nb = prepared.nb
    else:
        result = Result.of(result)
        notes += result.notes
        seconds = result.seconds
        if result.nb is not None:
            nb = nbformat.from_dict(result.nb)
        else:
            nb = fail_all_tests(prepared.nb, f"grader error: {result.error}")
            notes.append(f"Grader error: {result.error}.")
    reviewed = flagged_for_review(nb)  # inconclusive hidden text in an output: read before the grader's metadata goes
    nb = without_grader_cells(nb, [])
    not_measured = unmeasured(nb)  # measured tests the grader could not measure: the instructor decides
    manual = list(dict.fromkeys([*not_measured, *reviewed]))
    resources = _resources(job, db_url)
    made = _Made.of(recipe, "after_execute")
    recorded: dict[str, Any] = {}  # what SaveAutoGrades and AssignLatePenalties leave to the coordinator
    try:
        for step, preprocessor in zip(recipe.after_execute, made, strict=True):
            if step == _RECORD:
                collect = _collector()
                nb, resources = collect(nb, resources)
                recorded.update(scores=collect.scores, comments=collect.comments, recorded=True, manual=manual)
            elif step == _LATE:
                recorded["late"] = True
            else:
                nb, resources = preprocessor(nb, resources)
        if not recipe.batched and manual:
            from nbgrader.api import Gradebook

            with Gradebook(db_url) as gb:
                flag_unmeasured(gb, manual, job.notebook, job.assignment, job.student)
    except Exception as error:  # the grades of this notebook may be incomplete: say so
        notes = [*notes, f"{GRADER_PROBLEM}: recording the grades failed ({type(error).__name__}: {error})."]
    nb = make_safe_to_read(nb)  # after recording: what a person's browser renders of the learner's cells
    if notes:
        nb.cells.insert(0, notes_cell(notes, nb))
    return Outcome(nbformat.writes(nb), notes, seconds, error=grader_error(notes), **recorded)
