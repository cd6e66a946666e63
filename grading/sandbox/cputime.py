"""The CPU time a grading kernel and every process it starts have used: what a cell's time limit counts.

Contract: ``account(level)`` makes a ``CpuAccount`` for one kernel before it starts. The
kernel's ``preexec_fn`` calls ``join()`` (in the child, before anything of the kernel
runs); once it has started, ``attach(pid)`` names its first process; ``used()`` is the CPU
seconds (user and system) that the kernel's processes have used, never decreasing;
``waited()`` the seconds its threads spent ready to run but waiting for a CPU (the machine's
load); ``close()``, once the kernel is gone, removes what ``account`` made. ``CellClock`` reads
one cell's share of both. Where the time is read,
and what a cell can hide from it:

* **a cgroup of its own** (``exact``; the ``root`` level, where cgroup v1's ``cpuacct`` or a
  cgroup v2 hierarchy is writable): on v1 and hybrid hosts made inside this process's own
  group of that hierarchy (so whatever limits apply to it still apply to the kernel); on a
  host that mounts only cgroup v2, in the grader's own subtree (``grading.sandbox.cgroup2``):
  beside a worker's leaf in its job group (so the kernel keeps its job's CPUs, weight and
  process bound), else in ``course-grading`` itself, and nowhere where the grader has no
  subtree (a systemd service without delegation: the process tree below). It is joined
  before the kernel runs, so every process the kernel starts is born inside; the grading
  user cannot write a cgroup file, so none can leave. The kernel charges CPU time to the
  group as it is used: a process that exits, is killed or daemonises itself stays counted.
* **the process tree in /proc** (every other level, or where joining failed): at each
  ``used()``, the user and system time of every process under ``pid`` (all its threads),
  plus what its reaped children used (``cutime``, ``cstime``). A process gone since the last
  look counts as last seen, and what its parent reaps of it is not counted twice. With a PID
  namespace (``root``, ``userns``) every process the kernel starts stays in the tree (an
  orphan is adopted by the namespace's first process, the kernel). Not counted: what a
  process used since the last look when it exits and no process of the tree waits for it
  (``SIGCHLD`` ignored), and, at the ``none`` level, a process daemonised out of the tree.
  The executor's wall-clock limit bounds what a cell gains that way.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grading.sandbox.cgroup2 import kernel_parent
from grading.sandbox.cgroups import detect_layout, mount_point, rmdir_when_empty

__all__ = ["CellClock", "CpuAccount", "Mark", "account", "prune_kernel_groups"]

PARENT = "course-grading"  # where a kernel's group goes when this process sits in a hierarchy's root
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
_numbers = itertools.count()


@dataclass(frozen=True)
class _Process:
    start: int  # start time since boot, in ticks: tells a reused pid from the process it replaced
    parent: int
    own: float  # seconds of user and system time of all its threads, live and ended
    reaped: float  # seconds its waited-for children used (cutime, cstime)


def _process(pid: int) -> _Process | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = [int(fields[i]) for i in (11, 12, 13, 14)]  # utime, stime, cutime, cstime
    return _Process(int(fields[19]), int(fields[1]), (ticks[0] + ticks[1]) * _TICK, (ticks[2] + ticks[3]) * _TICK)


def _tree(root: int) -> list[int]:
    """``root`` and every live descendant (children of every thread, through /proc)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as kids:
                    todo += [int(child) for child in kids.read().split()]
    return found


def _v1_usage(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text(encoding="ascii")) / 1e9


def _v2_usage(group: Path) -> float:
    for line in (group / "cpu.stat").read_text(encoding="ascii").splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise OSError(f"no usage_usec in {group / 'cpu.stat'}")


class CpuAccount:
    """One kernel's CPU time: read from its cgroup (``exact``), or summed over its process tree."""

    def __init__(self, group: Path | None = None, usage: Callable[[Path], float] | None = None) -> None:
        self.group = group if usage is not None else None
        self._usage = usage
        self._pid: int | None = None
        self._seen: dict[int, _Process] = {}
        self._total = 0.0
        self._delays: dict[tuple[int, int], int] = {}  # (pid, tid) -> run-queue wait in ns, at the last look
        self._waited = 0.0

    @property
    def exact(self) -> bool:
        return self.group is not None

    def join(self) -> None:
        """Move the calling process into the group (a ``preexec_fn``: runs in the kernel's process)."""
        if self.group is not None:
            with contextlib.suppress(OSError), open(self.group / "cgroup.procs", "w", encoding="ascii") as procs:
                procs.write(str(os.getpid()))  # checked by ``attach``

    def attach(self, pid: int) -> None:
        """The kernel's first process; the tree is read from here if it did not join the group."""
        self._pid = pid
        if self.group is not None:
            try:
                inside = str(pid) in (self.group / "cgroup.procs").read_text(encoding="ascii").split()
            except OSError:
                inside = False
            if not inside:
                group, self.group = self.group, None
                rmdir_when_empty(group, wait=0.0)
        self.used()

    def used(self) -> float:
        """CPU seconds the kernel's processes have used (never less than the last answer)."""
        if self.group is not None and self._usage is not None:
            with contextlib.suppress(OSError, ValueError):
                self._total = max(self._total, self._usage(self.group))
            return self._total
        if self._pid is not None:
            self._look()
        return self._total

    def _look(self) -> None:
        assert self._pid is not None
        now = {pid: found for pid in _tree(self._pid) if (found := _process(pid)) is not None}
        before = self._seen
        gone = {pid: p for pid, p in before.items() if pid not in now or now[pid].start != p.start}
        for pid, process in now.items():
            last = before.get(pid)
            if last is None or last.start != process.start:  # new since the last look: all of it
                self._total += process.own + process.reaped
                continue
            counted = sum(g.own + g.reaped for old, g in gone.items() if _survivor(old, before, now) == pid)
            self._total += process.own - last.own + max(0.0, process.reaped - last.reaped - counted)
        self._seen = now

    def waited(self) -> float:
        """Seconds the kernel's threads have spent runnable but not running (waiting for a CPU), never decreasing.

        Read from ``/proc/<pid>/task/<tid>/schedstat`` (its second field) of every live thread
        of the tree; a thread that ends takes its last increment along. 0 where the kernel has
        no schedstat: a cell held back by the load then reads as a cell that waited.
        """
        if self._pid is None:
            return self._waited
        now: dict[tuple[int, int], int] = {}
        for pid in _tree(self._pid):
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    path = f"/proc/{pid}/task/{tid}/schedstat"
                    with contextlib.suppress(OSError, ValueError, IndexError), open(path, encoding="ascii") as stat:
                        now[(pid, int(tid))] = int(stat.read().split()[1])
        for key, nanoseconds in now.items():  # a thread new since the last look: all of its wait
            self._waited += max(0, nanoseconds - self._delays.get(key, 0)) / 1e9
        self._delays = now
        return self._waited

    def close(self) -> None:
        """The kernel is gone: remove its group (killed processes take a moment to leave); ``used`` stays as it is."""
        group, self.group, self._pid = self.group, None, None
        if group is not None:
            rmdir_when_empty(group, wait=2.0)


def _survivor(pid: int, before: dict[int, _Process], now: dict[int, _Process]) -> int | None:
    """The nearest ancestor of the gone process ``pid`` that is still there (the one that reaped it, if any)."""
    for _ in range(len(before)):
        parent = before[pid].parent
        if parent not in before:
            return None
        if parent in now and now[parent].start == before[parent].start:
            return parent
        pid = parent
    return None


def _hierarchies() -> list[tuple[Path, str, Callable[[Path], float]]]:
    """(mount point, this process's group path in it, usage reader): cgroup v1's cpuacct first, then v2."""
    found_mounts = {"cpuacct": mount_point("cgroup", "cpuacct"), "": mount_point("cgroup2")}
    mounts = {key: point for key, point in found_mounts.items() if point is not None}
    found = []
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="ascii") as groups:
        for line in groups:
            number, controllers, path = line.rstrip("\n").split(":", 2)
            if "cpuacct" in controllers.split(",") and "cpuacct" in mounts:
                found.append((mounts["cpuacct"], path, _v1_usage))
            elif number == "0" and "" in mounts:
                found.append((mounts[""], path, _v2_usage))
    return sorted(found, key=lambda entry: entry[2] is _v2_usage)


def account(level: str) -> CpuAccount:
    """A new kernel's account: a cgroup of its own at the ``root`` level where one can be made, else its tree."""
    if level != "root" or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return CpuAccount()
    if detect_layout() == "v2":
        return _account_v2()
    for mount, own, usage in _hierarchies():
        parent = mount / own.lstrip("/")
        if parent == mount:
            parent = mount / PARENT
        try:
            parent.mkdir(exist_ok=True)
            prune_kernel_groups(parent)
            group = parent / f"kernel-{os.getpid()}-{next(_numbers)}"
            group.mkdir()
            usage(group)
        except (OSError, ValueError):
            continue
        return CpuAccount(group, usage)
    return CpuAccount()


def _account_v2() -> CpuAccount:
    """``account`` on a cgroup v2 host: a group in the grader's subtree (``cgroup2.kernel_parent``), else its tree."""
    parent = kernel_parent()
    if parent is None:
        return CpuAccount()
    group = parent / f"kernel-{os.getpid()}-{next(_numbers)}"
    try:
        prune_kernel_groups(parent)
        group.mkdir()
        _v2_usage(group)
    except (OSError, ValueError):
        rmdir_when_empty(group, wait=0.0)
        return CpuAccount()
    return CpuAccount(group, _v2_usage)


def prune_kernel_groups(parent: Path) -> None:
    """Remove the empty kernel groups this process or a process now gone left behind (never another's in use)."""
    for group in parent.glob("kernel-*-*"):
        owner = group.name.split("-")[1]
        if owner.isdigit() and (int(owner) == os.getpid() or not Path(f"/proc/{owner}").exists()):
            rmdir_when_empty(group, wait=0.0)


@dataclass(frozen=True)
class Mark:
    """A moment of a cell: monotonic time, the kernel's CPU time and its run-queue wait (seconds)."""

    wall: float
    cpu: float
    waited: float


class CellClock:
    """One cell's CPU time (its kernel's account since ``restart``), and how long its threads waited for a CPU."""

    def __init__(self, account: CpuAccount) -> None:
        self.account = account
        self.start = self.mark()

    def mark(self) -> Mark:
        return Mark(time.monotonic(), self.account.used(), self.account.waited())

    def held_back(self, since: Mark | None = None) -> float:
        """Seconds per second (since ``since``, else the cell's start) that the kernel's threads were ready to run
        but waited for a CPU: about 0 for a cell that sleeps or blocks, high for one the machine's load holds back."""
        since = since or self.start
        seconds = time.monotonic() - since.wall
        return (self.account.waited() - since.waited) / seconds if seconds > 0 else 0.0

    def restart(self) -> None:
        """The cell starts now."""
        self.start = self.mark()

    def cpu(self) -> float:
        """CPU seconds the kernel's processes used since the cell started."""
        return self.account.used() - self.start.cpu
