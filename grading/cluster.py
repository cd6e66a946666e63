"""Grade on a Dask cluster: ``course autograde --scheduler ADDRESS``.

Contract: ``ClusterPool(address, sandbox, hide, security=...)`` is a grading pool with the
interface of ``sandbox.worker.WorkerPool`` (``jobs``, ``protections``, ``limits``, ``uids``,
``submit``, ``results``, a context manager), plus ``submit_notebook`` and ``ready``, so
``autograde`` grades a class on an existing ``dask.distributed`` cluster through its one code
path: the gradebook, the staging folders, the notes, the progress bar and a stop midway are
the same as on one machine. Importing this module does not import Dask (the ``cluster`` extra).

* **Connecting** (entering the pool): ``address`` is the scheduler's, as ``dask worker``
  takes it (``tls://host:8786``), or the JSON file ``dask scheduler --scheduler-file``
  writes. ``tls://`` needs ``security`` (``distributed.Security`` with the instructor's
  certificate: ``grading.certificates``): the scheduler and every worker must present a
  certificate of the course's own authority, and so must this process. A plain ``tcp://``
  address is refused unless it and the whole cluster behind it are on the loopback
  interface, or ``allow_plain`` (a private network the instructor controls): Dask's plain
  TCP has no authentication, so anyone who reaches the scheduler, or a worker, runs code on
  every worker. "Behind it" is read from the sockets, not from what Dask advertises: every
  socket the scheduler, each worker and each worker's nanny listen on (``listening``, from
  the operating system through psutil: the comm listeners and the HTTP servers) must be
  bound to a loopback address, and so must the advertised addresses. A scheduler bound to
  ``0.0.0.0`` but reached as ``127.0.0.1``, or a worker listening on every interface while
  it advertises ``127.0.0.1``, is refused with the address it is bound to. An unreachable scheduler, or one without
  a worker within ``timeout`` seconds, raises ``CourseError`` before anything is written.
* **Checking** (``environment``): every worker runs the same check as this process:
  Python, the platform, the versions of torch, numpy, nbgrader, nbformat, nbclient,
  ipykernel, jupyter-client, dask, distributed, cloudpickle, msgpack, course-grading and
  course-utils, and a hash of the ``grading`` and ``course_utils`` sources (an edited
  checkout differs). A worker that differs is refused with what differs; so is a worker
  where no sandbox works (level ``none``) unless ``sandbox`` is ``"none"``. A worker that
  joins later is checked by its first task, which refuses to grade (the run stops with the
  same message; what was graded is kept).
* **Grading**: each notebook is one Dask task that carries everything it needs: the
  assignment's other files (zipped here as the local worker would copy them,
  ``worker._copy_files``; what it would leave out is named in the job) and the limits, and
  either the submitted notebook with its ``pipeline.Recipe`` (``submit_notebook``: sent to
  each worker once; the worker prepares it, grades it and computes what nbgrader's recording
  preprocessors record, ``grade_notebook``) or a notebook this process prepared
  (``submit``, ``grade``). On the worker the task unpacks the files into a folder of its own
  under the worker's local directory and runs the job through a one-slot ``WorkerPool`` of
  the worker thread running it: a grading worker process started as locally, so each
  notebook gets the same jail, limits and guard; the kernel sees neither that directory nor
  the worker's TLS key. The result comes back here, fetched in batches (``ready``); only
  this process writes the gradebook and ``autograded/``.
* **Faults**: a worker that dies mid-task: the scheduler runs the task again on another
  (Dask's ``distributed.scheduler.allowed-failures``, 3 by default; past that the notebook
  is a grader error, as when a local grading worker dies). Each task's key names its job and
  a result is taken once per key, so nothing is recorded twice. Leaving the pool early
  (Ctrl-C, SIGTERM, an error) cancels every task; a running one notices within a second and
  kills its grading worker, and with it the kernel. If this process dies without leaving
  (``kill -9``), the scheduler releases its tasks when the connection drops, with the same
  effect.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import secrets
import shutil
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from grading.coursedir import CourseError, counted
from grading.sandbox.protections import Limits, Protections, detect

__all__ = [
    "PACKAGES",
    "ClusterPool",
    "WorkerRefused",
    "dask_listening",
    "differences",
    "environment",
    "grade",
    "listening",
]

PACKAGES = (
    "torch",
    "numpy",
    "nbgrader",
    "nbformat",
    "nbclient",
    "ipykernel",
    "jupyter-client",
    "course-grading",
    "course-utils",
    "dask",
    "distributed",
    "cloudpickle",
    "msgpack",
)
"""The distributions whose versions a worker must share with the coordinator."""

_SCATTER_BYTES = 1 << 20  # files larger than this go to the cluster once per submission, not inside each task
_POLL_SECONDS = 0.5  # how often a running task looks whether it was cancelled
_READY_POLL = 0.02  # how often the coordinator looks for finished tasks while it may not block
_LEVELS = ("none", "userns", "root")  # weakest first


class WorkerRefused(RuntimeError):
    """A worker whose environment differs from the coordinator's (the message says how)."""


class _Cancelled(RuntimeError):
    """The task was cancelled while it ran: its grading worker and kernel were killed."""


# -- the environment check ---------------------------------------------------------------------


def _source_hash(folder: Path | None, skip: tuple[str, ...] = ()) -> str:
    """A short hash of every ``.py`` file under ``folder`` (names and contents), ``skip`` folders left out."""
    if folder is None or not folder.is_dir():
        return "not installed"
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder)
        if relative.parts[0] in skip or "__pycache__" in relative.parts:
            continue
        digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _package_folder(name: str) -> Path | None:
    """Where a top-level package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def environment() -> dict[str, str]:
    """What decides a grade besides the submission: interpreter, platform, package versions, grader sources.

    ``grading/course/`` (a course directory, not code) is left out of the grader's hash: a
    course's referee travels with each job.
    """
    found = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": f"{sys.platform} {platform.machine()}",
    }
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["grading source"] = _source_hash(Path(__file__).resolve().parent, skip=("course",))
    found["course_utils source"] = _source_hash(_package_folder("course_utils"))
    return found


def differences(here: dict[str, str], there: dict[str, str]) -> list[str]:
    """What differs between two ``environment()`` s, in words: ``torch 2.12.0 there, 2.13.0 here``."""
    return [
        f"{key} {there.get(key, 'unknown')} there, {here.get(key, 'unknown')} here"
        for key in sorted(here.keys() | there.keys())
        if here.get(key) != there.get(key)
    ]


def _facts(sandbox: str, dask_worker: Any = None) -> dict[str, Any]:
    """A worker's environment, machine, sandbox and listening sockets (run on each worker by ``Client.run``)."""
    from distributed.comm import get_address_host

    protections = _protections(sandbox)
    _own.clear()  # the tasks of this run compare what was checked now (see _checked)
    _own.update(environment())
    return {
        "environment": dict(_own),
        "host": get_address_host(dask_worker.address),
        "cores": _cores(),
        "nthreads": dask_worker.state.nthreads,
        "level": protections.level,
        "notes": list(protections.notes),
        "listening": dask_listening(dask_worker),
    }


def listening(pid: int | None = None) -> list[str]:
    """Where process ``pid`` (this one by default) listens: ``host:port`` of each listening TCP socket, as the OS says.

    Read with psutil (``Process.net_connections``, status ``LISTEN``), so it covers every
    listener of the process, whatever opened it: Dask's comm listeners, its HTTP server
    (started with ``--no-dashboard`` too), a preload's. An IPv6 host is written in brackets.
    """
    import psutil

    found = set()
    for connection in psutil.Process(pid).net_connections(kind="inet"):
        if connection.status == psutil.CONN_LISTEN:
            host, port = connection.laddr[:2]
            found.add(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return sorted(found)


def dask_listening(dask_worker: Any = None) -> list[str]:
    """Where this Dask process listens, and, on a worker started by a nanny, where the nanny (its parent) listens.

    Run on the scheduler (``Client.run_on_scheduler``: no argument) and on each worker
    (``Client.run``, which passes ``dask_worker``). A nanny starts its worker as a child
    process (multiprocessing), so the parent is the nanny exactly when the worker has one.
    """
    found = listening()
    if dask_worker is not None and getattr(dask_worker, "nanny", None):
        found += listening(os.getppid())
    return sorted(set(found))


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_own: dict[str, str] = {}  # this worker's environment() as last checked: at connecting, else at its first task
_detected: dict[str, Protections] = {}


def _protections(sandbox: str) -> Protections:
    """The sandbox level this worker's machine allows (probed once per process and requested level)."""
    if sandbox not in _detected:
        _detected[sandbox] = detect(sandbox)
    return _detected[sandbox]


def _refusal(sandbox: str, facts: dict[str, Any], here: dict[str, str]) -> str | None:
    """Why a worker may not grade (None when it may)."""
    differ = differences(here, facts["environment"])
    if differ:
        return "its environment differs from this machine's: " + "; ".join(differ)
    if facts["level"] == "none" and sandbox != "none":
        return (
            "no sandbox works there (neither root nor user namespaces), so a submission could read the "
            "worker's files (its TLS key among them) and reach the Dask scheduler and every worker; run the "
            "worker as root or enable user namespaces, or pass --sandbox none knowingly"
        )
    return None


# -- files travel with the task ------------------------------------------------------------------


def pack_files(folder: str | None, budget: int) -> tuple[bytes, list[str]]:
    """The assignment's other files as a zip, chosen as a local worker would copy them, and what was left out.

    The choice is ``worker._copy_files``'s own (notebooks, checkpoints, symbolic links and
    everything past ``budget`` bytes or its file count stay out), made into a scratch folder
    that is zipped; the left-out list travels in the job, so the learner's note is the same.
    """
    from grading.sandbox.worker import _copy_files

    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="course-pack-") as scratch, zipfile.ZipFile(buffer, "w") as archive:
        skipped = _copy_files(Path(folder), Path(scratch), None, budget) if folder else []
        for path in sorted(Path(scratch).rglob("*")):
            name = path.relative_to(scratch).as_posix()
            if path.is_dir():
                archive.writestr(name + "/", b"")
            else:
                archive.write(path, name)
    return buffer.getvalue(), skipped


def unpack_files(blob: bytes, folder: Path) -> None:
    """Recreate a ``pack_files`` zip in ``folder``; a name that would land outside it is refused."""
    folder.mkdir(parents=True)
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for info in archive.infolist():
            name = PurePosixPath(info.filename)
            if name.is_absolute() or ".." in name.parts or not name.parts:
                raise ValueError(f"refusing a file named {info.filename!r} in the task's files")
            target = folder.joinpath(*name.parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(info))


# -- on a worker ---------------------------------------------------------------------------------

_local = threading.local()  # each Dask worker thread's one-slot grading pool


def _thread_pool(protections: Protections, hide: list[str]):  # -> WorkerPool
    """This thread's one-slot ``WorkerPool`` (its grading worker is started once, as a local worker is)."""
    from grading.sandbox.worker import WorkerPool

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


def _cancelled(worker: Any, key: str) -> bool:
    """Whether the scheduler has let go of this task (cancelled, or its client gone) or the worker is closing."""
    task = worker.state.tasks.get(key)
    return task is None or task.state in {"cancelled", "released"} or worker.status.name in {"closing", "closed"}


def _threads(worker: Any, host_slots: dict[str, int]) -> int:
    """Threads per kernel: this machine's cores over the grading slots on it (as ``cores // jobs`` locally)."""
    from distributed.comm import get_address_host

    slots = host_slots.get(get_address_host(worker.address)) or worker.state.nthreads
    return max(1, _cores() // max(1, slots))


def _checked(worker: Any, job: dict) -> None:
    """Refuse (``WorkerRefused``) to grade on a worker that differs from the coordinator or has no sandbox."""
    if not _own:
        _own.update(environment())
    facts = {"environment": _own, "level": _protections(job["sandbox"]).level}
    why = _refusal(job["sandbox"], facts, job["environment"])
    reachable = beyond_loopback([worker.address, *dask_listening(worker)]) if job.get("loopback_only") else []
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


def _execute(worker: Any, job: dict, task: dict, files: bytes | None, scratch: Path, key: str) -> dict:
    """Run one grading worker's job in this thread's one-slot pool, with the task's files unpacked; its result."""
    task = {**task, "files": None, "skipped": job["skipped"]}
    if files is not None:
        unpack_files(files, scratch / "files")
        task["files"] = str(scratch / "files")
    # the kernel sees neither the course (when it is on this machine), this worker's other tasks, nor its keys
    hide = [*job["hide"], worker.local_directory, *_secrets(worker)]
    pool = _thread_pool(_protections(job["sandbox"]), hide)
    pool.limits = Limits(**{**job["limits"], "threads": _threads(worker, job["host_slots"])})
    pool.submit("job", task)
    return _wait(pool, worker, key)


def _scratch(worker: Any) -> Path:
    root = Path(worker.local_directory) / "course-grading"
    root.mkdir(mode=0o700, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="task-", dir=root))


def grade(payload: bytes, files: bytes | None, key: bytes) -> dict:
    """The Dask task: grade one prepared notebook on this worker, as a local grading worker does; its result.

    ``payload`` is the job as JSON (bytes, so that Dask never reads its strings as task
    keys), ``files`` the zip of ``pack_files`` (None when it could not be read), ``key`` the
    task's own key. Raises ``WorkerRefused`` on a worker that differs from the coordinator.
    """
    from distributed import get_worker

    worker = get_worker()
    job = json.loads(payload)
    _checked(worker, job)
    scratch = _scratch(worker)
    try:
        task = {"nb": job["nb"], "measured": job["measured"]}
        return _execute(worker, job, task, files, scratch, key.decode())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


_recipe_lock = threading.Lock()


def _recipe_folder(worker: Any, recipe: Any) -> Path:
    """This worker's copy of a recipe's files: the gradebook snapshot and the referees (written once)."""
    folder = Path(worker.local_directory) / "course-grading" / f"recipe-{recipe.token}"
    with _recipe_lock:
        if not (folder / "ready").exists():
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            (folder / "gradebook.db").write_bytes(recipe.snapshot)
            for name, source in recipe.referees.items():
                (folder / f"{name}.py").write_text(source, encoding="utf-8")
            (folder / "ready").touch()
    return folder


def _recipe(recipe: Any) -> Any:
    """The task that holds a run's recipe on the cluster (its graph keeps a copy to make it again)."""
    return recipe


def grade_notebook(job: Any, payload: bytes, files: bytes | None, recipe: Any, key: bytes) -> Any:
    """The Dask task of a portable recipe: prepare, grade and record one submitted notebook here; its ``Outcome``.

    ``job`` is the ``pipeline.NotebookJob`` (the submitted bytes), ``payload`` the run's
    settings as JSON (limits, sandbox, hidden paths, the coordinator's environment),
    ``recipe`` the ``pipeline.Recipe`` (sent to each worker once). Preparing and finishing
    are ``grading.pipeline``'s, with the recipe's gradebook snapshot as the gradebook that
    nbgrader's sanitizing preprocessors read; the grading itself is ``grade``'s.
    """
    from distributed import get_worker

    from grading import pipeline

    worker = get_worker()
    settings = json.loads(payload)
    _checked(worker, settings)
    folder = _recipe_folder(worker, recipe)
    db_url = f"sqlite:///{folder / 'gradebook.db'}"
    prepared, task = pipeline.prepare(job, recipe, db_url, folder)
    result = None
    if task is not None:
        scratch = _scratch(worker)
        try:
            result = _execute(worker, settings, task, files, scratch, key.decode())
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return pipeline.finish(prepared, result, recipe, job, db_url)


def _wait(pool: Any, worker: Any, key: str) -> dict:
    """The job's result; if the task is cancelled meanwhile, its grading worker is killed and ``_Cancelled`` raised."""
    while True:
        found = pool.next_result(timeout=_POLL_SECONDS)
        if found is not None:
            return found[1]
        if _cancelled(worker, key):
            _kill_thread_pool()
            raise _Cancelled(f"task {key} was cancelled")


# -- the coordinator's side ----------------------------------------------------------------------


_PLAIN = {"tcp", "ws", "inproc", "ucx"}  # Dask protocols without encryption or authentication


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a host name: it may be anything
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return (mapped or address).is_loopback


def check_address(address: str, allow_plain: bool = False) -> str:
    """The protocol of ``address`` (``tls``, ``tcp``, ...); plain TCP beyond this machine only with ``allow_plain``.

    A ``tcp://`` scheduler has no authentication: whoever reaches its port runs any code
    on every worker. So it is refused unless its host is a loopback address (the cluster
    is this machine's) or the instructor says the network is private (``--allow-plain-tcp``).
    """
    from distributed.comm import parse_address

    protocol, location = parse_address(address)
    if protocol not in _PLAIN or allow_plain or protocol == "inproc":  # inproc: this very process
        return protocol
    if _is_loopback(_host(location)):
        return protocol
    raise _plain_refusal(protocol, location)


def _host(location: str) -> str:
    from distributed.comm import parse_address, parse_host_port

    if "://" in location:
        location = parse_address(location)[1]
    try:
        return parse_host_port(location)[0]
    except ValueError:
        return location


def _plain_refusal(protocol: str, location: str, why: str = "") -> CourseError:
    return CourseError(
        f"refusing {protocol}://{location}{why}: Dask's {protocol}:// connections are neither authenticated nor "
        "encrypted, so anyone who can reach the scheduler's port can run any code on every grading machine "
        "(as the user the workers run as, root for the root sandbox) and read the submissions in flight. "
        "Use mutual TLS: `course cluster-certs` makes the course's certificates and prints the `dask "
        f"scheduler` and `dask worker` flags, then run `course autograde --scheduler tls://{location}`. "
        "Only on a private network that nothing but the grading machines and yours can reach, "
        "--allow-plain-tcp grades over plain TCP anyway"
    )


def beyond_loopback(addresses: list[str]) -> list[str]:
    """Which of a cluster's addresses another machine could reach.

    Advertised addresses (``tcp://host:port``) or bound ones (``host:port``, ``listening``);
    a socket bound to every interface (``0.0.0.0``, ``[::]``) is reachable from other machines.
    """
    return sorted({a for a in addresses if not _is_loopback(_host(a))})


def scheduler_address(target: str) -> str:
    """The scheduler's address: ``target`` itself, or the ``address`` in a scheduler file."""
    if "://" in target or not (target.endswith(".json") or os.sep in target or Path(target).is_file()):
        return target
    path = Path(target)
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["address"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CourseError(
            f"cannot read the scheduler's address from {path} ({type(error).__name__}: {error}); "
            "give the file `dask scheduler --scheduler-file` wrote, or the address, e.g. tcp://host:8786"
        ) from error


class ClusterPool:
    """A Dask cluster as a grading pool (``WorkerPool``'s interface); see the module docstring."""

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
        self.workers: dict[str, dict[str, Any]] = {}  # address -> facts
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
            raise CourseError(
                "grading on a cluster needs Dask: install the grader's `cluster` extra "
                "(pip install 'course-grading[cluster]'; `make install` does)"
            ) from error
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
        answers = self._client.run(_facts, self.sandbox, on_error="return")
        problems = []
        for address, facts in sorted(answers.items()):
            if isinstance(facts, BaseException):
                why = f"the grader's check failed there ({type(facts).__name__}: {facts})"
                why += "; is the course's environment installed there?"
            else:
                why = _refusal(self.sandbox, facts, self._environment)
                self.workers[address] = facts
            if why:
                problems.append(f"worker {address} refused: {why}")
        if problems:
            raise CourseError("cannot grade on this cluster:\n  " + "\n  ".join(problems))
        if self._protocol in _PLAIN and not self.allow_plain:  # the address was loopback: is the whole cluster?
            self._check_loopback(answers)
        self.jobs = sum(f["nthreads"] for f in self.workers.values())
        for facts in self.workers.values():
            self._host_slots[facts["host"]] = self._host_slots.get(facts["host"], 0) + facts["nthreads"]
        weakest = min((f["level"] for f in self.workers.values()), key=_LEVELS.index)
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
        for address, facts in sorted(answers.items()):
            reachable += [f"worker {address} advertises {a}" for a in beyond_loopback([address])]
            reachable += [f"worker {address} listens on {a}" for a in beyond_loopback(facts["listening"])]
        if reachable:
            raise _plain_refusal(
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
        for level in _LEVELS[::-1]:
            at = sorted(a for a, f in self.workers.items() if f["level"] == level)
            if at:
                lines.append(f"sandbox on {', '.join(at)}:")
                notes = sorted({n for a in at for n in self.workers[a]["notes"]})
                lines += ["  " + line for line in Protections(level, tuple(notes)).describe().splitlines()]
        return "\n".join(lines)

    # -- the pool's interface -------------------------------------------------------------------

    def _settings(self, skipped: list[str]) -> dict:
        """What every task of this run carries besides its notebook."""
        return {
            "skipped": skipped,
            "limits": self.limits.to_dict(),
            "sandbox": self.sandbox,
            "hide": self.hide,
            "environment": self._environment,
            "host_slots": self._host_slots,
            "loopback_only": self._protocol in _PLAIN and not self.allow_plain,
        }

    def submit(self, task_id: str, task: dict) -> None:
        """Send a prepared job (``WorkerPool.submit``'s dict) to the cluster as one task."""
        files, skipped = self._files(task_id, task.get("files"))
        job = {"nb": task["nb"], "measured": task.get("measured") or [], **self._settings(skipped)}
        key = f"course-grade-{self._run}-{task_id}"
        future = self._client.submit(grade, json.dumps(job).encode(), files, key.encode(), key=key, pure=False)
        self._track(key, future, task_id)

    def submit_notebook(self, task_id: str, job: Any, recipe: Any, folder: str) -> None:
        """Send a submitted notebook (``pipeline.NotebookJob``) to be prepared, graded and recorded on a worker.

        The result (``results``, ``ready``) is a ``pipeline.Outcome``. The recipe goes to the
        cluster once and stays there for the run.
        """
        files, skipped = self._files(task_id, folder)
        if task_id in self._notes:  # the files could not be read here: the worker writes the note into the notebook
            job.notes = [*job.notes, *self._notes.pop(task_id)]
        if recipe.token not in self._recipes:  # a task, not scattered data: if its worker dies, it is made again
            key = f"course-recipe-{self._run}-{recipe.token}"
            self._recipes[recipe.token] = self._client.submit(_recipe, recipe, key=key, pure=False)
        settings = json.dumps(self._settings(skipped)).encode()
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

    def results(self) -> Iterator[tuple[str, dict]]:
        """(task id, result) of every submitted job, as they finish, each once."""
        while self._pending:
            yield from self.ready()

    def ready(self, timeout: float | None = None) -> list[tuple[str, Any]]:
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
        found = []
        for future in batch:
            task_id = self._ids.pop(future.key)
            result = values[future.key] if future.key in values else self._outcome(future)
            if isinstance(result, dict):  # a prepared job's result (an Outcome carries its notes in itself)
                result["notes"] = [*self._notes.pop(task_id, []), *result.get("notes", [])]
            del self._pending[future.key]
            future.release()
            found.append((task_id, result))
        return found

    def _outcome(self, future: Any) -> dict:
        """A finished task's result; a task that could not run becomes a grader error, a refusal stops the run."""
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        try:
            return dict(future.result())
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
        return {"error": f"the cluster could not grade it: {why}", "notes": [], "seconds": 0.0}

    def __exit__(self, exc_type, *exc_info) -> None:
        """Cancel what is left (a stop midway: each running task kills its kernel), then disconnect."""
        try:
            if self._pending:
                self._client.cancel(list(self._pending.values()), force=True, reason="course autograde stopped")
                self._pending.clear()
        finally:
            self._client.close()
