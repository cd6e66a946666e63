"""What runs on a Dask worker: the check of the worker, and the tasks that grade one notebook each.

Contract: the coordinator (``grading.cluster.pool``) sends these functions by reference;
the worker imports this module from its own copy of the grader (the environment check makes
sure it is the same):

* ``facts(sandbox, dask_worker)`` (``Client.run``): the worker's ``environment()``, host,
  cores, threads, sandbox level and listening sockets;
* ``grade(task, settings, files, key)``: one prepared notebook (``jobs.Task`` as JSON) run as a
  local grading worker runs it; returns a ``jobs.Result``;
* ``grade_notebook(job, settings, files, recipe, key)``: one submitted notebook
  (``jobs.NotebookJob``) prepared, run and recorded with its ``pipeline.Recipe``
  (``hold_recipe`` keeps the recipe on the cluster for the run); returns a ``jobs.Outcome``.

Every task first checks its worker against the coordinator's ``TaskSettings`` and raises
``WorkerRefused`` (which stops the run) where it may not grade. It unpacks the task's files
into a folder of its own under the worker's local directory and runs the job through a
one-slot ``WorkerPool`` of the worker thread running it, so each notebook gets the same jail,
limits and guard as on one machine; the kernel sees neither that directory nor the worker's
TLS key. A task whose key the scheduler lets go of (cancelled, its client gone) notices
within ``POLL_SECONDS`` and kills its grading worker, and with it the kernel.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from grading.cluster.addresses import beyond_loopback, dask_listening
from grading.cluster.environment import environment, refusal
from grading.cluster.files import unpack_files
from grading.jobs import NotebookJob, Outcome, Result, Task
from grading.pool import available_cores, threads_per_kernel
from grading.sandbox.protections import Limits, Protections, detect

if TYPE_CHECKING:
    from grading.pipeline import Recipe

__all__ = ["POLL_SECONDS", "TaskSettings", "WorkerRefused", "facts", "grade", "grade_notebook", "hold_recipe"]

POLL_SECONDS = 0.5  # how often a running task looks whether it was cancelled


class WorkerRefused(RuntimeError):
    """A worker whose environment differs from the coordinator's (the message says how).

    Raised on the worker; the coordinator turns it into a ``CourseError`` that stops the run.
    """


class _Cancelled(RuntimeError):
    """The task was cancelled while it ran: its grading worker and kernel were killed."""


@dataclass(frozen=True)
class TaskSettings:
    """What every task of a run carries besides its notebook; JSON bytes on the way (Dask reads no keys in them).

    ``skipped``: the files ``pack_files`` left out of this task's zip; ``limits``: the run's
    (``threads`` is decided on the worker); ``sandbox``: the level asked for; ``hide``: folders
    no kernel may see; ``environment``: the coordinator's; ``host_slots``: grading slots per
    machine; ``loopback_only``: the cluster was accepted as this machine's alone.
    """

    skipped: tuple[str, ...]
    limits: Limits
    sandbox: str
    hide: tuple[str, ...]
    environment: dict[str, str]
    host_slots: dict[str, int]
    loopback_only: bool

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> TaskSettings:
        values = json.loads(payload)
        return cls(
            skipped=tuple(values["skipped"]),
            limits=Limits(**values["limits"]),
            sandbox=str(values["sandbox"]),
            hide=tuple(values["hide"]),
            environment=dict(values["environment"]),
            host_slots={str(k): int(v) for k, v in values["host_slots"].items()},
            loopback_only=bool(values["loopback_only"]),
        )


# -- the worker's state: its environment as checked, its sandbox level, each thread's pool -----------


class _OneSlot(Protocol):
    """What a task needs of its thread's grading pool (a one-slot ``WorkerPool``)."""

    limits: Limits

    def submit(self, task_id: str, task: Task) -> None: ...

    def next_result(self, timeout: float | None = None) -> tuple[str, Result] | None: ...


_own: dict[str, str] = {}  # this worker's environment() as last checked: at connecting, else at its first task
_detected: dict[str, Protections] = {}
_local = threading.local()  # each Dask worker thread's one-slot grading pool


def _protections(sandbox: str) -> Protections:
    """The sandbox level this worker's machine allows (probed once per process and requested level)."""
    if sandbox not in _detected:
        _detected[sandbox] = detect(sandbox)
    return _detected[sandbox]


def facts(sandbox: str, dask_worker: Any = None) -> dict[str, Any]:
    """A worker's environment, machine, sandbox and listening sockets (run on each worker by ``Client.run``)."""
    from distributed.comm import get_address_host

    protections = _protections(sandbox)
    _own.clear()  # the tasks of this run compare what was checked now (see _checked)
    _own.update(environment())
    return {
        "environment": dict(_own),
        "host": get_address_host(dask_worker.address),
        "cores": available_cores(),
        "nthreads": dask_worker.state.nthreads,
        "level": protections.level,
        "notes": list(protections.notes),
        "listening": dask_listening(dask_worker),
    }


def _thread_pool(protections: Protections, hide: list[str]) -> _OneSlot:
    """This thread's one-slot ``WorkerPool`` (its grading worker is started once, as a local worker is)."""
    from grading.sandbox.workers import WorkerPool

    wanted = (protections, tuple(hide))
    pool = getattr(_local, "pool", None)
    if pool is not None and _local.wanted != wanted:  # another course's run: another hide list
        _local.pool = None
        pool.__exit__(None, None, None)
        pool = None
    if pool is None:
        pool = WorkerPool(1, protections, Limits(), [Path(p) for p in hide]).__enter__()
        _local.pool, _local.wanted = pool, wanted
    return pool


def _kill_thread_pool() -> None:
    """Kill this thread's grading worker, and so the kernel it runs; the next task starts a new one."""
    pool = getattr(_local, "pool", None)
    _local.pool = None
    if pool is not None:
        pool.__exit__(_Cancelled, _Cancelled(), None)


# -- checks ---------------------------------------------------------------------------------------


def _cancelled(worker: Any, key: str) -> bool:
    """Whether the scheduler has let go of this task (cancelled, or its client gone) or the worker is closing."""
    task = worker.state.tasks.get(key)
    return task is None or task.state in {"cancelled", "released"} or worker.status.name in {"closing", "closed"}


def _threads(worker: Any, host_slots: dict[str, int]) -> int:
    """Threads per kernel: this machine's cores over the grading slots on it (as ``cores // jobs`` locally)."""
    from distributed.comm import get_address_host

    return threads_per_kernel(host_slots.get(get_address_host(worker.address)) or worker.state.nthreads)


def _checked(worker: Any, settings: TaskSettings) -> None:
    """Refuse (``WorkerRefused``) to grade on a worker that differs from the coordinator or has no sandbox."""
    if not _own:
        _own.update(environment())
    why = refusal(settings.sandbox, _protections(settings.sandbox).level, _own, settings.environment)
    reachable = beyond_loopback([worker.address, *dask_listening(worker)]) if settings.loopback_only else []
    if not why and reachable:
        why = (
            f"it joined a plain-TCP cluster reachable from other machines (at {', '.join(reachable)}; use TLS, "
            "or start it with --host 127.0.0.1 --dashboard-address 127.0.0.1:0, or --allow-plain-tcp on a "
            "private network)"
        )
    if why:
        raise WorkerRefused(f"worker {worker.address} refused: {why}")


def _secrets(worker: Any) -> list[str]:
    """The folders of this worker's TLS certificate and key, which no kernel may read."""
    security = getattr(worker, "security", None)
    if security is None:
        return []
    tls = security.get_tls_config_for_role("worker")
    files = [tls.get(k) for k in ("cert", "key", "ca_file")]
    return sorted({str(Path(f).resolve().parent) for f in files if f and "\n" not in f})


# -- running one notebook -------------------------------------------------------------------------


def _scratch(worker: Any) -> Path:
    root = Path(worker.local_directory) / "course-grading"
    root.mkdir(mode=0o700, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="task-", dir=root))


def _execute(worker: Any, settings: TaskSettings, task: Task, files: bytes | None, scratch: Path, key: str) -> Result:
    """Run one task in this thread's one-slot pool, with the task's files unpacked; its result."""
    task = replace(task, files=None, skipped=settings.skipped)
    if files is not None:
        unpack_files(files, scratch / "files")
        task = replace(task, files=str(scratch / "files"))
    # the kernel sees neither the course (when it is on this machine), this worker's other tasks, nor its keys
    hide = [*settings.hide, worker.local_directory, *_secrets(worker)]
    pool = _thread_pool(_protections(settings.sandbox), hide)
    pool.limits = replace(settings.limits, threads=_threads(worker, settings.host_slots))
    pool.submit("job", task)
    return _wait(pool, worker, key)


def _wait(pool: _OneSlot, worker: Any, key: str) -> Result:
    """The job's result; if the task is cancelled meanwhile, its grading worker is killed and ``_Cancelled`` raised."""
    while True:
        found = pool.next_result(timeout=POLL_SECONDS)
        if found is not None:
            return found[1]
        if _cancelled(worker, key):
            _kill_thread_pool()
            raise _Cancelled(f"task {key} was cancelled")


def grade(task: bytes, settings: bytes, files: bytes | None, key: bytes) -> Result:
    """The Dask task: grade one prepared notebook on this worker, as a local grading worker does; its result.

    ``task`` is the ``Task`` as JSON and ``settings`` the ``TaskSettings`` (bytes, so that
    Dask never reads their strings as task keys), ``files`` the zip of ``pack_files`` (None
    when it could not be read), ``key`` the task's own key. Raises ``WorkerRefused`` on a
    worker that differs from the coordinator.
    """
    from distributed import get_worker

    worker = get_worker()
    run = TaskSettings.from_json(settings)
    _checked(worker, run)
    scratch = _scratch(worker)
    try:
        return _execute(worker, run, Task.from_dict(json.loads(task)), files, scratch, key.decode())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


_recipe_lock = threading.Lock()


def _recipe_folder(worker: Any, recipe: Recipe) -> Path:
    """This worker's copy of a recipe's files: the gradebook snapshot and the referees (written once)."""
    folder = Path(worker.local_directory) / "course-grading" / f"recipe-{recipe.token}"
    with _recipe_lock:
        if not (folder / "ready").exists():
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            (folder / "gradebook.db").write_bytes(recipe.snapshot or b"")
            for name, source in recipe.referees.items():
                (folder / f"{name}.py").write_text(source, encoding="utf-8")
            (folder / "ready").touch()
    return folder


def hold_recipe(recipe: Recipe) -> Recipe:
    """The task that holds a run's recipe on the cluster (its graph keeps a copy to make it again)."""
    return recipe


def grade_notebook(job: NotebookJob, settings: bytes, files: bytes | None, recipe: Recipe, key: bytes) -> Outcome:
    """The Dask task of a portable recipe: prepare, grade and record one submitted notebook here; its ``Outcome``.

    ``settings`` are the run's ``TaskSettings`` as JSON, ``recipe`` the ``pipeline.Recipe``
    (sent to each worker once, ``hold_recipe``). Preparing and finishing are
    ``grading.pipeline``'s, with the recipe's gradebook snapshot as the gradebook that
    nbgrader's sanitizing preprocessors read; the grading itself is ``grade``'s.
    """
    from distributed import get_worker

    from grading import pipeline

    worker = get_worker()
    run = TaskSettings.from_json(settings)
    _checked(worker, run)
    folder = _recipe_folder(worker, recipe)
    db_url = f"sqlite:///{folder / 'gradebook.db'}"
    prepared, task = pipeline.prepare(job, recipe, db_url, folder)
    result = None
    if task is not None:
        scratch = _scratch(worker)
        try:
            result = _execute(worker, run, task, files, scratch, key.decode())
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return pipeline.finish(prepared, result, recipe, job, db_url)
