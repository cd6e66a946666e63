"""``ClusterPool``: a Dask cluster as a ``grading.pool.Pool``, seen from the coordinator.

Contract: ``ClusterPool(address, sandbox, hide, timeout=..., security=..., allow_plain=...)``
is a ``Pool`` whose slots are the worker threads of an existing ``dask.distributed`` cluster
(``remote`` is true), so ``autograde`` grades a class there through its one code path.

* **Connecting** (entering the pool): ``address`` is the scheduler's, or its scheduler file
  (``addresses.scheduler_address``). ``tls://`` needs ``security`` (``distributed.Security``
  with the instructor's certificate: ``grading.certificates``): the scheduler and every worker
  must present a certificate of the course's own authority, and so must this process. A plain
  ``tcp://`` address is refused unless it and the whole cluster behind it are on the loopback
  interface, or ``allow_plain`` (``addresses``): "behind it" is read from the sockets, not from
  what Dask advertises: every socket the scheduler, each worker and each worker's nanny listen
  on must be bound to a loopback address, and so must the advertised addresses. An
  unreachable scheduler, or one without a worker within ``timeout`` seconds, raises
  ``CourseError`` before anything is written; so does a missing Dask (``DaskMissing``).
* **Checking**: every worker reports its ``tasks.facts``; one whose environment differs from
  this process's (``environment``) is refused with what differs, and so is one where no
  sandbox works (level ``none``) unless ``sandbox`` is ``"none"``. A worker that joins later is
  checked by its first task, whose ``WorkerRefused`` stops the run (what was graded is kept).
* **Grading**: each notebook is one Dask task that carries everything it needs: the
  assignment's other files (``files.pack_files``; large zips are scattered once per
  submission), the ``tasks.TaskSettings``, and either a prepared ``Task`` (``submit``:
  ``tasks.grade``, a ``Result`` back) or the submitted ``NotebookJob`` with its
  ``pipeline.Recipe`` (``submit_notebook``: ``tasks.grade_notebook``, an ``Outcome`` back; the
  recipe goes to the cluster once per run). Results are fetched in batches (``ready``); only
  this process writes the gradebook and ``autograded/``.
* **Faults**: a worker that dies mid-task: the scheduler runs the task again on another
  (Dask's ``distributed.scheduler.allowed-failures``, 3 by default; past that the notebook is
  a grader error, as when a local grading worker dies). Each task's key names its job and a
  result is taken once per key, so nothing is recorded twice. Leaving the pool early (Ctrl-C,
  SIGTERM, an error) cancels every task; a running one notices within a second and kills its
  grading worker, and with it the kernel. If this process dies without leaving (``kill -9``),
  the scheduler releases its tasks when the connection drops, with the same effect.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from grading.cluster.addresses import (
    PLAIN,
    beyond_loopback,
    check_address,
    dask_listening,
    plain_refusal,
    scheduler_address,
)
from grading.cluster.environment import LEVELS, environment, refusal
from grading.cluster.files import pack_files
from grading.cluster.tasks import TaskSettings, WorkerRefused, facts, grade, grade_notebook, hold_recipe
from grading.coursedir import counted
from grading.errors import CourseError
from grading.jobs import NotebookJob, Outcome, Result, Task
from grading.sandbox.protections import Limits, Protections

if TYPE_CHECKING:
    from grading.pipeline import Recipe

__all__ = ["ClusterPool", "DaskMissing"]

_SCATTER_BYTES = 1 << 20  # files larger than this go to the cluster once per submission, not inside each task
_READY_POLL = 0.02  # how often the coordinator looks for finished tasks while it may not block


class DaskMissing(CourseError):
    """Grading on a cluster without Dask installed (the grader's ``cluster`` extra)."""

    def __init__(self) -> None:
        super().__init__(
            "grading on a cluster needs Dask: install the grader's `cluster` extra "
            "(pip install 'course-grading[cluster]'; `make install` does)"
        )


class ClusterPool:
    """A Dask cluster as a grading ``Pool``; see the module docstring."""

    remote = True  # the workers prepare and record a notebook themselves: submit_notebook works

    def __init__(
        self,
        address: str,
        sandbox: str = "auto",
        hide: list[Path] | None = None,
        timeout: float = 30.0,
        security: Any = None,
        allow_plain: bool = False,
    ):
        self.address = address
        self.sandbox = sandbox
        self.hide = [str(p) for p in hide or []]
        self.timeout = timeout
        self.security = security  # distributed.Security (the instructor's certificate), or None for Dask's config
        self.allow_plain = allow_plain
        self.jobs = 0  # worker threads of the cluster, once connected
        self.limits = Limits()  # ``threads`` is decided on each worker (its cores over its machine's slots)
        self.protections = Protections("none")  # the weakest worker's level, once connected
        self.uids: list[int] = []  # grading users are leased on the workers' machines
        self.workers: dict[str, dict[str, Any]] = {}  # address -> its tasks.facts
        self._client: Any = None
        self._completed: Any = None
        self._environment: dict[str, str] = {}
        self._host_slots: dict[str, int] = {}
        self._run = secrets.token_hex(4)
        self._pending: dict[str, Any] = {}  # task key -> future
        self._ids: dict[str, str] = {}  # task key -> the caller's task id
        self._notes: dict[str, list[str]] = {}  # task id -> notes of this side (files unreadable)
        self._packed: tuple[str | None, Any, list[str]] | None = None  # the last folder packed
        self._recipes: dict[str, Any] = {}  # recipe token -> its future on the cluster
        self._protocol = ""

    # -- connecting -----------------------------------------------------------------------------

    def __enter__(self) -> ClusterPool:
        try:
            from distributed import Client, as_completed
        except ImportError as error:
            raise DaskMissing() from error
        address = scheduler_address(self.address)
        protocol = self._protocol = check_address(address, self.allow_plain)
        encrypted = protocol in {"tls", "wss"}
        if encrypted and self.security is None:
            raise CourseError(
                f"{address} needs the course's TLS certificate: run `course cluster-certs` (in the course "
                "directory) and start the scheduler and workers with the flags it prints, or set Dask's "
                "distributed.comm.tls options"
            )
        try:
            security = self.security if encrypted else None  # Dask refuses a plain address with TLS required
            self._client = Client(address, timeout=self.timeout, set_as_default=False, security=security)
        except (OSError, TimeoutError, ValueError, TypeError) as error:
            hint = "is `dask scheduler` running there, and is the address right?"
            if protocol in {"tls", "wss"}:
                hint += " Were the scheduler and this machine's certificates made by the same `course cluster-certs`?"
            raise CourseError(
                f"cannot reach the Dask scheduler at {address} within {self.timeout:g} s "
                f"({type(error).__name__}: {error}); {hint}"
            ) from error
        try:
            self._check()
        except BaseException:
            self._client.close()
            raise
        self._completed = as_completed(loop=self._client.loop)
        return self

    def _check(self) -> None:
        """Wait for a worker, then refuse the run if any worker may not grade (every reason named)."""
        try:
            self._client.wait_for_workers(1, timeout=self.timeout)
        except TimeoutError as error:
            raise CourseError(
                f"the Dask scheduler at {self._client.scheduler.address} has no worker after {self.timeout:g} s: "
                "start `dask worker ADDRESS --nthreads 1` on the grading machines"
            ) from error
        self._environment = environment()
        answers = self._client.run(facts, self.sandbox, on_error="return")
        problems = []
        for address, found in sorted(answers.items()):
            why: str | None
            if isinstance(found, BaseException):
                why = f"the grader's check failed there ({type(found).__name__}: {found})"
                why += "; is the course's environment installed there?"
            else:
                why = refusal(self.sandbox, found["level"], found["environment"], self._environment)
                self.workers[address] = found
            if why:
                problems.append(f"worker {address} refused: {why}")
        if problems:
            raise CourseError("cannot grade on this cluster:\n  " + "\n  ".join(problems))
        if self._loopback_only:  # the address was loopback: is the whole cluster?
            self._check_loopback(answers)
        self.jobs = sum(f["nthreads"] for f in self.workers.values())
        for found in self.workers.values():
            self._host_slots[found["host"]] = self._host_slots.get(found["host"], 0) + found["nthreads"]
        weakest = min((f["level"] for f in self.workers.values()), key=LEVELS.index)
        notes = sorted({n for f in self.workers.values() if f["level"] == weakest for n in f["notes"]})
        self.protections = Protections(weakest, tuple(notes))

    def _check_loopback(self, answers: dict[str, Any]) -> None:
        """Refuse a plain-TCP cluster any of whose processes another machine could reach (bound or advertised)."""
        scheduler = self._client.scheduler_info()["address"]
        reachable = [f"the scheduler advertises {a}" for a in beyond_loopback([scheduler])]
        try:
            bound = self._client.run_on_scheduler(dask_listening)
        except Exception as error:  # the scheduler's side runs the grader's function: it needs the course's environment
            raise CourseError(
                f"cannot read where the Dask scheduler at {scheduler} listens ({type(error).__name__}: {error}); "
                "start it from the course's environment (its .venv/bin/dask), or use TLS"
            ) from error
        reachable += [f"the scheduler listens on {a}" for a in beyond_loopback(bound)]
        for address, found in sorted(answers.items()):
            reachable += [f"worker {address} advertises {a}" for a in beyond_loopback([address])]
            reachable += [f"worker {address} listens on {a}" for a in beyond_loopback(found["listening"])]
        if reachable:
            raise plain_refusal(
                self._protocol,
                self._client.scheduler.address.split("://", 1)[-1],
                f" (the cluster behind it is reachable from other machines: {'; '.join(reachable)}; start it as "
                "grading/README.md says for this machine alone: `dask scheduler --host 127.0.0.1 --dashboard-address "
                "127.0.0.1:8787` and `dask worker --host 127.0.0.1 --dashboard-address 127.0.0.1:0`)",
            )

    def describe(self) -> str:
        """The cluster and each worker's sandbox, for the command's first lines."""
        lines = [
            f"cluster: {self._client.scheduler.address}, {counted(len(self.workers), 'worker')}, "
            f"{counted(self.jobs, 'notebook')} at a time"
        ]
        for level in LEVELS[::-1]:
            at = sorted(a for a, f in self.workers.items() if f["level"] == level)
            if at:
                lines.append(f"sandbox on {', '.join(at)}:")
                notes = sorted({n for a in at for n in self.workers[a]["notes"]})
                lines += ["  " + line for line in Protections(level, tuple(notes)).describe().splitlines()]
        return "\n".join(lines)

    # -- the pool's interface -------------------------------------------------------------------

    @property
    def _loopback_only(self) -> bool:
        """Whether the cluster was accepted as this machine's alone (plain TCP on the loopback interface)."""
        return self._protocol in PLAIN and not self.allow_plain

    def _settings(self, skipped: list[str]) -> bytes:
        """What every task of this run carries besides its notebook, as ``TaskSettings``' JSON."""
        return TaskSettings(
            skipped=tuple(skipped),
            limits=self.limits,
            sandbox=self.sandbox,
            hide=tuple(self.hide),
            environment=self._environment,
            host_slots=self._host_slots,
            loopback_only=self._loopback_only,
        ).to_json()

    def submit(self, task_id: str, task: Task | Mapping[str, Any]) -> None:
        """Send a prepared ``Task`` (or its dict form) to the cluster as one task; its result is a ``Result``."""
        task = Task.of(task)
        files, skipped = self._files(task_id, task.files)
        payload = json.dumps(Task(task.nb, measured=task.measured).to_dict()).encode()
        key = f"course-grade-{self._run}-{task_id}"
        future = self._client.submit(grade, payload, self._settings(skipped), files, key.encode(), key=key, pure=False)
        self._track(key, future, task_id)

    def submit_notebook(self, task_id: str, job: NotebookJob, recipe: Recipe, folder: str) -> None:
        """Send a submitted notebook to be prepared, graded and recorded on a worker.

        The result (``results``, ``ready``) is an ``Outcome``. The recipe goes to the
        cluster once and stays there for the run.
        """
        files, skipped = self._files(task_id, folder)
        if task_id in self._notes:  # the files could not be read here: the worker writes the note into the notebook
            job = replace(job, notes=(*job.notes, *self._notes.pop(task_id)))
        if recipe.token not in self._recipes:  # a task, not scattered data: if its worker dies, it is made again
            key = f"course-recipe-{self._run}-{recipe.token}"
            self._recipes[recipe.token] = self._client.submit(hold_recipe, recipe, key=key, pure=False)
        settings = self._settings(skipped)
        key = f"course-grade-{self._run}-{task_id}"
        future = self._client.submit(
            grade_notebook, job, settings, files, self._recipes[recipe.token], key.encode(), key=key, pure=False
        )
        self._track(key, future, task_id)

    def _track(self, key: str, future: Any, task_id: str) -> None:
        self._pending[key], self._ids[key] = future, task_id
        self._completed.add(future)

    def _files(self, task_id: str, folder: str | None) -> tuple[Any, list[str]]:
        """The zip of ``folder`` (packed once for a submission's notebooks, sent ahead when large)."""
        if self._packed is None or self._packed[0] != folder:
            try:
                blob, skipped = pack_files(folder, self.limits.disk_bytes // 2)
            except OSError:
                blob, skipped = None, []
            if blob is not None and len(blob) > _SCATTER_BYTES:
                blob = self._client.scatter(blob, hash=False)
            self._packed = (folder, blob, skipped)
        _, blob, skipped = self._packed
        if blob is None:
            from grading.sandbox.execute import GRADER_PROBLEM

            self._notes[task_id] = [f"{GRADER_PROBLEM}: the assignment's files in {folder} could not be read."]
        return blob, skipped

    def results(self) -> Iterator[tuple[str, Result | Outcome]]:
        """(task id, result) of every submitted job, as they finish, each once."""
        while self._pending:
            yield from self.ready()

    def ready(self, timeout: float | None = None) -> list[tuple[str, Result | Outcome]]:
        """(task id, result) of the jobs finished, each once: waiting up to ``timeout`` s for a first (None: for ever).

        The finished tasks' results are fetched together (one request per worker), not one
        by one: at a thousand notebooks a minute the round trips were the coordinator's work.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._pending and not self._completed.has_ready():
            if deadline is not None and time.monotonic() >= deadline:
                return []
            time.sleep(_READY_POLL)
        if not self._pending:
            return []
        batch = [f for f in self._completed.next_batch(block=True) if f.key in self._ids]
        done = [f for f in batch if f.status == "finished"]
        try:
            values = dict(zip([f.key for f in done], self._client.gather(done), strict=True))
        except Exception:  # a result lost meanwhile (its worker died): each future says what happened to it
            values = {}
        found: list[tuple[str, Result | Outcome]] = []
        for future in batch:
            task_id = self._ids.pop(future.key)
            result = values[future.key] if future.key in values else self._outcome(future)
            if isinstance(result, Result):  # a prepared job's result (an Outcome carries its notes in itself)
                result = replace(result, notes=(*self._notes.pop(task_id, []), *result.notes))
            del self._pending[future.key]
            future.release()
            found.append((task_id, result))
        return found

    def _outcome(self, future: Any) -> Result | Outcome:
        """A finished task's result; a task that could not run becomes a grader error, a refusal stops the run."""
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        try:
            result: Result | Outcome = future.result()
            return result
        except WorkerRefused as refused:
            raise CourseError(f"{refused}; the submissions graded so far are kept") from refused
        except FutureCancelledError as error:
            raise CourseError(
                f"the Dask scheduler dropped the grading tasks ({error}); the submissions graded so far are kept, "
                "run the command again to grade the rest"
            ) from error
        except KilledWorker as error:
            why = f"every Dask worker that took it died ({error})"
        except Exception as error:  # the task's own failure on the worker: a grader error for this notebook
            why = f"{type(error).__name__}: {error}"
        return Result.failure(f"the cluster could not grade it: {why}")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Cancel what is left (a stop midway: each running task kills its kernel), then disconnect."""
        try:
            if self._pending:
                self._client.cancel(list(self._pending.values()), force=True, reason="course autograde stopped")
                self._pending.clear()
        finally:
            self._client.close()
