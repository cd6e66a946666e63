"""The one interface ``autograde`` grades through: a ``Pool`` of grading slots, local or on a cluster.

Contract: ``Pool`` is what ``grading.sandbox.workers.WorkerPool`` (grading workers on this
machine) and ``grading.cluster.ClusterPool`` (the worker threads of a Dask cluster) both
are, checked by mypy wherever one is passed as a ``Pool`` and at run time by ``isinstance``
(the protocol is ``runtime_checkable``). A pool is a context manager: entering starts or
connects its slots, leaving early (an exception) stops the jobs in flight. Then:

* ``jobs`` slots run one notebook each at a time; ``limits`` (settable until the first
  ``submit``) and ``protections`` say how; ``uids`` lists the grading users its kernels ran as;
* ``submit(task_id, task)`` queues a prepared notebook (``grading.jobs.Task``) whose result
  is a ``grading.jobs.Result``;
* ``remote`` says whether the slots are on other machines that prepare, grade and record a
  submitted notebook themselves from its recipe: only then does ``submit_notebook(task_id,
  job, recipe, folder)`` work, and its result is a ``grading.jobs.Outcome``. A local pool
  refuses it (``NotImplementedError``): the coordinator prepares notebooks for it;
* ``ready(timeout)`` returns the results finished so far, each once, waiting up to
  ``timeout`` seconds for a first one (None: until one comes); ``results()`` yields every
  result until none is out;
* ``describe()`` is what the command prints about where and how the notebooks run.

``threads_per_kernel`` is the rule both pools share for a kernel's threads: the machine's
cores over the grading slots on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from grading.jobs import NotebookJob, Outcome, Result, Task
from grading.sandbox.protections import Limits, Protections

if TYPE_CHECKING:
    from grading.pipeline import Recipe

__all__ = ["Finished", "Pool", "available_cores", "threads_per_kernel"]

Finished = tuple[str, Result | Outcome]
"""A finished job: (its task id, its result): a ``Result`` for ``submit``, an ``Outcome`` for ``submit_notebook``."""


@runtime_checkable
class Pool(Protocol):
    """Grading slots that run notebooks; see the module docstring."""

    jobs: int
    limits: Limits
    protections: Protections
    uids: list[int]
    remote: bool

    def __enter__(self) -> Pool: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def describe(self) -> str: ...

    def submit(self, task_id: str, task: Task | Mapping[str, Any]) -> None: ...

    def submit_notebook(self, task_id: str, job: NotebookJob, recipe: Recipe, folder: str) -> None: ...

    def ready(self, timeout: float | None = None) -> Sequence[Finished]: ...

    def results(self) -> Iterator[Finished]: ...


def available_cores() -> int:
    """The CPUs this process may run on (its affinity), or the machine's count where there is no affinity."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads_per_kernel(slots: int) -> int:
    """Threads for each kernel when ``slots`` notebooks run at once on this machine: its cores over them, at least 1."""
    return max(1, available_cores() // max(1, slots))
