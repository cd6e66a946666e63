"""Grade a class as ``nbgrader autograde`` would, in parallel jailed kernels, with hardening on top.

Contract: ``autograde(course, jobs=N)`` grades every ``submitted/<student>/<assignment>/``
of an assignment in the gradebook, following nbgrader's ``Autograde`` converter step by
step and using nbgrader's own preprocessors, configured by the course's
``nbgrader_config.py``, wherever no kernel is involved:

1. per submission (this process): the student is created (``Autograde.create_student``),
   the submission recorded with its ``timestamp.txt``, the submission's other files and
   then the source's (data, images; ``exclude_overwriting`` kept) copied to
   ``autograded/<student>/<assignment>/``, unknown notebooks skipped and missing ones
   given 0, as nbgrader does (``grading.staging``); the gradebook part for many submissions
   in one transaction (``grading.record``);
2. per notebook: ``sanitize.sanitize_and_harden`` (nbgrader's sanitizing preprocessors, then the
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

The parts, each a module: which submissions (``grading.submissions``), nbgrader's converter
as configured (``grading.converter``), the autograded folders (``grading.staging``), the
run in this process (``grading.coordinator``), what the run came to (``grading.summary``);
the pool that runs the notebooks is a ``grading.pool.Pool``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

from grading.converter import default_limits, refuse_no_execute
from grading.coordinator import Run
from grading.coursedir import Course
from grading.pool import Pool, threads_per_kernel
from grading.sandbox.protections import Limits, Protections, detect
from grading.sandbox.workers import WorkerPool
from grading.staging import stale
from grading.submissions import Submission, find_submissions, matching_notebooks, notebook_glob
from grading.summary import Graded, Summary

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

_CHUNK = 64  # submissions recorded in one transaction before their notebooks are sent


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
    pool: Pool | None = None,
    notebooks: str | None = None,
) -> Summary:
    """Grade every matching submission; see the module docstring.

    ``pool`` is a started ``grading.pool.Pool`` to use: a ``WorkerPool`` (the command starts
    one before importing this module, so that the workers get ready meanwhile), or a
    connected ``grading.cluster.ClusterPool`` to grade on a Dask cluster; by default one of
    ``jobs`` workers is started first thing. ``notebooks`` is nbgrader's ``--notebook`` glob
    (default: the config's ``CourseDirectory.notebook_id``, ``*``): only the notebooks it
    matches are graded and written; the others' autograded files stay.
    """
    from sqlalchemy.exc import SAWarning

    selection = _Selection(assignments, students, notebooks, force)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's gradebook warns about its own session use
        if pool is not None:
            return _autograde(course, pool, limits, selection, progress)
        protections = protections or detect()
        hide = course.hidden_paths()
        with WorkerPool(jobs, protections, Limits(), hide) as started:  # the workers get ready meanwhile
            return _autograde(course, started, limits, selection, progress)


@dataclass(frozen=True)
class _Selection:
    """What to grade: nbgrader's ``--assignment``, ``--student``, ``--notebook`` and ``--force``."""

    assignments: list[str] | None
    students: list[str] | None
    notebooks: str | None
    force: bool


def _autograde(course: Course, pool: Pool, limits: Limits | None, selection: _Selection, progress: bool) -> Summary:
    started = time.monotonic()
    submissions, ignored = find_submissions(course, selection.assignments, selection.students, selection.notebooks)
    glob = notebook_glob(course, selection.notebooks)
    limits = limits or default_limits(course)
    # one kernel thread per core is enough: the workers use the cores
    pool.limits = Limits(**{**limits.to_dict(), "threads": threads_per_kernel(pool.jobs)})
    summary = Summary(protections=pool.protections, ignored=ignored)
    todo = [s for s in submissions if selection.force or stale(course, s, glob)]
    summary.skipped = [s for s in submissions if s not in todo]
    bar = _progress(sum(len(matching_notebooks(s.notebooks, glob)) for s in todo), progress)
    run = Run(course, summary, pool, glob, bar)
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
                for key, result in pool.ready(0):
                    run.receive(key, result)
            run.flush(final=run.idle())
        while run.sent:
            with clock.phase("wait"):
                ready = pool.ready(run.batch.patience())
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


def _progress(total: int, enabled: bool) -> Any:
    """A tqdm progress bar of ``total`` notebooks (disabled when not ``enabled`` or nothing to grade)."""
    from tqdm import tqdm

    return tqdm(total=total, desc="autograde", unit="nb", disable=not enabled or total == 0)
