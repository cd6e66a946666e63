"""A grading worker: a long-lived process that runs one notebook at a time (``python -I -m grading.sandbox.worker``).

Contract: ``serve()`` reads one ``grading.jobs.Job`` per line of stdin (JSON) and writes one
``grading.jobs.Result`` per line of stdout, as ``grading.sandbox.workers.WorkerPool`` feeds
it; ``run_job(job)`` grades one. A job may name a folder of the assignment's other files
(data, images): they are copied into the kernel's working directory first (notebooks and
symbolic links left out), as nbgrader runs a notebook beside them. A result holds the
executed notebook, the notes and the seconds taken. At the root level the kernels run as the
job's grading user, in a cpuset cgroup of that user's (``sandbox.cpus``) that loses every CPU
a measured test holds meanwhile, in this run or any other; there each kernel's CPU time,
which a cell's time limit counts, is read from a cgroup of the kernel's own
(``sandbox.cputime``), elsewhere from its process tree, and each kernel with every process it
starts is held to the job's memory budget (``sandbox.memory``). A measured test waits for a CPU of
its own (the wait is not part of its time budget). Workers start without importing torch.
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grading.guard import TOKEN_FILE
from grading.jobs import Job, MeasuredTest, Result
from grading.sandbox.cpus import join_job, reserve
from grading.sandbox.cputime import account
from grading.sandbox.memory import budget
from grading.sandbox.protections import (
    GRADING_UID_BASE,
    Protections,
    jail_argv,
    package_roots,
)

if TYPE_CHECKING:
    from nbformat import NotebookNode


__all__ = ["run_job", "serve"]

_MNT_DETACH = 2


_MS_BIND, _MS_REC = 4096, 16384


def _paths_to_keep() -> list[str]:
    """What the kernel needs that may live under /tmp: the interpreter, the venv, the package."""
    paths = {os.path.realpath(str(p)) for p in (sys.base_prefix, sys.prefix, *package_roots())}
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
    skipped: list[str] = []
    copied, used = 0, 0
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


def run_job(job: Job) -> Result:
    """Execute one notebook (called inside a worker)."""
    import nbformat  # here, not at the top: the pool's side starts workers without importing nbformat

    from grading.sandbox.execute import GRADER_PROBLEM, JailedKernelManager, execute, explain_limits
    from grading.sanitize import is_test

    started = time.monotonic()
    task, limits, protections = job.task, job.limits, Protections(job.level)
    uid = GRADING_UID_BASE + job.slot if protections.level == "root" else None
    if uid is not None:
        adopt_orphans()
        join_job(protections.level, uid)  # and every kernel it starts
    notes: list[str] = []
    files = _open_folder(task.files, unmount_tmp=job.private_tmp)
    private = job.private_tmp and _mount_private_tmp(limits.disk_bytes)
    base = Path(tempfile.mkdtemp(prefix="course-grade-"))
    base.chmod(0o711)
    workdir = base / "work"
    workdir.mkdir(mode=0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    if files is not None:
        try:
            # files a cluster's coordinator already left out come first ("skipped"), in its words
            skipped = [
                *task.skipped,
                *_copy_files(Path(f"/proc/self/fd/{files}"), workdir, uid, limits.disk_bytes // 2),
            ]
        finally:
            os.close(files)
        if skipped:
            shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
            notes.append(f"Not available to the notebook while grading: {shown}.")
    elif task.files:
        notes.append(f"{GRADER_PROBLEM}: the assignment's files in {task.files} could not be read.")
    nb = nbformat.from_dict(task.nb)
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
            hide=[Path(p) for p in job.hide],
            slot=job.slot,
        )
        cpu = account(protections.level)  # on cgroup v2 the memory budget is set on the same group
        memory = budget(protections.level, limits.job_memory_bytes, cpu.group)
        km.configure(jail, workdir, base / "kernel.log", cpu, memory)
        return km

    measured = task.measured
    wanted = {m["grade_id"] for m in measured}
    skip = frozenset(i for i, cell in enumerate(nb.cells) if is_test(cell) and _grade_id(cell) in wanted)
    try:
        execute(nb, new_kernel, limits, notes, token, skip)
        if uid is not None:
            _kill_user(uid)  # nothing of the kernel's may run during the timed rounds
        if measured:
            _measure(nb, measured, job, base, notes)
            explain_limits(nb, limits, notes)  # a measured run can hit a limit too
    finally:
        if uid is not None:
            _kill_user(uid)
        shutil.rmtree(base, ignore_errors=True)
    return Result(nb=nb, notes=tuple(notes), seconds=time.monotonic() - started, private_tmp=bool(private))


def _grade_id(cell: Mapping[str, Any]) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _measure(nb: NotebookNode, measured: Iterable[MeasuredTest], job: Job, base: Path, notes: list[str]) -> None:
    """Decide each measured test outside the kernel (``grading.measure``); every one gets outputs.

    The rounds run on a CPU this measurement holds (``cpus.reserve``): the wait for one is
    not charged to the time budget, which starts once it is held.
    """
    from grading.measure import Rounds, Verdict, answers_of, apply_verdict, run_referee
    from grading.sandbox.execute import GRADER_PROBLEM
    from grading.sandbox.rounds import starter
    from grading.sanitize import is_test

    limits, protections = job.limits, Protections(job.level)
    cells = {_grade_id(cell): cell for cell in nb.cells if is_test(cell)}
    uid = GRADING_UID_BASE + job.slot if protections.level == "root" else None
    with reserve(protections.level, job.slot, uid, wait=limits.measure_timeout * 3) as reservation:
        start = starter(protections, limits, [Path(p) for p in job.hide], job.slot, base, reservation)
        deadline = time.monotonic() + limits.measure_timeout
        for spec in measured:
            cell = cells.get(spec["grade_id"])
            if cell is None:
                continue
            try:
                if spec.get("source") is None:
                    raise FileNotFoundError(f"{spec['referee']}.py is not beside the course's nbgrader_config.py")
                rounds = Rounds(answers_of(nb, spec["answers"]), start, deadline, reservation.describe())
                outcome = run_referee(dict(spec), rounds)
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
        try:
            result = run_job(Job.from_json(line))
        except Exception as error:
            result = Result.failure(f"{type(error).__name__}: {error}")
        out.write(result.to_json() + "\n")
        out.flush()


if __name__ == "__main__":
    # jsonschema (under nbformat) imports rfc3987_syntax, if installed, for a format check no notebook
    # schema uses; building its grammar costs about 1.5 s of CPU per process (see cli.main).
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # None blocks the import (documented sys.modules use)
    serve()
