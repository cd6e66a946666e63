"""The grader's cgroup v2 subtree: its job groups, measurement groups and kernel groups (issue 29).

Contract. On a host that mounts only cgroup v2 (``cgroups.detect_layout() == "v2"``), every
group the grader makes is in one subtree ``R`` (``cgroups.SUBTREE``, ``course-grading``)
under the base ``cgroups.V2Layout.base()`` finds (the v2 root, or a group delegated to the
grader; nowhere else)::

    <base>/                          the v2 root, or a delegated group: +cpu +cpuset +memory +pids
      course-grader/                 (delegated base only) the processes that were in <base>
      course-grading/                R: +cpu +cpuset +memory +pids; cpu.weight 100 per job
        job-<uid>/                   a grading job: cpu.weight 100, cpuset.cpus every CPU no
                                     measurement holds, pids.max JOB_PIDS; +memory
          worker/                    the grading worker (and what it starts but its kernels)
          kernel-<pid>-<n>/          a kernel: cputime's CPU time, memory's memory.max
        measure-<uid>/               a measurement holding a CPU: cpuset.cpus that CPU only;
                                     its cpu.pressure is the ledger's; +memory
          worker/                    the measuring worker
          round-*/                   a round process and all it starts: cgroup.freeze, and
                                     memory's memory.max (the job's budget, shared)
        unheld-<uid>/                a measurement without a CPU of its own: a job's CPUs
        kernel-<pid>-<n>/            a kernel of a process not in a job (no worker)
        probe-*/                     cpus.isolation's real-time probe, for a moment

A group that enables a domain controller for its children holds no process (the kernel's
"no internal processes" rule): R and each job group hold only groups, which is why a job's
worker sits in the leaf ``worker`` and a delegated base's own processes move into the leaf
``course-grader`` (``subtree``) before the base gives its children any controller. So does a
measurement group's measuring worker: the group gives its round groups the memory controller
(each round process's budget, ``grading.sandbox.memory``) and no other (cpu and cpuset stay
the measurement's as a whole: its round processes share its CPU at real-time priority).

* ``subtree(create)``: R, made and given its controllers where ``create``, or None and why.
* ``job(root, uid)``, ``rebalance(root, keep)``, ``remove(group)``: the job groups, each
  with every CPU that no ``measure-*`` group holds (stale groups go), R weighing one default
  group per job (the grading jobs together weigh what one process per job would beside
  what else runs at R's level, as v1's ``cpu.shares`` do).
* ``measurement(root, uid, cpu)``: a ``measure-<uid>`` group holding ``cpu``, or with
  ``cpu`` None an ``unheld-<uid>`` group with the jobs' CPUs; ``enter``/``leave`` move the
  calling process in and back (its job's groups remade if pruned meanwhile).
* ``join``, ``leave_jobs``, ``take``: ``cpus.join_job``'s, ``cpus.leave_jobs``' and
  ``cpus.reserve``'s work on this tree; ``missing``: ``CpuIsolation.missing`` on a v2 host.
* ``kernel_parent()``: where ``cputime.account`` puts a kernel's group: this worker's job
  group, else R; None without a subtree (no group: the CPU time is read from ``/proc``).

The callers (``grading.sandbox.cpus``) hold ``cpus.LOCK`` around each change of R's
children but ``kernel_parent``'s. Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from grading.sandbox.cgroups import (
    LEAF,
    SUBTREE,
    V2Layout,
    add,
    enable,
    make,
    mount_point,
    own_group,
    populated,
    read,
    rmdir_when_empty,
)

__all__ = [
    "CONTROLLERS",
    "JOB_PIDS",
    "WORKER",
    "enter",
    "job",
    "join",
    "kernel_parent",
    "leave",
    "leave_jobs",
    "measurement",
    "missing",
    "rebalance",
    "remove",
    "subtree",
    "take",
]

CONTROLLERS = ("cpu", "cpuset", "memory", "pids")  # what the base and R give their children
WORKER = "worker"  # a job group's leaf for its worker
# pids.max of a job (and of a measurement) group: processes and threads of the whole group. RLIMIT_NPROC
# (Limits.processes, 256) already holds the grading user's own; the group also holds what the rlimit does not
# count (the root-owned worker and its threads, each jail's namespace processes before they drop to the user,
# a process of another user), so twice that: a learner's processes meet the rlimit first, and the group's
# bound holds whatever escapes it.
JOB_PIDS = 512

_ops = V2Layout()


def subtree(create: bool = True) -> tuple[Path | None, str]:
    """R (``<base>/course-grading``); with ``create``, made and given ``CONTROLLERS``. None and why where none is.

    With ``create`` on a delegated base, the processes in the base first move into its leaf
    ``course-grader`` (a group that gives its children a controller can hold none).
    """
    base, why = _ops.base()
    if base is None:
        return None, why
    root = base / SUBTREE
    if not create:
        return root, ""
    try:
        if (base / "cgroup.type").is_file() and read(base / "cgroup.procs").split():  # not the real root
            leaf = base / LEAF
            make(leaf)
            for pid in read(base / "cgroup.procs").split():
                with contextlib.suppress(ProcessLookupError):
                    add(leaf, int(pid))
        enable(base, CONTROLLERS)
        make(root)
        if "cpuset" in read(base / "cgroup.subtree_control").split():
            _ops.fill_cpuset(root, base)
        enable(root, CONTROLLERS)
    except OSError as error:
        return None, f"the grader's cgroup v2 subtree {root} could not be set up ({error})"
    return root, ""


def _mount() -> Path:
    mount = mount_point("cgroup2")
    if mount is None:
        raise OSError("no cgroup v2 hierarchy is mounted")
    return mount


def _configure(group: Path) -> None:
    """A new job or measurement group: the default weight, ``JOB_PIDS``."""
    if (group / "cpu.weight").is_file():
        _ops.set_weight(group, 1)
    if (group / "pids.max").is_file():
        (group / "pids.max").write_text(str(JOB_PIDS), encoding="ascii")


def job(root: Path, uid: int) -> Path:
    """``R/job-<uid>`` with its leaf ``worker``, made where missing; its CPUs are ``rebalance``'s. Lock held."""
    group = root / f"job-{uid}"
    if make(group):
        _configure(group)
        if "cpuset" in read(root / "cgroup.subtree_control").split():
            every = _ops.cpus(root)
            _ops.set_cpus(group, every - _held(root) or every)  # before it holds anything
        enable(group, ("memory",))  # the kernels' memory groups, beside the worker's leaf
    make(group / WORKER)
    return group


def join(root: Path, uid: int) -> bool:
    """Move this process into ``R/job-<uid>/worker`` (``job``, ``rebalance``); whether it could. Lock held."""
    try:
        group = job(root, uid)
        rebalance(root, keep=frozenset({group}))
        add(group / WORKER, os.getpid())
    except OSError:
        return False
    return True


def leave_jobs(root: Path, uids: list[int]) -> None:
    """Remove the job groups of ``uids`` once their processes are gone (up to a second each). Lock held."""
    for uid in uids:
        remove(root / f"job-{uid}", wait=1.0)
    rebalance(root)


def _held(root: Path) -> set[int]:
    held: set[int] = set()
    for group in root.glob("measure-*"):
        with contextlib.suppress(OSError):
            held |= _ops.cpus(group)
    return held


def remove(group: Path, wait: float = 0.0) -> bool:
    """Remove ``group`` and the groups below it once none holds a process (up to ``wait`` s); whether it is gone."""
    deadline = time.monotonic() + wait
    while populated(group) and time.monotonic() < deadline:
        time.sleep(0.02)
    if populated(group):
        return False
    with contextlib.suppress(OSError):
        for child in sorted((p for p in group.iterdir() if p.is_dir()), reverse=True):
            remove(child)
    return rmdir_when_empty(group)


def rebalance(root: Path, keep: frozenset[Path] = frozenset()) -> set[int]:
    """Every job (and unheld measurement) group gets every CPU no ``measure-*`` group holds; R weighs one default
    group per job; groups no process is in go, but ``keep``. Returns the CPUs held. Lock held."""
    cpuset = "cpuset" in read(root / "cgroup.subtree_control").split()
    every = _ops.cpus(root) if cpuset else set()
    held: set[int] = set()
    for group in sorted(root.glob("measure-*")):
        if group not in keep and remove(group):  # its worker died mid-measurement
            continue
        held |= _ops.cpus(group) if cpuset else set()
    rest = every - held or every  # never empty: a measurement leaves one CPU to the rest
    jobs = 0
    for group in sorted(root.glob("job-*")) + sorted(root.glob("unheld-*")):
        if group not in keep and remove(group):  # its run has ended
            continue
        jobs += group.name.startswith("job-")
        if cpuset:
            with contextlib.suppress(OSError):
                _ops.set_cpus(group, rest)
    if (root / "cpu.weight").is_file():
        _ops.set_weight(root, max(1, jobs))
    return held


def measurement(root: Path, uid: int, cpu: int | None) -> Path:
    """``R/measure-<uid>`` holding ``cpu`` alone, or (``cpu`` None) ``R/unheld-<uid>`` with the jobs' CPUs. Lock held.

    The measuring process goes into its leaf ``worker`` (``enter``), so that the group can give
    its round groups (``cpus.pausable_group``) the memory controller, and no other.
    """
    group = root / (f"measure-{uid}" if cpu is not None else f"unheld-{uid}")
    make(group)
    _configure(group)
    if cpu is not None:
        _ops.set_cpus(group, {cpu})
    make(group / WORKER)
    enable(group, ("memory",))  # before it holds a process: the round processes' memory budgets
    return group


def enter(root: Path, group: Path) -> Path:
    """Move this process into ``group``'s leaf ``worker`` (``measurement``'s); where it was. Lock held."""
    back = own_group(_mount(), "")
    add(group / WORKER, os.getpid())
    rebalance(root, keep=frozenset({group, back, back.parent}))  # where it goes back to stays, emptied or not
    return back


def take(
    root: Path,
    uid: int,
    preferred: int,
    hold: bool,
    deadline: float,
    locked: Callable[[], AbstractContextManager],
    poll: float,
) -> tuple[int | None, Path, Path]:
    """Wait (until ``deadline``, monotonic) for a CPU that leaves another to the jobs, then move into its group.

    Each look holds ``locked()``. Returns the CPU held (None: not held, where ``hold`` is
    False or none was free in time), the measurement's group (``measurement``) and where this
    process was (for ``leave``).
    """
    while True:
        with locked():
            free = sorted(_ops.cpus(root) - rebalance(root)) if hold else []
            cpu = (preferred if preferred in free else free[-1]) if len(free) >= 2 else None
            if cpu is not None or not hold or time.monotonic() > deadline:
                group = measurement(root, uid, cpu)
                return cpu, group, enter(root, group)
        time.sleep(poll)


def leave(root: Path, group: Path, back: Path) -> None:
    """Move this process back to ``back`` (its job's ``worker``, remade if pruned); ``group`` goes. Lock held."""
    if back.name == WORKER and back.parent.parent == root and back.parent.name.startswith("job-"):
        uid = back.parent.name.removeprefix("job-")
        if uid.isdigit():
            job(root, int(uid))
    add(back, os.getpid())
    remove(group, wait=2.0)  # its round processes, killed, take a moment to leave
    rebalance(root)


def kernel_parent() -> Path | None:
    """Where a kernel's group goes: the job group of this worker (in its ``worker`` leaf), else R; None: nowhere."""
    root, _ = subtree(create=False)
    if root is None:
        return None
    try:
        own = own_group(_mount(), "")
    except OSError:
        return None
    if own.name == WORKER and own.parent.parent == root and own.parent.name.startswith("job-"):
        return own.parent
    made, _ = subtree(create=True)
    return made


def missing(
    cpuset: Path | None, realtime: bool, shares: Path | None, freezer: Path | None, pressure: Path | None, why: str
) -> list[str]:
    """``CpuIsolation.missing`` on a cgroup v2 host: each protection of a measurement it lacks, and why."""
    gaps = [f"no cgroup v2 subtree for the grader's groups: {why}"] if why else []
    if cpuset is None:
        gaps.append(
            "no CPU of its own for a measured test (needs root and cgroup v2's cpuset controller in the grader's "
            "subtree): other jobs' processes can run on the measured CPU; disturbed rounds are measured again, or "
            "the test is left for manual grading"
        )
    if not realtime:
        gaps.append(
            "measured processes at normal priority (needs root, and a kernel that lets a real-time task into a "
            "cgroup v2 group with the cpu controller: built without CONFIG_RT_GROUP_SCHED): any load on the machine "
            "shares the measured CPU; disturbed rounds are measured again, or the test is left for manual grading"
        )
    if shares is None:
        gaps.append(
            "no CPU share per job (needs root and cgroup v2's cpu controller in the grader's subtree): a kernel "
            "that starts many processes takes a larger share of the CPUs from the other jobs' kernels"
        )
    if freezer is None:
        gaps.append(
            "the two sides of a measured round timed one after the other, each in its own process (needs root and "
            "cgroup v2's cgroup.freeze, Linux 5.2, to pause the idle side): where the machine's speed drifts, so "
            "does the ratio"
        )
    if pressure is None:
        gaps.append(
            "disturbance of a measured test estimated from CPU time (no cgroup v2 CPU pressure of a group, Linux "
            "5.13): an answer whose own processes compete with each other on a busy machine can be left for manual "
            "grading instead of measured"
        )
    return gaps
