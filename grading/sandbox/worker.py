"""Grading workers: long-lived processes that each run one notebook at a time.

Contract: ``WorkerPool(jobs, ...)`` starts ``jobs`` worker processes (each in a mount
namespace of its own when the sandbox level allows, so that every job gets a fresh,
size-limited ``/tmp``) and ``pool.run(tasks)`` yields ``(task_id, result)`` as jobs finish,
in completion order. A job may name a folder of the assignment's other files (data,
images): they are copied into the kernel's working directory first (notebooks and
symbolic links left out), as nbgrader runs a notebook beside them. A result is a dict
with the executed notebook, the notes and the seconds taken; a worker that dies mid-job
is replaced and the job reported as a grader error, never lost. At the root level each
worker runs its kernels as a grading user of its own, leased for the pool's life
(``sandbox.SlotLease``), so concurrent gradings never kill each other's kernels, and in a
cpuset cgroup of that user's (``sandbox.cpus``) that loses every CPU a measured test holds
meanwhile, in this run or any other; there each kernel's CPU time, which a cell's time limit
counts, is read from a cgroup of the kernel's own (``sandbox.cputime``), elsewhere from its
process tree. A measured test waits for a CPU of its own (the wait is not part of its time
budget). Workers talk JSON lines over their stdin/stdout (``python -I -m
grading.sandbox.worker``); they start without importing torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from grading.guard import TOKEN_FILE
from grading.sandbox.cpus import join_job, leave_jobs, reserve
from grading.sandbox.cputime import account
from grading.sandbox.protections import (
    GRADING_UID_BASE,
    Limits,
    Protections,
    SlotLease,
    jail_argv,
    package_roots,
    parent_death_signal,
    worker_prefix,
)

__all__ = ["WorkerPool", "run_job"]

_MNT_DETACH = 2


_MS_BIND, _MS_REC = 4096, 16384


def _paths_to_keep() -> list[str]:
    """What the kernel needs that may live under /tmp: the interpreter, the venv, the package."""
    paths = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *package_roots())}
    return sorted(p for p in paths if p.startswith("/tmp/"))


_private_tmp_mounted = False  # this worker's previous job left its tmpfs on /tmp


def _unmount_private_tmp() -> None:
    """Take the previous job's tmpfs off /tmp (only ours: a real /tmp that is a mount stays)."""
    global _private_tmp_mounted
    if _private_tmp_mounted:
        ctypes.CDLL(None, use_errno=True).umount2(b"/tmp", _MNT_DETACH)
        _private_tmp_mounted = False


def _mount_private_tmp(size: int) -> bool:
    """A fresh size-limited tmpfs on /tmp, with the interpreter and package bound back in.

    Without the bind mounts, a checkout or virtual environment under /tmp (a CI clone, say)
    would vanish behind the new /tmp and no kernel could start.
    """
    global _private_tmp_mounted
    libc = ctypes.CDLL(None, use_errno=True)
    _unmount_private_tmp()  # the real /tmp shows again
    keep = {path: os.open(path, os.O_PATH) for path in _paths_to_keep()}
    try:
        if libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, f"size={size},mode=0711".encode()) != 0:
            return False
        _private_tmp_mounted = True
        for path, fd in keep.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            if libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, _MS_BIND | _MS_REC, None) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"bind {path} into the private /tmp: {os.strerror(errno)}")
        return True
    finally:
        for fd in keep.values():
            os.close(fd)


def _open_folder(path: str | None, unmount_tmp: bool) -> int | None:
    """A descriptor of ``path``, taken before this job's private ``/tmp`` hides it (None if unreadable).

    The previous job's ``/tmp`` is unmounted first, so that a folder under the real ``/tmp``
    (a course in a temporary directory) is the one opened.
    """
    if not path:
        return None
    if unmount_tmp:
        _unmount_private_tmp()
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None


def _kill_user(uid: int, wait: float = 5.0) -> None:
    """Kill whatever still runs as this slot's grading user (nothing else ever does), and wait until it is gone.

    Killed processes linger until the kernel has torn them down; the wait (up to ``wait``
    seconds, killing again what appears meanwhile) makes "gone" true before the next step,
    a timed round above all. "Gone" includes reaped: a zombie still counts against the
    user's process limit, which the next notebook on this slot must find whole. A kernel
    orphaned by its killed ``unshare`` is reaped here (see ``adopt_orphans``) instead of by
    the machine's init, on init's schedule (about 1.5 s per kernel on one container's).
    """
    deadline = time.monotonic() + wait
    while True:
        left = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}").st_uid == uid and not _reaped(int(entry)):
                        os.kill(int(entry), 9)
                        left.append(entry)
                except OSError:
                    pass
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.02)


def adopt_orphans() -> None:
    """Make this process the subreaper of its descendants: a kernel whose ``unshare`` was killed
    becomes our child (not init's), for ``_kill_user`` to reap at once."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reaped(pid: int) -> bool:
    """Reap ``pid`` if it is a zombie child of this process; whether it was."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # not a child of ours (or already reaped): only waiting helps
        return False


_PR_SET_CHILD_SUBREAPER = 36
_MAX_FILES = 10_000  # files copied into one kernel's working directory at most


def _copy_files(source: Path, workdir: Path, uid: int | None, budget: int) -> list[str]:
    """Copy the assignment's other files into the kernel's working directory; return what was left out.

    Notebooks, checkpoints and symbolic links stay out; so does everything past ``budget``
    bytes or ``_MAX_FILES`` files (a notebook validated in a crowded folder, say).
    """
    skipped, copied, used = [], 0, 0
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.suffix == ".ipynb" or ".ipynb_checkpoints" in relative.parts:
            continue
        if path.is_symlink():
            skipped.append(f"{relative} (a symbolic link)")
            continue
        target = workdir / relative
        if path.is_dir():
            target.mkdir(exist_ok=True)
        elif path.is_file():
            size = path.stat().st_size
            if copied >= _MAX_FILES or used + size > budget:
                skipped.append(f"{relative} (over the {_MAX_FILES} files or {budget >> 20} MB copied at most)")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(path, target)
            except OSError as error:
                skipped.append(f"{relative} ({error.strerror or error})")
                continue
            copied, used = copied + 1, used + size
        if uid is not None and target.exists():
            os.chown(target, uid, uid)
    return skipped


def run_job(job: dict) -> dict:
    """Execute one notebook (called inside a worker)."""
    import nbformat  # here, not at the top: the pool's side starts workers without importing nbformat

    from grading.sandbox.execute import GRADER_PROBLEM, JailedKernelManager, execute, explain_limits
    from grading.sanitize import is_test

    started = time.monotonic()
    limits = Limits(**job["limits"])
    protections = Protections(job["level"])
    if protections.level == "root":
        adopt_orphans()
        join_job(protections.level, GRADING_UID_BASE + job["slot"])  # and every kernel it starts
    notes: list[str] = []
    files = _open_folder(job.get("files"), unmount_tmp=job.get("private_tmp", False))
    private = job.get("private_tmp", False) and _mount_private_tmp(limits.disk_bytes)
    base = Path(tempfile.mkdtemp(prefix="course-grade-"))
    base.chmod(0o711)
    workdir = base / "work"
    workdir.mkdir(mode=0o700)
    uid = GRADING_UID_BASE + job["slot"] if protections.level == "root" else None
    if uid is not None:
        os.chown(workdir, uid, uid)
    if files is not None:
        try:
            # files a cluster's coordinator already left out come first ("skipped"), in its words
            skipped = [
                *job.get("skipped", []),
                *_copy_files(Path(f"/proc/self/fd/{files}"), workdir, uid, limits.disk_bytes // 2),
            ]
        finally:
            os.close(files)
        if skipped:
            shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
            notes.append(f"Not available to the notebook while grading: {shown}.")
    elif job.get("files"):
        notes.append(f"{GRADER_PROBLEM}: the assignment's files in {job['files']} could not be read.")
    nb = nbformat.from_dict(job["nb"])
    token = secrets.token_hex(16)

    def new_kernel() -> JailedKernelManager:
        secret = workdir / TOKEN_FILE  # the preamble reads and deletes it before any learner code runs
        secret.write_text(token, encoding="ascii")
        secret.chmod(0o600)
        if uid is not None:
            os.chown(secret, uid, uid)
        km = JailedKernelManager(kernel_name="python3")
        connection = workdir / "kernel.json"
        connection.unlink(missing_ok=True)
        jail = jail_argv(
            protections,
            limits,
            workdir=workdir,
            connection_file=connection,
            hide=[Path(p) for p in job["hide"]],
            slot=job["slot"],
        )
        km.configure(jail, workdir, base / "kernel.log", account(protections.level))
        return km

    measured = job.get("measured") or []
    wanted = {m["grade_id"] for m in measured}
    skip = frozenset(i for i, cell in enumerate(nb.cells) if is_test(cell) and _grade_id(cell) in wanted)
    try:
        execute(nb, new_kernel, limits, notes, token, skip)
        if protections.level == "root":
            _kill_user(GRADING_UID_BASE + job["slot"])  # nothing of the kernel's may run during the timed rounds
        if measured:
            _measure(nb, measured, job, limits, protections, base, notes)
            explain_limits(nb, limits, notes)  # a measured run can hit a limit too
    finally:
        if protections.level == "root":
            _kill_user(GRADING_UID_BASE + job["slot"])
        shutil.rmtree(base, ignore_errors=True)
    return {"nb": nb, "notes": notes, "seconds": time.monotonic() - started, "private_tmp": bool(private)}


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _measure(
    nb, measured: list[dict], job: dict, limits: Limits, protections: Protections, base: Path, notes: list[str]
) -> None:
    """Decide each measured test outside the kernel (``grading.measure``); every one gets outputs.

    The rounds run on a CPU this measurement holds (``cpus.reserve``): the wait for one is
    not charged to the time budget, which starts once it is held.
    """
    from grading.measure import Rounds, Verdict, answers_of, apply_verdict, run_referee
    from grading.sandbox.execute import GRADER_PROBLEM
    from grading.sandbox.rounds import starter
    from grading.sanitize import is_test

    cells = {_grade_id(cell): cell for cell in nb.cells if is_test(cell)}
    uid = GRADING_UID_BASE + job["slot"] if protections.level == "root" else None
    with reserve(protections.level, job["slot"], uid, wait=limits.measure_timeout * 3) as reservation:
        start = starter(protections, limits, [Path(p) for p in job["hide"]], job["slot"], base, reservation)
        deadline = time.monotonic() + limits.measure_timeout
        for spec in measured:
            cell = cells.get(spec["grade_id"])
            if cell is None:
                continue
            try:
                if spec.get("source") is None:
                    raise FileNotFoundError(f"{spec['referee']}.py is not beside the course's nbgrader_config.py")
                rounds = Rounds(answers_of(nb, spec["answers"]), start, deadline, reservation.describe())
                outcome = run_referee(spec, rounds)
            except Exception as error:  # the referee's own failure: the learner gains no points from it
                why = f"{type(error).__name__}: {error}"
                outcome = AssertionError(f"{GRADER_PROBLEM}: the referee of this test failed ({why})")
                notes.append(f"{GRADER_PROBLEM}: measuring `{spec['grade_id']}` failed ({why}).")
            if isinstance(outcome, Verdict) and outcome.needs_manual_grade:
                notes.append(
                    f"{GRADER_PROBLEM}: `{spec['grade_id']}` could not be measured (other work kept taking the "
                    f"measured CPU); it keeps the {outcome.points:g} points decided without timing and is "
                    "flagged for manual grading (its output says what was measured)."
                )
            apply_verdict(cell, outcome)


def serve() -> None:
    """Worker main loop: one JSON job per stdin line, one JSON result per stdout line."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints go to the log, never into the result stream
    logging.disable(logging.CRITICAL)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            result = run_job(job)
        except Exception as error:
            result = {"error": f"{type(error).__name__}: {error}", "notes": [], "seconds": 0.0}
        out.write(json.dumps(result) + "\n")
        out.flush()


class WorkerPool:
    """``jobs`` grading workers fed from one queue.

    As a context manager the workers start at once, so that they get ready while the
    caller is still preparing jobs: ``submit`` jobs, then iterate ``results()``. ``run``
    does both for a list of jobs.
    """

    _DONE = None  # tells a feeding thread that no more jobs will come

    def __init__(self, jobs: int, protections: Protections, limits: Limits, hide: list[Path]):
        self.jobs = max(1, jobs)
        self.protections = protections
        self.limits = limits
        self.hide = [str(p) for p in hide]
        self.uids: list[int] = []  # the grading users this pool's kernels ran as (root level)
        self._todo: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._submitted = 0
        self._threads: list[threading.Thread] = []
        self._lease: SlotLease | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="course-workers-", suffix=".log", delete=False)  # noqa: SIM115
        self._crashed = False
        self._workers: set[subprocess.Popen] = set()
        self._stopping = False  # set when the caller stops early: workers are killed, not replaced

    def _start(self) -> subprocess.Popen:
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

    def __exit__(self, exc_type, *exc_info) -> None:
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

    def submit(self, task_id: str, task: dict) -> None:
        """Queue a job: ``{"nb": notebook dict, "files": folder or None, "measured": grading.measure jobs}``.

        A cluster's job adds ``"skipped"``: the files its coordinator left out of the folder
        (``_copy_files``'s words), reported with the ones left out here.
        """
        self._submitted += 1
        self._todo.put((task_id, task))

    def results(self) -> Iterator[tuple[str, dict]]:
        """(task id, result) of every submitted job, as they finish."""
        while self._submitted:
            found = self.next_result()
            assert found is not None
            yield found

    def next_result(self, timeout: float | None = None) -> tuple[str, dict] | None:
        """The next finished job's (task id, result); None when none finishes within ``timeout`` seconds."""
        try:
            task_id, result = self._done.get(timeout=timeout)
        except queue.Empty:
            return None
        self._submitted -= 1
        if result.get("error") == "the grading worker died":
            self._crashed = True
            result["error"] += f" (its log: {self._log.name})"
        return task_id, result

    def run(self, tasks: list[tuple[str, dict]]) -> Iterator[tuple[str, dict]]:
        """Yield (task id, result) for every (task id, job) as they finish."""
        self.jobs = min(self.jobs, max(1, len(tasks)))
        with self:
            for task_id, task in tasks:
                self.submit(task_id, task)
            yield from self.results()

    def _feed(self, slot: int) -> None:
        worker = self._start()
        try:
            while True:
                item = self._todo.get()
                if item is self._DONE:
                    return
                task_id, task = item
                job = {
                    "nb": task["nb"],
                    "files": task.get("files"),
                    "measured": task.get("measured") or [],
                    "skipped": task.get("skipped") or [],
                    "slot": slot,
                    "limits": self.limits.to_dict(),
                    "level": self.protections.level,
                    "hide": self.hide,
                    "private_tmp": self.protections.namespaces,
                }
                line = ""
                try:
                    assert worker.stdin is not None and worker.stdout is not None
                    worker.stdin.write(json.dumps(job) + "\n")
                    worker.stdin.flush()
                    line = worker.stdout.readline()
                except (BrokenPipeError, OSError):
                    pass
                if line:
                    self._done.put((task_id, json.loads(line)))
                elif self._stopping:
                    return
                else:
                    self._done.put((task_id, {"error": "the grading worker died", "notes": [], "seconds": 0.0}))
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


if __name__ == "__main__":
    # jsonschema (under nbformat) imports rfc3987_syntax, if installed, for a format check no notebook
    # schema uses; building its grammar costs about 1.5 s of CPU per process (see cli.main).
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]
    serve()
