"""The cgroup file operations the grader's CPU placement needs, behind one interface per layout.

Contract. ``detect_layout()`` names what this host mounts: ``"v1"`` (controllers in their
own ``cgroup`` hierarchies), ``"v2"`` (one ``cgroup2`` hierarchy), ``"hybrid"`` (v1
controllers and a ``cgroup2`` hierarchy beside them, systemd's hybrid mode) or ``"none"``.
It reads the mount table (``/proc/self/mounts``, else ``/proc/mounts``); only where neither
can be read does it look at ``/sys/fs/cgroup`` itself. ``backend(layout)`` is the
``CgroupLayout`` whose operations write that layout's files: ``V1Layout`` for v1 and hybrid
hosts (the controllers the grader uses are looked for in v1 hierarchies), ``V2Layout`` for
v2, None for ``"none"``. ``CpuIsolation`` and the placement code (``grading.sandbox.cpus``)
reach a controller's files only through it.

What a backend provides (``CgroupLayout``): where a controller's hierarchy is mounted
and whether this process may write it (``usable``); the CPUs of a cpuset group and the
settings a new cpuset group needs before a task may join it; a group's weight against its
siblings (an equal share of the CPUs per job); freezing and thawing a group and everything
in it. What every layout shares are functions here: making and removing groups, moving a
process into one (at once, or as a ``preexec_fn``), whether one is empty, and where this
process is (``own_group``, from ``/proc/self/cgroup``); they serve a cgroup v2 group (the
measurement's CPU pressure) beside v1's controllers as well.

cgroup v2 (``V2Layout``, Documentation/admin-guide/cgroup-v2.rst). One directory holds every
controller, so the cpuset, cpu and freezer "hierarchies" that ``CpuIsolation`` keeps apart
are one; and a group whose ``cgroup.subtree_control`` enables a domain controller may hold
no process ("no internal processes"). The grader therefore keeps to a subtree of its own,
``course-grading`` (``SUBTREE``), under a *base* that ``V2Layout.base()`` finds without
making anything: the v2 root where this process sits there (no systemd, a test machine);
a group delegated to it (``delegated``: systemd's ``Delegate=yes`` marks it with the
``trusted.delegate`` attribute, https://systemd.io/CGROUP_DELEGATION/, since systemd 251;
before, ``systemctl show`` says so of its unit; on a machine without systemd, any group it may
write), whose processes move into the leaf ``course-grader``
(``LEAF``) first; or, for a process already inside such a subtree, that subtree's base.
Elsewhere (a systemd service without delegation) there is none, and it says why: systemd
owns that group, and the grader creates no group outside its subtree. How the grader lays
out that subtree is ``grading.sandbox.cgroup2``.

Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, Literal

__all__ = [
    "LEAF",
    "MOUNT_TABLES",
    "SUBTREE",
    "SYSFS",
    "CgroupLayout",
    "Layout",
    "V1Layout",
    "V2Layout",
    "add",
    "backend",
    "delegated",
    "detect_layout",
    "empty",
    "enable",
    "joiner",
    "make",
    "make_unique",
    "mount_point",
    "own_group",
    "parse_cpus",
    "populated",
    "read",
    "rmdir_when_empty",
    "unit_delegated",
    "writable",
    "write",
]

Layout = Literal["v1", "v2", "hybrid", "none"]

MOUNT_TABLES = (Path("/proc/self/mounts"), Path("/proc/mounts"))  # read in this order: the first readable one
SYSFS = Path("/sys/fs/cgroup")  # where the hierarchies are mounted by convention (a fallback only)
# cgroup v1 controllers: a v1 mount that carries none of them (systemd's ``name=systemd``) holds no controller
V1_CONTROLLERS = frozenset(
    {"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "misc"}
    | {"net_cls", "net_prio", "perf_event", "pids", "rdma"}
)
SUBTREE = "course-grading"  # cgroup v2: the grader's subtree, under its base (see the module docstring)
LEAF = "course-grader"  # cgroup v2: where a delegated group's own processes go before it gives controllers out
SYSTEMD = Path("/run/systemd/system")  # present where systemd manages the machine (sd_booted)
DELEGATE_ATTRIBUTES = ("trusted.delegate", "user.delegate")  # systemd >= 251 marks a delegated group so


def _mounts(tables: Sequence[Path] = MOUNT_TABLES) -> list[tuple[str, Path, list[str]]] | None:
    """(fstype, mount point, options) of every mount in the first readable table; None if none is."""
    for table in tables:
        try:
            lines = table.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        found = []
        for line in lines:
            fields = line.split()
            if len(fields) > 3:
                found.append((fields[2], Path(fields[1].replace("\\040", " ")), fields[3].split(",")))
        return found
    return None


def mount_point(fstype: str, controller: str = "", tables: Sequence[Path] = MOUNT_TABLES) -> Path | None:
    """Where a cgroup hierarchy is mounted: v1 (``cgroup``) with ``controller``, or v2 (``cgroup2``); None if not."""
    for kind, point, options in _mounts(tables) or []:
        if kind == fstype and (not controller or controller in options):
            return point
    return None


def detect_layout(tables: Sequence[Path] = MOUNT_TABLES, sysfs: Path = SYSFS) -> Layout:
    """Which cgroup layout this host mounts (see the module docstring); ``tables`` and ``sysfs`` for tests."""
    mounts = _mounts(tables)
    if mounts is not None:
        v1 = any(kind == "cgroup" and V1_CONTROLLERS.intersection(options) for kind, _, options in mounts)
        v2 = any(kind == "cgroup2" for kind, _, _ in mounts)
    else:  # no mount table: what sysfs shows
        v2 = (sysfs / "cgroup.controllers").is_file() or (sysfs / "unified" / "cgroup.controllers").is_file()
        v1 = any((sysfs / name / "cgroup.procs").is_file() for name in sorted(V1_CONTROLLERS))
    if v1 and v2:
        return "hybrid"
    return "v1" if v1 else "v2" if v2 else "none"


def backend(layout: Layout | None = None) -> CgroupLayout | None:
    """The operations for ``layout`` (detected if None); None where the grader has none for it (v2, none)."""
    layout = detect_layout() if layout is None else layout
    if layout in ("v1", "hybrid"):  # hybrid: the controllers the grader uses are looked for in v1 hierarchies
        return V1Layout()
    return V2Layout() if layout == "v2" else None


def parse_cpus(text: str) -> set[int]:
    """``"0-2,5"`` -> ``{0, 1, 2, 5}`` (the kernel's list format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _cpus_text(cpus: set[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def read(path: Path) -> str:
    """A cgroup file's text."""
    return path.read_text(encoding="ascii")


def write(path: Path, value: str) -> None:
    """Write ``value`` to a cgroup file in one ``write`` (the kernel acts on each write)."""
    with open(path, "w", encoding="ascii") as file:
        file.write(value)


def writable(hierarchy: Path | None, *files: str) -> Path | None:
    """``hierarchy`` if it has every one of ``files`` and this process may move processes in it, else None."""
    if hierarchy is None or not all((hierarchy / f).is_file() for f in files):
        return None
    return hierarchy if os.access(hierarchy / "cgroup.procs", os.W_OK) else None


def make(group: Path) -> bool:
    """Create the cgroup ``group`` (its parent exists); whether it was created now (False: it was there)."""
    try:
        group.mkdir()
        return True
    except FileExistsError:
        return False


def make_unique(parent: Path, prefix: str) -> Path:
    """A new cgroup under ``parent`` with a name no other has, starting with ``prefix``."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def add(group: Path, pid: int) -> None:
    """Move process ``pid`` (all its threads) into ``group``."""
    write(group / "cgroup.procs", str(pid))


def joiner(group: Path) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the child into ``group`` before it runs anything."""
    procs = str(group / "cgroup.procs")

    def join() -> None:
        with open(procs, "w", encoding="ascii") as file:
            file.write(str(os.getpid()))

    return join


def empty(group: Path) -> bool:
    """Whether ``group`` holds no process (a group that is gone, or cannot be read, counts as empty)."""
    try:
        return not read(group / "cgroup.procs").strip()
    except OSError:
        return True


def rmdir_when_empty(group: Path, wait: float = 0.0) -> bool:
    """rmdir ``group`` once it is empty (killed processes take a moment to leave); whether it is gone."""
    deadline = time.monotonic() + wait
    while True:
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def populated(group: Path) -> bool:
    """cgroup v2: whether ``group`` or a group below it holds a process (``cgroup.events``; gone: False)."""
    try:
        return "populated 1" in read(group / "cgroup.events").splitlines()
    except OSError:
        return False


def enable(group: Path, controllers: Sequence[str]) -> set[str]:
    """cgroup v2: give the children of ``group`` each of ``controllers`` it has; the ones its children now have.

    Each is written alone (the kernel refuses the whole write where one fails); a controller
    ``group`` lacks (``cgroup.controllers``) is left out, as is one the kernel refuses.
    """
    have = set(read(group / "cgroup.controllers").split())
    for controller in controllers:
        if controller in have and controller not in read(group / "cgroup.subtree_control").split():
            try:
                write(group / "cgroup.subtree_control", f"+{controller}")
            except OSError:
                continue
    return set(read(group / "cgroup.subtree_control").split())


def delegated(group: Path, systemd: Path = SYSTEMD) -> bool:
    """cgroup v2: whether ``group`` is this process's to divide (see the module docstring).

    Root may write any group, so writability alone does not tell: where systemd runs, the
    group must carry its delegation mark (systemd 251 or later) or, where it has none (an
    older systemd: Ubuntu 22.04's 249, Debian 11's 247), be the group of a scope or service
    that systemd says has ``Delegate=yes``; without systemd, a group this process may write
    is taken as delegated.
    """
    files = [group / "cgroup.procs", group / "cgroup.subtree_control"]
    if not all(os.access(f, os.W_OK) for f in files) or not os.access(group, os.W_OK):
        return False
    for name in DELEGATE_ATTRIBUTES:
        with contextlib.suppress(OSError):
            if os.getxattr(group, name).strip(b"\0\n") == b"1":
                return True
    return not systemd.is_dir() or unit_delegated(group.name)


def unit_delegated(unit: str) -> bool:
    """Whether systemd's manager says the scope or service ``unit`` has ``Delegate=yes`` (``systemctl show``)."""
    if not unit.endswith((".scope", ".service")) or shutil.which("systemctl") is None:
        return False
    command = ["systemctl", "show", "--property=Delegate", "--value", "--", unit]
    try:
        shown = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return shown.returncode == 0 and shown.stdout.strip() == "yes"


def own_group(hierarchy: Path, controller: str) -> Path:
    """The cgroup of ``hierarchy`` this process is in: v1's for ``controller``, or v2's (``controller`` empty)."""
    with open("/proc/self/cgroup", encoding="ascii") as groups:
        for line in groups:
            number, controllers, path = line.rstrip("\n").split(":", 2)
            if (not controller and number == "0") or (controller and controller in controllers.split(",")):
                return hierarchy / path.lstrip("/")
    return hierarchy


class CgroupLayout(ABC):
    """The file operations on one layout's cgroups that the placement code needs (see the module docstring).

    Groups are directories; every method takes the group's path. Writes raise ``OSError``
    as the kernel refuses them; reads of a group that is gone raise ``OSError`` too. What is
    the same in every layout (``make``, ``make_unique``, ``add``, ``joiner``, ``empty``,
    ``rmdir_when_empty``, ``own_group``) is a function of this module, not a method.
    """

    version: ClassVar[Layout]

    # ---- where the controllers are

    @abstractmethod
    def hierarchy(self, controller: str) -> Path | None:
        """The root of the hierarchy that holds ``controller`` (``cpuset``, ``cpu``, ``cpuacct``, ``freezer``)."""

    @abstractmethod
    def usable(self, controller: str) -> Path | None:
        """``hierarchy(controller)`` if this process may create groups there and move processes into them."""

    # ---- cpuset

    @abstractmethod
    def cpus(self, group: Path) -> set[int]:
        """The CPUs ``group`` is given (its own setting, not what its ancestors leave it)."""

    @abstractmethod
    def set_cpus(self, group: Path, cpus: set[int]) -> None:
        """Give ``group`` exactly ``cpus``; its tasks on other CPUs are moved by the kernel."""

    @abstractmethod
    def fill_cpuset(self, group: Path, source: Path) -> None:
        """Give ``group`` (a child of ``source``) what ``source`` can use, where ``group`` has nothing set yet."""

    @abstractmethod
    def copy_mems(self, group: Path, source: Path) -> None:
        """Give ``group`` the memory nodes of ``source`` (before a task can join it, where the layout needs it)."""

    # ---- cpu

    @abstractmethod
    def set_weight(self, group: Path, defaults: int) -> None:
        """Let ``group`` weigh against its siblings what ``defaults`` groups of the default weight would."""

    # ---- freezer

    @abstractmethod
    def freeze(self, group: Path, frozen: bool, timeout: float = 5.0) -> bool:
        """Freeze (``frozen``) or thaw every process of ``group``; whether it got there within ``timeout`` s."""


class V1Layout(CgroupLayout):
    """cgroup v1 (and the controllers of a hybrid layout): one hierarchy per controller, v1's file names."""

    version: ClassVar[Layout] = "v1"
    # files a usable hierarchy has (besides cgroup.procs): the ones the grader writes or reads there
    FILES: ClassVar[dict[str, tuple[str, ...]]] = {
        "cpuset": ("cpuset.cpus", "cpuset.effective_cpus"),
        "cpu": ("cpu.shares",),
        "cpuacct": ("cpuacct.usage_percpu",),
        "freezer": (),
    }
    SHARES = 1024  # cpu.shares of a group of the default weight

    def hierarchy(self, controller: str) -> Path | None:
        return mount_point("cgroup", controller)

    def usable(self, controller: str) -> Path | None:
        return writable(self.hierarchy(controller), *self.FILES.get(controller, ()))

    def cpus(self, group: Path) -> set[int]:
        return parse_cpus(read(group / "cpuset.cpus"))

    def set_cpus(self, group: Path, cpus: set[int]) -> None:
        write(group / "cpuset.cpus", _cpus_text(cpus))

    def fill_cpuset(self, group: Path, source: Path) -> None:
        for name in ("mems", "cpus"):  # a v1 cpuset starts empty, and no task may join it so
            if not read(group / f"cpuset.{name}").strip():
                write(group / f"cpuset.{name}", read(source / f"cpuset.effective_{name}").strip())

    def copy_mems(self, group: Path, source: Path) -> None:
        write(group / "cpuset.mems", read(source / "cpuset.mems").strip())

    def set_weight(self, group: Path, defaults: int) -> None:
        write(group / "cpu.shares", str(self.SHARES * defaults))

    def freeze(self, group: Path, frozen: bool, timeout: float = 5.0) -> bool:
        state = "FROZEN" if frozen else "THAWED"
        write(group / "freezer.state", state)
        deadline = time.monotonic() + timeout
        while read(group / "freezer.state").strip() != state:  # FREEZING until every task has stopped
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True


class V2Layout(CgroupLayout):
    """cgroup v2: one hierarchy for every controller; the grader's groups in its own subtree (``base``)."""

    version: ClassVar[Layout] = "v2"
    WEIGHT = 100  # cpu.weight of a group of the default weight
    MAX_WEIGHT = 10_000  # the largest cpu.weight the kernel takes

    def __init__(self, tables: Sequence[Path] = MOUNT_TABLES, systemd: Path = SYSTEMD) -> None:
        self.tables = tables
        self.systemd = systemd

    def hierarchy(self, controller: str) -> Path | None:
        """The v2 mount where it has ``controller`` (``freezer``: ``cgroup.freeze``, always; no ``cpuacct``)."""
        mount = mount_point("cgroup2", tables=self.tables)
        if mount is None or controller == "cpuacct":
            return None
        try:
            return (
                mount if controller == "freezer" or controller in read(mount / "cgroup.controllers").split() else None
            )
        except OSError:
            return None

    def usable(self, controller: str) -> Path | None:
        """The base of the grader's subtree (``base``) where its groups can have ``controller``."""
        base, _ = self.base()
        if base is None or self.hierarchy(controller) is None:
            return None
        try:
            return base if controller == "freezer" or controller in read(base / "cgroup.controllers").split() else None
        except OSError:
            return None

    def base(self) -> tuple[Path | None, str]:
        """Where the grader's subtree ``SUBTREE`` goes (its parent), made nothing; else None and why not."""
        mount = mount_point("cgroup2", tables=self.tables)
        if mount is None:
            return None, "no cgroup v2 hierarchy is mounted"
        try:
            own = own_group(mount, "")
        except OSError:
            return None, "/proc/self/cgroup cannot be read"
        for group in (own, *own.parents):  # inside a subtree made earlier (a worker in its job's group)
            if group == mount or mount not in group.parents:
                break
            if group.name == SUBTREE:
                return group.parent, ""
        if own.name == LEAF:  # moved into the leaf of a delegated group by an earlier call
            return own.parent, ""
        if own == mount and not (mount / "cgroup.type").is_file():  # the real root (a namespace's has a type)
            return mount, ""
        if delegated(own, self.systemd):
            return own, ""
        if not os.access(own / "cgroup.subtree_control", os.W_OK):
            return None, (
                f"this process may not write its cgroup v2 group {own} (a container's read-only /sys/fs/cgroup, "
                "or no permission), so the grader makes no group: give the container a cgroup of its own that it "
                "may write, or on the host run `course` in a scope of its own: "
                "`systemd-run --scope -p Delegate=yes course ...`"
            )
        return None, (
            f"this process is in the cgroup v2 group {own}, which is not delegated to it (systemd manages it, and "
            "the grader makes no group there); run `course` in a scope of its own: "
            "`systemd-run --scope -p Delegate=yes course ...`"
        )

    def cpus(self, group: Path) -> set[int]:
        """Its own ``cpuset.cpus``, or where that is empty (inherited) its ``cpuset.cpus.effective``."""
        own = parse_cpus(read(group / "cpuset.cpus"))
        return own or parse_cpus(read(group / "cpuset.cpus.effective"))

    def set_cpus(self, group: Path, cpus: set[int]) -> None:
        write(group / "cpuset.cpus", _cpus_text(cpus))

    def fill_cpuset(self, group: Path, source: Path) -> None:
        if not read(group / "cpuset.cpus").strip():  # v2 memory nodes are inherited: only the CPUs are set
            write(group / "cpuset.cpus", read(source / "cpuset.cpus.effective").strip())

    def copy_mems(self, group: Path, source: Path) -> None:
        """Nothing: an empty v2 ``cpuset.mems`` is its parent's, and a task may join a group without one."""

    def set_weight(self, group: Path, defaults: int) -> None:
        write(group / "cpu.weight", str(min(self.MAX_WEIGHT, self.WEIGHT * defaults)))

    def freeze(self, group: Path, frozen: bool, timeout: float = 5.0) -> bool:
        state = f"frozen {int(frozen)}"
        write(group / "cgroup.freeze", str(int(frozen)))
        deadline = time.monotonic() + timeout
        while state not in read(group / "cgroup.events").splitlines():  # until every task has stopped
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True
