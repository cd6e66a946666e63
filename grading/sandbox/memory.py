"""A grading job's memory budget: what its kernel and every process the kernel starts may hold together.

Contract: ``budget(level, limit_bytes, shared)`` makes a ``MemoryBudget`` for one kernel before it
starts (``shared``: the kernel's cgroup v2 group that ``cputime.account`` made, if any). The
kernel's ``preexec_fn`` calls ``join()`` (in the child, before anything of the kernel runs);
once it has started, ``attach(pid)`` names its first process; ``killed()`` says whether the
group's OOM killer has killed one of its processes; ``kill_all()`` kills every process of the
group; ``close()``, once the kernel is gone, removes what ``budget`` made. ``support(level)``
says, without making anything, whether kernels here get a budget, and ``MemorySupport.missing()``
why not, in words an instructor can act on. Where the budget lives:

* **cgroup v1** (the ``root`` level, where v1's ``memory`` hierarchy is mounted; hybrid hosts
  too): a memory group of the kernel's own, ``kernel-<pid>-<n>``, inside this process's own
  group of that hierarchy (``course-grading/`` when that is the hierarchy's root), so whatever
  limits apply to this process still apply to the kernel. ``memory.limit_in_bytes`` is the
  budget, and so is ``memory.memsw.limit_in_bytes`` where the kernel accounts swap (memory
  plus swap: nothing escapes into swap). The kernel joins it before it runs anything, so every
  process it starts is born inside; the grading user cannot write a cgroup file, so none can
  leave.
* **cgroup v2**: a process is in exactly one v2 group, and ``cputime.account`` puts the kernel
  into ``kernel-<pid>-<n>``, so the budget is set on that same group (``shared``):
  ``memory.max`` the budget, ``memory.swap.max`` 0 (where swap is accounted),
  ``memory.oom.group`` 1 (the OOM killer takes the whole group at once). Its parent must have
  the memory controller in its ``cgroup.subtree_control``, which a v2 group can have only while
  it holds no process (the root excepted). On a host that mounts only cgroup v2 the kernel's
  group is in the grader's own subtree (``grading.sandbox.cgroup2``: beside the worker's leaf in
  its job group, which gives its children ``+memory``, or in ``course-grading``), so the budget
  applies wherever that subtree can be: in the v2 root, or in a group delegated to the grader
  (``systemd-run --scope -p Delegate=yes``). A measured test's round process
  (``grading.sandbox.rounds``) gets its budget the same way, on its freezer group
  (``shared``), which sits in its measurement's group beside the measuring worker's leaf; not
  in a systemd service without delegation (the
  grader makes no group there; ``missing()`` says so). Tried in the machine of
  ``tools/cgroup2_vm.py`` (``tests/cgroup2``). On a hybrid host (a ``cgroup2`` hierarchy beside
  v1's, no v1 ``memory`` to write) it applies only where this process sits in the v2 root and
  the kernels' CPU time is read from v2, as before: the kernels' groups are then under
  ``course-grading/``, with ``+memory`` enabled in the root's and its ``cgroup.subtree_control``.
* **elsewhere** (below the ``root`` level, no writable memory hierarchy, a budget of 0): no
  budget (``killed()`` is always False); each process is still held to its address space
  (``Limits.memory_bytes``, ``RLIMIT_AS``).

Past the budget, the kernel's OOM killer kills one process of the group (v1: the largest; v2
with ``memory.oom.group``: all). The count read is v1's ``oom_kill`` line of
``memory.oom_control`` (Linux 4.13 or later; on an older kernel the memory plus swap failure
count ``memory.memsw.failcnt``, which also rises when the limit was reached and page cache
reclaimed) and v2's ``oom_kill`` / ``oom_group_kill`` of ``memory.events``. A kernel whose
group's count rose loses every process (``kill_all``: v2's ``cgroup.kill`` where present,
then ``SIGKILL`` to each process of ``cgroup.procs`` until it is empty), and so is restarted
as any dead kernel is; the executor says why (``grading.sandbox.kernel``).

What is charged to the group: the anonymous memory of its processes, the page cache and
tmpfs pages they bring in (the worker's private ``/tmp``, ``/dev/shm``, System V shared
memory), kernel memory. Page cache is reclaimed before anything is killed; tmpfs pages
cannot be without swap, which is why the default budget (``Limits.job_memory_bytes``) leaves
room for a full private ``/tmp``. Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from grading.sandbox.cgroup2 import subtree
from grading.sandbox.cgroups import detect_layout, enable, mount_point, own_group, read, rmdir_when_empty, write
from grading.sandbox.cputime import PARENT, prune_kernel_groups

__all__ = [
    "MemoryBudget",
    "MemorySupport",
    "apply_v1",
    "apply_v2",
    "budget",
    "enable_v2",
    "oom_count",
    "parse_events",
    "parse_oom_control",
    "support",
]

_numbers = itertools.count()


@dataclass(frozen=True)
class MemorySupport:
    """Whether a kernel here gets a memory budget: the hierarchy that holds it (``""``: none), and why not."""

    hierarchy: str = ""  # "v1" | "v2" | ""
    why: str = ""  # what keeps the budget off, where ``hierarchy`` is ""

    def missing(self) -> list[str]:
        """The missing protection, in words an instructor can act on (nothing where the budget applies)."""
        if self.hierarchy:
            return []
        return [
            f"no memory budget per job ({self.why or 'needs the root level and a writable cgroup memory hierarchy'}): "
            "a kernel's processes together can use the machine's memory; each process is still held to its "
            "address-space limit (--memory-gb)"
        ]


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _v1_parent() -> Path | None:
    """Where the kernels' v1 memory groups go: this process's own memory group (``course-grading`` at the root)."""
    mount = mount_point("cgroup", "memory")
    if mount is None:
        return None
    try:
        own = own_group(mount, "memory")
    except OSError:
        return None
    if not (own / "memory.limit_in_bytes").is_file() or not os.access(own / "cgroup.procs", os.W_OK):
        return None
    return mount / PARENT if own == mount else own


def _v2_place() -> tuple[Path | None, str]:
    """The v2 hierarchy's root where a kernel's v2 group can get a budget here, else None and why not."""
    mount = mount_point("cgroup2")
    if mount is None:
        return None, "no cgroup memory hierarchy is mounted (v1 `memory`, or cgroup v2)"
    if detect_layout() == "v2":  # the grader's own subtree (grading.sandbox.cgroup2)
        root, why = subtree(create=False)
        if root is None:
            return None, why
        try:
            controllers = read(root.parent / "cgroup.controllers").split()
        except OSError:
            return None, f"the cgroup v2 group {root.parent} cannot be read"
        return (mount, "") if "memory" in controllers else (None, "the cgroup v2 hierarchy has no memory controller")
    if mount_point("cgroup", "cpuacct") is not None:
        return None, "no cgroup v1 `memory` hierarchy, and the kernels' CPU time is read from v1's `cpuacct`, not v2"
    try:
        own = own_group(mount, "")
        controllers = read(mount / "cgroup.controllers").split()
    except OSError:
        return None, f"the cgroup v2 hierarchy at {mount} cannot be read"
    # Only the real root has no cgroup.type; a container's namespace root has one, and holds its processes.
    if own != mount or (mount / "cgroup.type").is_file():
        return None, (
            f"this process is in a cgroup v2 group below the root ({own}): a group that holds processes cannot "
            "give its children the memory controller; run `course` in the v2 root, or in a delegated subtree "
            "(a later step of issue 29)"
        )
    if "memory" not in controllers:
        return None, "the cgroup v2 hierarchy has no memory controller"
    return mount, ""


def support(level: str) -> MemorySupport:
    """Whether ``budget`` gives kernels a budget here (probed without making anything)."""
    if level != "root" or not _root():
        return MemorySupport("", "needs the root level")
    if _v1_parent() is not None:
        return MemorySupport("v1")
    mount, why = _v2_place()
    if mount is not None:
        return MemorySupport("v2")
    v1 = mount_point("cgroup", "memory")
    if v1 is not None:
        why = f"cgroup v1's `memory` hierarchy at {v1} has no writable group of this process's"
    return MemorySupport("", why)


def parse_oom_control(text: str) -> int | None:
    """The ``oom_kill`` count of a v1 ``memory.oom_control`` (None on a kernel older than 4.13, which has none)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value)
    return None


def parse_events(text: str) -> int:
    """Processes a v2 group's OOM killer killed, from its ``memory.events`` (``oom_kill``, or ``oom_group_kill``)."""
    counts = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            counts[name] = int(value)
    return max(counts.get("oom_kill", 0), counts.get("oom_group_kill", 0))


def oom_count(group: Path, version: str) -> int:
    """How often the group's OOM killer has struck (v1 falls back on the memory plus swap failure count)."""
    if version == "v2":
        return parse_events(read(group / "memory.events"))
    killed = parse_oom_control(read(group / "memory.oom_control"))
    if killed is not None:
        return killed
    failures = group / "memory.memsw.failcnt"
    return int(read(failures if failures.is_file() else group / "memory.failcnt").strip())


def apply_v1(group: Path, limit: int) -> None:
    """Limit a v1 memory group to ``limit`` bytes, memory plus swap where swap is accounted."""
    write(group / "memory.limit_in_bytes", str(limit))  # first: memsw may never be below it
    if (group / "memory.memsw.limit_in_bytes").is_file():
        write(group / "memory.memsw.limit_in_bytes", str(limit))


def apply_v2(group: Path, limit: int) -> None:
    """Limit a v2 group to ``limit`` bytes, no swap, and the whole group killed at once when it runs out."""
    write(group / "memory.max", str(limit))
    if (group / "memory.swap.max").is_file():  # only where the kernel accounts swap
        write(group / "memory.swap.max", "0")
    if (group / "memory.oom.group").is_file():  # Linux 4.19 or later
        write(group / "memory.oom.group", "1")


def enable_v2(*groups: Path) -> None:
    """Give the children of each of ``groups`` (outermost first) the memory controller, where they lack it."""
    for group in groups:
        if "memory" not in read(group / "cgroup.subtree_control").split():
            write(group / "cgroup.subtree_control", "+memory")


class MemoryBudget:
    """One kernel's memory budget: a cgroup that holds the kernel and every process it starts (none: no budget)."""

    def __init__(self, group: Path | None = None, limit: int = 0, version: str = "v1", owned: bool = True) -> None:
        self.group = group
        self.limit = limit  # bytes
        self.version = version  # "v1" | "v2"
        self.owned = owned  # made here (v1), or the CPU account's v2 group (joined and removed by it)

    @property
    def active(self) -> bool:
        return self.group is not None

    def join(self) -> None:
        """Move the calling process into the group (a ``preexec_fn``: runs in the kernel's process)."""
        if self.group is not None and self.owned:
            with contextlib.suppress(OSError), open(self.group / "cgroup.procs", "w", encoding="ascii") as procs:
                procs.write(str(os.getpid()))  # checked by ``attach``

    def attach(self, pid: int) -> None:
        """The kernel's first process: without it inside the group, there is no budget (and the group goes)."""
        if self.group is None:
            return
        try:
            inside = str(pid) in read(self.group / "cgroup.procs").split()
        except OSError:
            inside = False
        if not inside:
            group, self.group = self.group, None
            if self.owned:
                rmdir_when_empty(group, wait=0.0)

    def killed(self) -> bool:
        """Whether the group's OOM killer has killed a process of the kernel's (it went past the budget)."""
        if self.group is None:
            return False
        try:
            return oom_count(self.group, self.version) > 0
        except (OSError, ValueError):
            return False

    def kill_all(self, wait: float = 5.0) -> bool:
        """SIGKILL every process of the group, again until none is left (up to ``wait`` s); whether none is."""
        group = self.group
        if group is None:
            return True
        if self.version == "v2" and (group / "cgroup.kill").is_file():  # Linux 5.14 or later
            with contextlib.suppress(OSError):
                write(group / "cgroup.kill", "1")
        deadline = time.monotonic() + wait
        while True:
            try:
                pids = [int(pid) for pid in read(group / "cgroup.procs").split()]
            except (OSError, ValueError):
                return True  # the group is gone
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            _kill(group, pids)
            time.sleep(0.01)

    def close(self) -> None:
        """The kernel is gone: remove the group this budget made (killed processes take a moment to leave)."""
        group, self.group = self.group, None
        if group is not None and self.owned:
            rmdir_when_empty(group, wait=2.0)


def _kill(group: Path, pids: list[int]) -> None:
    """SIGKILL the processes ``pids`` that are still in ``group``, never a process that took a pid meanwhile.

    Each is held by a pidfd first; a pid still listed in the group once held is that process
    (a reused number would belong to a process outside the group). Where pidfds are missing
    (Linux before 5.3), the pid is signalled directly.
    """
    held: dict[int, int] = {}
    try:
        for pid in pids:
            try:
                held[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except OSError:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        try:
            still = set(read(group / "cgroup.procs").split())
        except OSError:
            return
        for pid, fd in held.items():
            if str(pid) in still:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        for fd in held.values():
            os.close(fd)


def budget(level: str, limit_bytes: int, shared: Path | None = None) -> MemoryBudget:
    """A new kernel's memory budget of ``limit_bytes`` (see the module docstring); no budget where none applies.

    ``shared`` is the kernel's cgroup v2 group, made by ``cputime.account`` (its ``group``):
    on a v2 host the budget is set there, since a process is in one v2 group only.
    """
    if limit_bytes <= 0 or level != "root" or not _root():
        return MemoryBudget()
    parent = _v1_parent()
    if parent is not None:
        group = parent / f"kernel-{os.getpid()}-{next(_numbers)}"
        try:
            parent.mkdir(exist_ok=True)
            prune_kernel_groups(parent)
            group.mkdir()
            apply_v1(group, limit_bytes)
            oom_count(group, "v1")
        except (OSError, ValueError):
            rmdir_when_empty(group, wait=0.0)
        else:
            return MemoryBudget(group, limit_bytes, "v1")
    if shared is None or not (shared / "cgroup.controllers").is_file():
        return MemoryBudget()
    if detect_layout() == "v2":
        return _budget_v2(shared, limit_bytes)
    mount, _ = _v2_place()
    if mount is None or shared.parent != mount / PARENT:
        return MemoryBudget()
    try:
        enable_v2(mount, shared.parent)
        apply_v2(shared, limit_bytes)
        oom_count(shared, "v2")
    except (OSError, ValueError):
        return MemoryBudget()
    return MemoryBudget(shared, limit_bytes, "v2", owned=False)


def _budget_v2(shared: Path, limit_bytes: int) -> MemoryBudget:
    """``budget`` on a cgroup v2 host: on the kernel's group in the grader's subtree (its job group's, or R's),
    or on a round process's group in its measurement's group (``grading.sandbox.rounds``)."""
    root, _ = subtree(create=False)
    parent = shared.parent
    in_root = parent.parent == root and parent.name.startswith(("job-", "measure-", "unheld-"))
    if root is None or not (parent == root or in_root):
        return MemoryBudget()
    try:
        if "memory" not in enable(parent, ("memory",)):
            return MemoryBudget()
        apply_v2(shared, limit_bytes)
        oom_count(shared, "v2")
    except (OSError, ValueError):
        return MemoryBudget()
    return MemoryBudget(shared, limit_bytes, "v2", owned=False)
