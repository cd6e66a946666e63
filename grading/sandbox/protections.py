"""What protects the grader from a submission on this machine, and the limits it applies.

Contract: ``detect()`` probes (it never assumes) which protections work here and returns a
``Protections`` whose ``missing()`` names each one that does not, so the command can say
so instead of pretending. Three levels:

* ``root`` (running as root, ``unshare`` works): every kernel gets its own network
  namespace (no network at all), mount namespace (course files hidden, private tmp), PID
  namespace (every process it starts dies with it), IPC namespace (System V objects and
  POSIX message queues are its own and vanish with it) and runs as a grading user of its
  own (uid ``GRADING_UID_BASE + slot``) that owns nothing; each worker's ``/tmp`` is a
  size-limited tmpfs, the only place the kernel can write; with cgroup v1, or cgroup v2 in a
  subtree of the grader's own, measured tests get a CPU no other job can use (``sandbox.cpus``);
* ``userns`` (unprivileged user namespaces): the same namespaces, but the kernel keeps your
  user id, so files you own outside the hidden course directories stay writable, and there
  is no disk quota beyond the per-file size limit;
* ``none``: resource limits and a private working directory only.

Resource limits (time per cell and per notebook, address space, processes, file size,
output size) apply at every level. A cell's time limit counts the CPU time of its kernel and
every process the kernel starts (``sandbox.cputime``: exact from a cgroup of the kernel's own at
the ``root`` level, from the process tree in /proc below it), with a wall-clock backstop.
At the ``root`` level, where a cgroup memory hierarchy is writable (``sandbox.memory``), a
job's kernel and every process it starts also share one memory budget
(``Limits.job_memory_bytes``); elsewhere ``missing()`` says there is none.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grading.sandbox.cgroups import detect_layout
from grading.sandbox.cpus import REALTIME_PRIORITY, CpuIsolation, isolation
from grading.sandbox.memory import MemorySupport, support

__all__ = [
    "GRADING_UID_BASE",
    "Limits",
    "Protections",
    "SlotLease",
    "detect",
    "jail_argv",
    "kernel_env",
    "package_roots",
    "parent_death_signal",
    "size_text",
    "worker_prefix",
]

GRADING_UID_BASE = 61000
GRADING_SLOTS = 1000  # grading users 61000..61999
FIRST_LEASED_SLOT = 16  # 61000..61015 were used unleased by earlier versions of this tool: never share them
SLOT_LOCKS = Path("/run/course-grading")  # root-owned: only the root level hands out grading users
JAIL_SCRIPT = Path(__file__).with_name("jail.py")
_NAMESPACES = ["--net", "--mount", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
GiB = 1 << 30
MiB = 1 << 20
SYSV_SHM_BYTES = 64 * MiB  # System V shared memory a kernel's IPC namespace may hold in all (as much as /dev/shm)
IPC_LIMITS = {  # /proc/sys/kernel/NAME in each kernel's own IPC namespace
    "shmmax": SYSV_SHM_BYTES,
    "shmall": SYSV_SHM_BYTES // (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096),
    "shmmni": 64,
    "msgmni": 64,  # message queues (each at most msgmnb, 16 KiB by default)
}


@dataclass(frozen=True)
class Limits:
    """Per-submission limits (seconds and bytes)."""

    cell_timeout: float = 60.0  # seconds of CPU time (the kernel and its processes), with a wall-clock backstop
    notebook_timeout: float = 600.0
    memory_bytes: int = 6 * GiB  # address space: importing torch alone maps about 1 GB
    processes: int = 256  # processes and threads of the grading user (torch starts one per core)
    file_bytes: int = 256 * MiB  # torch.compile's precompiled C++ header alone is ~150 MB
    disk_bytes: int = 1 * GiB  # the worker's private tmpfs (root level); a torch.compile C++ build takes ~150 MB
    output_bytes: int = 200_000  # kept per cell; the rest is replaced by a note
    restarts: int = 3  # kernel restarts per notebook after a crash or a timeout
    threads: int = 1  # OMP/MKL threads per kernel (cores / jobs)
    measure_timeout: float = 600.0  # seconds for all the timed rounds of a notebook's measured tests
    # The memory a job's kernel and every process it starts may hold together (root level, cgroup memory;
    # 0: no budget). It is charged with the private /tmp's files (disk_bytes) the kernel writes, which cannot
    # be reclaimed without swap, and page cache, which is reclaimed first: 8 GiB leaves one process its full
    # address space (memory_bytes) beside a full /tmp, so only several processes together can reach it.
    job_memory_bytes: int = 8 * GiB

    def to_dict(self) -> dict:
        return asdict(self)


def size_text(count: int) -> str:
    """A limit's size in words: ``"8 GiB"``, ``"300 MiB"``."""
    return f"{count / (1 << 30):g} GiB" if count >= 1 << 30 else f"{count / (1 << 20):g} MiB"


@dataclass(frozen=True)
class Protections:
    """Which isolation works on this machine."""

    level: str  # "root" | "userns" | "none"
    notes: tuple[str, ...] = field(default=())
    cpu: CpuIsolation | None = None  # what a measured test gets here (None: not probed)
    cgroups: str = ""  # the cgroup layout the host mounts ("v1", "v2", "hybrid", "none"; "": not probed)
    memory: MemorySupport | None = None  # where a job's memory budget lives here (None: not probed)

    @property
    def namespaces(self) -> bool:
        return self.level in {"root", "userns"}

    def missing(self) -> list[str]:
        """Each protection this level lacks, in words an instructor can act on."""
        gaps = []
        if not self.namespaces:
            gaps += [
                "no network isolation: submissions can open network connections",
                "course files not hidden: submissions can read the gradebook, source/ and other submissions",
                "no PID namespace: processes a submission leaves behind are killed by process group only",
                "no IPC namespace: System V shared memory, semaphores and message queues a kernel creates "
                "outlive it and are shared with every other job",
            ]
        if self.level != "root":
            gaps += [
                "no separate user: the kernel runs as you and can write any file you can write"
                + (" outside the hidden course directories" if self.namespaces else ""),
                "no disk quota: only the per-file size limit bounds what a submission writes",
            ]
        if self.cpu is not None:
            gaps += self.cpu.missing()
        if self.level != "root":  # a memory budget needs the root level
            gaps += MemorySupport("", "needs the root level").missing()
        elif self.memory is not None:
            gaps += self.memory.missing()
        return gaps

    def describe(self) -> str:
        lines = [f"sandbox: {self.level}" + (f" (cgroups: {self.cgroups})" if self.cgroups else "")]
        lines += [f"  missing protection: {gap}" for gap in self.missing()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def detect(level: str = "auto") -> Protections:
    """The strongest level that works here (or ``level`` if it works; else the next one down)."""
    unshare = shutil.which("unshare")
    notes = []
    order = ["root", "userns", "none"]
    start = order.index(level) if level in order else 0
    for candidate in order[start:]:
        if candidate == "none":
            break
        if not unshare:
            notes.append("`unshare` (util-linux) not found")
            continue
        if candidate == "root":
            if os.geteuid() != 0:
                continue
            probe = [unshare, *_NAMESPACES, sys.executable, "-c", "import os; os.setuid(65534)"]
        else:
            probe = [unshare, "--map-root-user", *_NAMESPACES, "true"]
        if _works(probe):
            return Protections(candidate, tuple(notes), isolation(candidate), detect_layout(), support(candidate))
        notes.append(f"{candidate}-level isolation was tried and is not permitted here")
    return Protections("none", tuple(notes), isolation("none"), detect_layout(), support("none"))


class SlotLease:
    """Grading-user slots held for the life of a pool, so that two gradings at once never share a user.

    Each slot is an exclusive ``flock`` on ``/run/course-grading/<uid>``; the lock goes with
    the process, so a crashed run frees its slots. Below the root level the kernels run as
    the instructor and slots only number the workers.
    """

    def __init__(self, count: int, root: bool):
        self.slots: list[int] = []
        self._fds: list[int] = []
        if not root:
            self.slots = list(range(count))
            return
        import fcntl

        SLOT_LOCKS.mkdir(mode=0o700, parents=True, exist_ok=True)
        for slot in range(FIRST_LEASED_SLOT, GRADING_SLOTS):
            if len(self.slots) == count:
                break
            fd = os.open(SLOT_LOCKS / str(GRADING_UID_BASE + slot), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.slots.append(slot)
            self._fds.append(fd)
        if len(self.slots) < count:
            self.release()
            raise RuntimeError("every grading user is busy (other gradings are running)")

    def uids(self) -> list[int]:
        return [GRADING_UID_BASE + slot for slot in self.slots]

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


_PR_SET_PDEATHSIG = 1


def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child process die (SIGKILL) with the process that starts it.

    Given to the grading workers and to each kernel's ``unshare``: when ``course`` is killed,
    its workers die; when a worker dies, its kernels' PID namespaces go with them. Without it
    a killed run leaves kernels behind, still running a submission. Linux only (None
    elsewhere). The C function is looked up here, in the parent: the child only calls it.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    kill = int(signal.SIGKILL)

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)

    return die_with_parent


def worker_prefix(protections: Protections) -> list[str]:
    """Command prefix that gives a grading worker its own mount namespace (for its private /tmp)."""
    if protections.level == "root":
        return ["unshare", "--mount", "--propagation", "private"]
    if protections.level == "userns":
        return ["unshare", "--map-root-user", "--mount", "--propagation", "private"]
    return []


def package_roots() -> list[Path]:
    """The folders that hold the ``grading`` and ``course_utils`` packages (found without importing them).

    A kernel imports both (the guard from ``grading``, the notebooks' helpers from
    ``course_utils``); with editable installs they live in the checkout, which the jail
    must make reachable for the grading user.
    """
    import importlib.util

    roots = [Path(__file__).resolve().parents[2]]  # grading/sandbox/protections.py -> the folder holding grading/
    spec = importlib.util.find_spec("course_utils")
    if spec is not None and spec.submodule_search_locations:
        roots += [Path(p).resolve().parent for p in spec.submodule_search_locations]
    return roots


def kernel_env(workdir: Path, limits: Limits) -> dict[str, str]:
    """A clean environment for the kernel: nothing of the instructor's leaks in."""
    threads = str(max(1, limits.threads))
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "USER": "student",
        "LOGNAME": "student",
        "LANG": "C.UTF-8",
        "TMPDIR": str(workdir),  # tempfile, and torch.compile's cache (Inductor), write here: the sandbox's disk
        "IPYTHONDIR": str(workdir / ".ipython"),
        "MPLCONFIGDIR": str(workdir / ".matplotlib"),
        "MPLBACKEND": "agg",
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "COURSE_QUICK": "1",
        "NBGRADER_EXECUTION": "autograde",
    }


def jail_argv(
    protections: Protections,
    limits: Limits,
    *,
    workdir: Path,
    connection_file: Path | None,
    hide: list[Path],
    slot: int,
    cpu: int | None = None,
    realtime: bool = False,
    env: dict[str, str] | None = None,
) -> list[str]:
    """The command prefix that starts a kernel inside the jail (the kernel argv follows ``--``).

    ``cpu`` pins the process and everything it starts to one CPU for good (timed rounds of a
    measured test); ``realtime`` runs it at round-robin real-time priority (rounds on a CPU
    the measurement holds, root level only); ``env`` adds to ``kernel_env``.
    """
    root = protections.level == "root"
    config = {
        "mounts": protections.namespaces,
        "hide": [str(p) for p in hide],
        "expose": sorted({os.path.realpath(p) for p in (Path(sys.base_prefix), Path(sys.prefix), *package_roots())}),
        "uid": GRADING_UID_BASE + slot if root else None,
        "gid": GRADING_UID_BASE + slot if root else None,
        "workdir": str(workdir),
        "connection_file": str(connection_file) if connection_file else None,
        "cpu": cpu,
        "realtime": REALTIME_PRIORITY if realtime and root else 0,
        "ipc": IPC_LIMITS if protections.namespaces else None,
        "memory_bytes": limits.memory_bytes,
        "file_bytes": limits.file_bytes,
        # a backstop only: the notebook deadline is enforced from outside
        "cpu_seconds": int(limits.notebook_timeout * 2 + 30),
        # without a user of its own the count would include the instructor's processes
        "processes": limits.processes if root else 0,
        "env": {**kernel_env(workdir, limits), **(env or {})},
    }
    prefix = []
    if protections.level == "root":
        prefix = ["unshare", *_NAMESPACES]
    elif protections.level == "userns":
        # the worker is already root of its own user namespace
        prefix = ["unshare", *_NAMESPACES]
    return [*prefix, sys.executable, "-I", str(JAIL_SCRIPT), json.dumps(config), "--"]
