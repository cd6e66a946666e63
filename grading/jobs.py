"""What crosses a process or machine boundary to grade one notebook: ``Task``, ``Job``, ``Result``, and
``NotebookJob`` and ``Outcome``.

Contract: a caller hands a pool a ``Task`` (the notebook to run, the folder of the
assignment's other files, its measured tests); a local pool adds its slot's settings and
sends the grading worker process a ``Job`` as one JSON line (``Job.to_json``,
``Job.from_json``); the worker answers with a ``Result`` as one JSON line (``Result.to_json``,
``Result.from_json``). On a Dask cluster a ``Result`` travels pickled (a plain frozen
dataclass). The JSON forms are plain dicts with fixed keys (``to_dict``/``from_dict``), the
same a script may write by hand: ``Task.of`` and ``Result.of`` accept either form. The
types are immutable: a pool that adds to one makes a new one (``dataclasses.replace``).

A cluster grades a whole submitted notebook where it runs: the coordinator sends a
``NotebookJob`` (the submitted bytes) and gets back an ``Outcome`` (the autograded notebook's
text and what the gradebook gets), both pickled (``grading.pipeline`` makes one from the
other; ``grading.record`` writes the ``Outcome``). This module imports nothing heavier than
the sandbox's ``Limits``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grading.sandbox.protections import Limits

__all__ = ["Job", "MeasuredTest", "NotebookData", "NotebookJob", "Outcome", "Result", "Task"]

NotebookData = Mapping[str, Any]
"""A notebook as nbformat's plain JSON structure (a ``NotebookNode`` is one)."""

MeasuredTest = Mapping[str, Any]
"""One measured test as ``grading.measure.measured_tests`` describes it: grade_id, referee, source, answers."""


@dataclass(frozen=True)
class Task:
    """One notebook to run, as a caller gives it to a pool.

    ``files`` is the folder whose files (not its notebooks) go into the kernel's working
    directory (None: none); ``skipped`` names files a cluster's coordinator already left out
    of them (``_copy_files``'s words), reported with the ones left out where the task runs.
    """

    nb: NotebookData
    files: str | None = None
    measured: tuple[MeasuredTest, ...] = ()
    skipped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"nb": self.nb, "files": self.files, "measured": list(self.measured), "skipped": list(self.skipped)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        """From ``to_dict``'s form; only ``nb`` is required."""
        return cls(
            nb=data["nb"],
            files=data.get("files"),
            measured=tuple(data.get("measured") or ()),
            skipped=tuple(data.get("skipped") or ()),
        )

    @classmethod
    def of(cls, task: Task | Mapping[str, Any]) -> Task:
        """``task`` itself, or made from its dict form."""
        return task if isinstance(task, Task) else cls.from_dict(task)


@dataclass(frozen=True)
class Job:
    """What one grading worker process runs: a ``Task`` and the settings of the slot that runs it.

    ``slot`` picks the grading user (root level) and CPU cgroup; ``level`` is the sandbox
    level; ``hide`` the folders the kernel must not see; ``private_tmp`` whether the worker
    mounts a fresh ``/tmp`` for the job (it runs in a mount namespace of its own).
    """

    task: Task
    slot: int
    limits: Limits
    level: str
    hide: tuple[str, ...] = ()
    private_tmp: bool = False

    def to_dict(self) -> dict[str, Any]:
        """One flat dict (the task's keys and the slot's), as the worker reads it."""
        return {
            **self.task.to_dict(),
            "slot": self.slot,
            "limits": self.limits.to_dict(),
            "level": self.level,
            "hide": list(self.hide),
            "private_tmp": self.private_tmp,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        return cls(
            task=Task.from_dict(data),
            slot=int(data["slot"]),
            limits=Limits(**data["limits"]),
            level=str(data["level"]),
            hide=tuple(data.get("hide") or ()),
            private_tmp=bool(data.get("private_tmp", False)),
        )

    def to_json(self) -> str:
        """One line of JSON (no newline in it)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, line: str) -> Job:
        return cls.from_dict(json.loads(line))


@dataclass(frozen=True)
class Result:
    """What running a ``Task`` gave: the executed notebook, or why there is none.

    Exactly one of ``nb`` (the executed notebook, grader cells still in) and ``error`` (the
    grader's own failure, in words) is set. ``notes`` are for the learner's grading notes;
    ``seconds`` the wall time the job took; ``private_tmp`` whether it had a fresh ``/tmp``.
    """

    nb: NotebookData | None = None
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    error: str | None = None
    private_tmp: bool = False

    @classmethod
    def failure(cls, error: str) -> Result:
        """A job that produced no notebook (the worker died, the task could not run)."""
        return cls(error=error)

    def to_dict(self) -> dict[str, Any]:
        """``{"nb", "notes", "seconds", "private_tmp"}``, or ``{"error", "notes", "seconds"}`` for a failure."""
        if self.error is not None:
            return {"error": self.error, "notes": list(self.notes), "seconds": self.seconds}
        return {"nb": self.nb, "notes": list(self.notes), "seconds": self.seconds, "private_tmp": self.private_tmp}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        error = data.get("error")
        if error is None and data.get("nb") is None:
            error = "the grading worker returned no notebook"
        return cls(
            nb=None if error is not None else data.get("nb"),
            notes=tuple(data.get("notes") or ()),
            seconds=float(data.get("seconds") or 0.0),
            error=None if error is None else str(error),
            private_tmp=bool(data.get("private_tmp", False)),
        )

    @classmethod
    def of(cls, result: Result | Mapping[str, Any]) -> Result:
        """``result`` itself, or made from its dict form."""
        return result if isinstance(result, Result) else cls.from_dict(result)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, line: str) -> Result:
        return cls.from_dict(json.loads(line))


@dataclass(frozen=True)
class NotebookJob:
    """One submitted notebook to grade: who, what, its bytes, and notes the coordinator already has."""

    student: str
    assignment: str
    notebook: str
    data: bytes
    notes: tuple[str, ...] = ()
    autograded: str = ""  # the submission's autograded folder on the coordinator (nbgrader's resources)


@dataclass(frozen=True)
class Outcome:
    """A graded notebook: the autograded file's text and what the gradebook gets."""

    text: str
    notes: list[str]
    seconds: float = 0.0
    error: bool = False  # the grader (not the learner) failed on it
    scores: dict[str, float | None] = field(default_factory=dict)  # grade_id -> auto score (SaveAutoGrades)
    comments: dict[str, str | None] = field(default_factory=dict)  # grade_id -> auto comment (SaveAutoGrades)
    recorded: bool = False  # SaveAutoGrades ran: ``scores`` and ``comments`` are to be written
    manual: list[str] = field(default_factory=list)  # grade ids flagged for manual grading (unmeasured, leak review)
    late: bool = False  # AssignLatePenalties ran after it: the coordinator applies the course's penalty
