"""The pool of grading workers on this machine: ``WorkerPool``, a ``grading.pool.Pool``.

Contract: ``WorkerPool(jobs, ...)`` starts ``jobs`` worker processes (``python -I -m
grading.sandbox.worker``, each in a mount namespace of its own when the sandbox level allows,
so that every job gets a fresh, size-limited ``/tmp``), fed from one queue: ``submit(task_id,
task)`` queues a ``grading.jobs.Task`` and ``ready``/``results`` return ``(task_id,
grading.jobs.Result)`` as jobs finish, in completion order (``run(tasks)`` does both for a
list of tasks, in their plain-dict form). A worker that dies mid-job is replaced and the job
reported as a grader error, never lost. At the root level each worker runs its kernels as a
grading user of its own, leased for the pool's life (``protections.SlotLease``), so
concurrent gradings never kill each other's kernels. What one worker does with a job is
``grading.sandbox.worker``'s.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from grading.jobs import Job, Result, Task
from grading.sandbox.cpus import leave_jobs
from grading.sandbox.protections import Limits, Protections, SlotLease, parent_death_signal, worker_prefix

if TYPE_CHECKING:
    from grading.pipeline import NotebookJob, Recipe

__all__ = ["WorkerPool"]


class WorkerPool:
    """``jobs`` grading workers on this machine, fed from one queue: a ``grading.pool.Pool``.

    As a context manager the workers start at once, so that they get ready while the
    caller is still preparing jobs: ``submit`` tasks, then take ``ready`` or ``results()``.
    ``run`` does both for a list of tasks in their plain-dict form, for scripts.
    """

    remote = False  # the coordinator prepares each notebook: submit_notebook is refused
    _DONE = None  # tells a feeding thread that no more jobs will come

    def __init__(self, jobs: int, protections: Protections, limits: Limits, hide: list[Path]):
        self.jobs = max(1, jobs)
        self.protections = protections
        self.limits = limits
        self.hide = tuple(str(p) for p in hide)
        self.uids: list[int] = []  # the grading users this pool's kernels ran as (root level)
        self._todo: queue.Queue[tuple[str, Task] | None] = queue.Queue()
        self._done: queue.Queue[tuple[str, Result]] = queue.Queue()
        self._submitted = 0
        self._threads: list[threading.Thread] = []
        self._lease: SlotLease | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="course-workers-", suffix=".log", delete=False)  # noqa: SIM115
        self._crashed = False
        self._workers: set[subprocess.Popen[str]] = set()
        self._stopping = False  # set when the caller stops early: workers are killed, not replaced

    def _start(self) -> subprocess.Popen[str]:
        # -I: no PYTHONPATH, user site or current directory decides what the worker imports.
        argv = [*worker_prefix(self.protections), sys.executable, "-I", "-m", "grading.sandbox.worker"]
        worker = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            preexec_fn=parent_death_signal(),
        )
        self._workers.add(worker)
        return worker

    def __enter__(self) -> WorkerPool:
        self._lease = SlotLease(self.jobs, self.protections.level == "root")
        if self.protections.level == "root":
            self.uids = self._lease.uids()
        self._threads = [threading.Thread(target=self._feed, args=(slot,), daemon=True) for slot in self._lease.slots]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:  # Ctrl-C, SIGTERM or an error: stop the jobs in flight instead of waiting
            self._stopping = True
            for worker in list(self._workers):
                worker.kill()  # its kernels die with it (the jail's parent-death signal, the PID namespace)
        for _ in self._threads:
            self._todo.put(self._DONE)
        for thread in self._threads:
            thread.join()
        leave_jobs(self.protections.level, self.uids)  # the workers are gone: their CPU cgroups go too
        if self._lease is not None:
            self._lease.release()
        self._log.close()
        if not self._crashed:
            os.unlink(self._log.name)

    def describe(self) -> str:
        """The sandbox the notebooks run in, for the command's first lines."""
        return self.protections.describe()

    def submit(self, task_id: str, task: Task | Mapping[str, Any]) -> None:
        """Queue a ``Task`` (or its dict form: ``{"nb", "files", "measured", "skipped"}``, only ``nb`` required).

        A cluster's task adds ``skipped``: the files its coordinator left out of the folder
        (``_copy_files``'s words), reported with the ones left out here.
        """
        self._submitted += 1
        self._todo.put((task_id, Task.of(task)))

    def submit_notebook(self, task_id: str, job: NotebookJob, recipe: Recipe, folder: str) -> None:
        """Refused: this pool's workers run prepared notebooks only (``remote`` is false)."""
        raise NotImplementedError("a local WorkerPool runs prepared notebooks: prepare here, then submit()")

    def results(self) -> Iterator[tuple[str, Result]]:
        """(task id, result) of every submitted task, as they finish."""
        while self._submitted:
            found = self.next_result()
            assert found is not None
            yield found

    def ready(self, timeout: float | None = None) -> list[tuple[str, Result]]:
        """The (task id, result) pairs finished so far, waiting up to ``timeout`` s for a first (None: until one)."""
        found = []
        item = self.next_result(timeout)
        while item is not None:
            found.append(item)
            item = self.next_result(0)
        return found

    def next_result(self, timeout: float | None = None) -> tuple[str, Result] | None:
        """The next finished task's (task id, result); None when none finishes within ``timeout`` seconds."""
        try:
            task_id, result = self._done.get(timeout=timeout)
        except queue.Empty:
            return None
        self._submitted -= 1
        if result.error == _DIED:
            self._crashed = True
            result = replace(result, error=f"{_DIED} (its log: {self._log.name})")
        return task_id, result

    def run(self, tasks: Iterable[tuple[str, Task | Mapping[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yield (task id, result as a dict: ``Result.to_dict``) for every (task id, task) as they finish."""
        tasks = list(tasks)
        self.jobs = min(self.jobs, max(1, len(tasks)))
        with self:
            for task_id, task in tasks:
                self.submit(task_id, task)
            for task_id, result in self.results():
                yield task_id, result.to_dict()

    def _job(self, task: Task, slot: int) -> Job:
        """What the slot's worker runs for ``task``, with the pool's settings as they are now."""
        return Job(task, slot, self.limits, self.protections.level, self.hide, self.protections.namespaces)

    def _feed(self, slot: int) -> None:
        worker = self._start()
        try:
            while True:
                item = self._todo.get()
                if item is None:
                    return
                task_id, task = item
                line = ""
                try:
                    assert worker.stdin is not None and worker.stdout is not None
                    worker.stdin.write(self._job(task, slot).to_json() + "\n")
                    worker.stdin.flush()
                    line = worker.stdout.readline()
                except (BrokenPipeError, OSError):
                    pass
                if line:
                    self._done.put((task_id, Result.from_json(line)))
                elif self._stopping:
                    return
                else:
                    self._done.put((task_id, Result.failure(_DIED)))
                    worker.kill()
                    worker.wait()
                    worker = self._start()
        finally:
            if worker.stdin:
                with contextlib.suppress(OSError):  # a killed worker's pipe
                    worker.stdin.close()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            self._workers.discard(worker)


_DIED = "the grading worker died"
