"""A measurement's CPU: its own while it runs; and each job's CPUs and share (cgroup placement).

Longer than 500 lines because both cgroup layouts' placement sits behind the same five
functions (the v2 tree itself is ``grading.sandbox.cgroup2``): a caller never asks which it has.

Contract. At the ``root`` level (``isolation(level)`` says what this machine offers):

* ``join_job(level, uid)`` (cgroup v1's ``cpuset``): the calling grading worker, and so
  every kernel and process it starts from then on, moves into the cpuset cgroup
  ``course-grading/job-<uid>``. Its processes run as the grading user ``uid``, who cannot
  write a cgroup file: they can neither leave the cgroup nor, by ``sched_setaffinity``,
  reach a CPU it lacks (the kernel intersects every affinity with the cpuset's CPUs and
  moves a task off a CPU its cpuset loses). With v1's ``cpu`` controller the job also gets
  a ``cpu`` cgroup of its own: jobs share the CPUs equally however many processes each runs
  (150 spinners in one job slow another job's kernel no more than one would), and the
  grading jobs together weigh what one process per job would.
* ``reserve(level, slot, uid, wait)``: a measurement takes one CPU for itself: the calling
  process and every round process it starts move into ``course-grading/measure-<uid>``
  (that CPU only), and every job cgroup on the machine, of every grading run, loses that CPU
  until the measurement ends and the caller moves back. A measurement that would leave no
  CPU for the rest waits its turn (``/run/course-grading/cpus.lock`` orders them
  machine-wide); the wait is not charged to the learner. The round processes also run at
  real-time priority (``SCHED_RR``), so that ordinary processes the grader does not control
  (the machine's other users, the ``course`` command itself) run elsewhere; for that the
  measurement runs in the ``cpu`` hierarchy's root, which holds the real-time budget.
* ``pausable_group(parent)`` and ``pause(group, frozen)`` (cgroup v1's ``freezer``): each
  round process of a measurement joins a freezer group of its own before it runs anything
  (``Reservation.freezer`` is their parent), so that the grader can stop it and everything
  it starts at once, and start it again: a measurement keeps both sides' processes alive
  and freezes the one that is not being timed, which then cannot run at all.
* The time other work still took from a measurement is accounted by
  ``grading.sandbox.ledger`` (from the groups a ``Reservation`` names: the measurement's
  cgroup v2 group for its CPU pressure, its v1 ``cpuacct`` group).

Every cgroup file is written through ``grading.sandbox.cgroups``: its functions for what every
layout shares (groups, their processes), the host's ``CgroupLayout`` (``cgroups.backend``)
for the controllers' own files. The paragraphs above name cgroup v1's groups (and hybrid
hosts', whose controllers are v1's). On a host that mounts only cgroup v2 the same functions
keep the same promises in one subtree of the grader's own (``grading.sandbox.cgroup2``, where
its tree is drawn): ``join_job`` moves the worker into ``R/job-<uid>/worker`` (the job group's
cpuset, ``cpu.weight`` and ``pids.max``; its kernels' groups beside the leaf); ``reserve``
moves it into ``R/measure-<uid>`` (that CPU only; its ``cpu.pressure`` for the ledger; each
round process in a ``round-*`` group inside, frozen by ``cgroup.freeze``); real-time priority
needs no group of the root there (a kernel without ``CONFIG_RT_GROUP_SCHED``, such as Debian's,
lets a real-time task into any group). ``isolation`` makes R (on a delegated base, after
moving the processes there, this one included, into its leaf ``course-grader``) and probes
real-time priority in a group of R.

Below the root level a measurement runs on the slot's CPU without holding it, at normal
priority, with the ``/proc`` ledger. ``CpuIsolation.missing()`` names what is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from grading.sandbox import cgroup2
from grading.sandbox.cgroups import (
    CgroupLayout,
    add,
    backend,
    detect_layout,
    empty,
    joiner,
    make,
    make_unique,
    mount_point,
    own_group,
    parse_cpus,
    read,
    rmdir_when_empty,
    writable,
)

__all__ = [
    "CpuIsolation",
    "Reservation",
    "isolation",
    "join_job",
    "leave_jobs",
    "parse_cpus",
    "pausable_group",
    "pause",
    "remove_group",
    "reserve",
    "rmdir_when_empty",
]

PARENT = "course-grading"  # the cgroup under each hierarchy's root that holds every grading job
LOCK = Path("/run/course-grading/cpus.lock")  # root-owned (the slot leases' folder)
REALTIME_PRIORITY = 1  # SCHED_RR priority of round processes (the lowest real-time one)
_POLL = 0.25  # seconds between looks for a free CPU


@dataclass(frozen=True)
class CpuIsolation:
    """What this machine lets a measurement have (root only): its own CPU, real-time priority, an exact ledger."""

    cpuset: Path | None = None  # cgroup v1 cpuset hierarchy: a CPU held for a measurement
    cpuacct: Path | None = None  # cgroup v1 cpuacct hierarchy (not co-mounted with cpu): per-CPU usage
    pressure: Path | None = None  # a cgroup v2 hierarchy with PSI: the time a group waited for others
    realtime: bool = False  # SCHED_RR permitted (in the cpu hierarchy's root)
    shares: Path | None = None  # cgroup v1 cpu hierarchy: an equal share of the CPUs per job
    freezer: Path | None = None  # cgroup v1 freezer hierarchy: a round process paused while the other side runs
    # "v2": every field above but ``cpuacct`` (None) is the base of the grader's v2 subtree (``cgroup2``), or None
    layout: str = "v1"
    why: str = ""  # v2: why the grader has no v2 subtree here (empty where it has one)

    def missing(self) -> list[str]:
        """Each protection of a measurement this machine lacks, in words an instructor can act on."""
        if self.layout == "v2":
            return cgroup2.missing(self.cpuset, self.realtime, self.shares, self.freezer, self.pressure, self.why)
        gaps = []
        if self.cpuset is None:
            gaps.append(
                "no CPU of its own for a measured test (needs root and cgroup v1's cpuset): other jobs' processes "
                "can run on the measured CPU; disturbed rounds are measured again, or the test is left for manual "
                "grading"
            )
        if not self.realtime:
            gaps.append(
                "measured processes at normal priority (needs root): any load on the machine shares the measured "
                "CPU; disturbed rounds are measured again, or the test is left for manual grading"
            )
        if self.shares is None:
            gaps.append(
                "no CPU share per job (needs root and cgroup v1's cpu controller): a kernel that starts many "
                "processes takes a larger share of the CPUs from the other jobs' kernels"
            )
        if self.freezer is None:
            gaps.append(
                "the two sides of a measured round timed one after the other, each in its own process (needs root "
                "and cgroup v1's freezer to pause the idle side): where the machine's speed drifts, so does the ratio"
            )
        if self.pressure is None:
            gaps.append(
                "disturbance of a measured test estimated from CPU time (no cgroup v2 pressure information): an "
                "answer whose own processes compete with each other on a busy machine can be left for manual "
                "grading instead of measured"
            )
        return gaps


@functools.cache
def _cgroups() -> CgroupLayout | None:
    """The file operations of the cgroup layout this host mounts (None: none the grader can write)."""
    return backend()


def _ops() -> CgroupLayout:
    """``_cgroups()``, where a caller holds a hierarchy's path (so that the layout has a backend)."""
    ops = _cgroups()
    if ops is None:
        raise OSError("no cgroup backend for this host's layout")
    return ops


@functools.cache
def isolation(level: str) -> CpuIsolation:
    """Probe (once per process) what a measurement can have here at sandbox ``level``."""
    v2 = sys.platform.startswith("linux") and detect_layout() == "v2"
    if level != "root" or not sys.platform.startswith("linux") or os.geteuid() != 0 or not _made(LOCK.parent):
        return CpuIsolation(layout="v2", why="needs the root level") if v2 else CpuIsolation()
    if v2:
        return _isolation_v2()
    ops = _cgroups()
    shares, cpuacct = (ops.usable("cpu"), ops.usable("cpuacct")) if ops is not None else (None, None)
    pressure = writable(mount_point("cgroup2"), "cpu.pressure")
    # the probe runs where a measurement does: in the cpu hierarchy's root (a child may have no real-time budget)
    realtime = _realtime(f"open({str(shares / 'cgroup.procs')!r}, 'w').write(str(os.getpid())); " if shares else "")
    return CpuIsolation(
        ops.usable("cpuset") if ops is not None else None,
        None if cpuacct is not None and cpuacct == shares else cpuacct,  # co-mounted: its groups lack real time
        pressure if pressure is not None and "full " in read(pressure / "cpu.pressure") else None,  # Linux >= 5.13
        realtime,
        shares,
        ops.usable("freezer") if ops is not None else None,
    )


def _realtime(join: str = "") -> bool:
    """Whether a new process may run at ``SCHED_RR`` after the Python statement ``join`` (moving it somewhere)."""
    probe = f"import os; {join}os.sched_setscheduler(0, os.SCHED_RR, os.sched_param({REALTIME_PRIORITY}))"
    try:
        command = [sys.executable, "-I", "-S", "-c", probe]
        return subprocess.run(command, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _isolation_v2() -> CpuIsolation:
    """``isolation`` on a cgroup v2 host: the grader's subtree, made here (``cgroup2.subtree``), and what it has."""
    with _locked():
        root, why = cgroup2.subtree(create=True)
    if root is None:
        return CpuIsolation(layout="v2", why=why)
    enabled = read(root / "cgroup.subtree_control").split()
    base = root.parent
    # the probe runs where a measurement does: in a group of R, which has the cpu controller
    probe = make_unique(root, "probe-")
    try:
        realtime = _realtime(f"open({str(probe / 'cgroup.procs')!r}, 'w').write(str(os.getpid())); ")
    finally:
        rmdir_when_empty(probe, wait=2.0)
    return CpuIsolation(
        base if "cpuset" in enabled else None,
        None,
        base if "full " in read(root / "cpu.pressure") else None,  # Linux >= 5.13
        realtime,
        base if "cpu" in enabled else None,
        base if (root / "cgroup.freeze").is_file() else None,  # Linux >= 5.2
        layout="v2",
    )


def _made(folder: Path) -> bool:
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- freezer groups (root)


def pausable_group(parent: Path) -> tuple[Path, Callable[[], None]]:
    """A new freezer group under ``parent``, and a ``preexec_fn`` that moves the child into it.

    The child joins before it runs anything (before ``exec``), so every process it starts
    is born inside: ``pause`` stops them all at once, and none can leave (a grading user
    cannot write a cgroup file).
    """
    group = make_unique(parent, "round-")
    return group, joiner(group)


def remove_group(group: Path) -> bool:
    """Remove a round process's freezer group once its processes are gone (killed ones take a moment)."""
    return rmdir_when_empty(group, wait=2.0)


def pause(group: Path, frozen: bool, timeout: float = 5.0) -> bool:
    """Freeze (``frozen``) or thaw every process of a freezer ``group``; whether it got there in ``timeout`` s."""
    return _ops().freeze(group, frozen, timeout)


# ----------------------------------------------------------------------------- job and measurement groups (root)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """The machine-wide lock over every grading run's job and measurement cgroups."""
    fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _enter(group: Path) -> None:
    add(group, os.getpid())


def _cpuset_parent(cpuset: Path) -> Path:
    """``course-grading`` in the cpuset hierarchy, created with every CPU and memory node."""
    ops, parent = _ops(), cpuset / PARENT
    make(parent)
    ops.fill_cpuset(parent, cpuset)
    return parent


def _cpuset_group(parent: Path, name: str, cpus: set[int]) -> Path:
    """The cpuset cgroup ``parent/name``, created (empty) with ``cpus`` if missing (``_rebalance`` sets a job's)."""
    ops, group = _ops(), parent / name
    if make(group):
        ops.copy_mems(group, parent)
        ops.set_cpus(group, cpus)
    return group


def _rebalance(parent: Path, keep: Path | None = None) -> set[int]:
    """Every job cgroup gets every CPU no measurement holds; stale groups go. Returns the CPUs held. Lock held."""
    ops = _ops()
    every = ops.cpus(parent)
    held: set[int] = set()
    for group in sorted(parent.glob("measure-*")):
        if group != keep and empty(group) and rmdir_when_empty(group):  # its worker died mid-measurement
            continue
        held |= ops.cpus(group)
    rest = every - held or every  # never empty: a measurement leaves one CPU to the rest
    for group in sorted(parent.glob("job-*")):
        if group != keep and empty(group) and rmdir_when_empty(group):  # its run has ended
            continue
        with contextlib.suppress(OSError):
            ops.set_cpus(group, rest)
    return held


def _share(shares: Path, keep: Path | None = None) -> Path:
    """``course-grading`` in the cpu hierarchy, weighing one process per job; stale job groups go. Lock held."""
    ops, parent = _ops(), shares / PARENT
    make(parent)
    jobs = [g for g in sorted(parent.glob("job-*")) if g == keep or not (empty(g) and rmdir_when_empty(g))]
    ops.set_weight(parent, max(1, len(jobs)))
    return parent


def join_job(level: str, uid: int) -> bool:
    """Move this grading worker (and what it starts from now on) into ``job-<uid>``; whether it could."""
    iso = isolation(level)
    if iso.cpuset is None and iso.shares is None:
        return False
    if iso.layout == "v2":
        with _locked():
            return cgroup2.join(_v2_root(iso), uid)
    with _locked():
        if iso.cpuset is not None:
            parent = _cpuset_parent(iso.cpuset)
            group = _cpuset_group(parent, f"job-{uid}", _ops().cpus(parent))
            _rebalance(parent, keep=group)  # before it holds anything: it loses every CPU a measurement holds
            _enter(group)
        if iso.shares is not None:
            group = iso.shares / PARENT / f"job-{uid}"
            make(iso.shares / PARENT)
            make(group)
            _share(iso.shares, keep=group)
            _enter(group)
    return True


def leave_jobs(level: str, uids: Iterable[int]) -> None:
    """Remove the (now empty) cgroups of a pool's grading users; called when its workers are gone."""
    iso = isolation(level)
    uids = list(uids)
    if not uids or (iso.cpuset is None and iso.shares is None):
        return
    if iso.layout == "v2":
        with _locked():
            cgroup2.leave_jobs(_v2_root(iso), uids)
        return
    with _locked():
        for hierarchy in (iso.cpuset, iso.shares):
            if hierarchy is not None and (hierarchy / PARENT).is_dir():
                for uid in uids:
                    rmdir_when_empty(hierarchy / PARENT / f"job-{uid}", wait=1.0)
        if iso.cpuset is not None:
            _rebalance(_cpuset_parent(iso.cpuset))
        if iso.shares is not None:
            _share(iso.shares)


def _v2_root(iso: CpuIsolation) -> Path:
    """R, the grader's v2 subtree (``cgroup2``): its base is what each of ``iso``'s fields holds."""
    base = iso.cpuset or iso.shares or iso.freezer or iso.pressure
    assert base is not None
    return base / PARENT


@dataclass(frozen=True)
class Reservation:
    """The CPU a measurement runs on, whether it holds it, and where its processes are accounted."""

    cpu: int
    held: bool = False  # no other job may run on ``cpu`` meanwhile
    realtime: bool = False  # round processes run at SCHED_RR
    pressure: Path | None = None  # the measurement's cgroup v2 group (its cpu.pressure)
    accounting: Path | None = None  # the measurement's cgroup v1 cpuacct group
    freezer: Path | None = None  # the measurement's cgroup v1 freezer group: each round process gets one inside
    waited: float = 0.0  # seconds spent waiting for a free CPU

    def describe(self) -> str:
        if self.held:
            how = "a CPU of its own (no other grading job could run there)"
        else:
            how = "a CPU it could not keep to itself (other work may run there; disturbed runs are measured again)"
        return how + (", at real-time priority" if self.realtime else "")


def _hold(iso: CpuIsolation, name: str, preferred: int) -> tuple[int | None, Path | None]:
    """A free CPU for ``name`` that leaves another one to the rest, with its cpuset group; (None, None) if none."""
    assert iso.cpuset is not None
    ops, parent = _ops(), _cpuset_parent(iso.cpuset)
    free = sorted(ops.cpus(parent) - _rebalance(parent))
    if len(free) < 2:
        return None, None
    cpu = preferred if preferred in free else free[-1]
    group = _cpuset_group(parent, name, {cpu})
    ops.set_cpus(group, {cpu})
    return cpu, group


_Moves = dict[Path, tuple[Path, Path]]  # hierarchy -> (the measurement's group there, where this process was)


def _take(
    iso: CpuIsolation, name: str, preferred: int, cpus: int, wait: float
) -> tuple[int | None, Path | None, _Moves]:
    """Wait (up to ``wait`` s) for a CPU to hold, then move this process into the measurement's groups.

    Returns the CPU held and its cpuset group (None, None where none was free in time, or
    there is no cpuset), and where this process moved.
    """
    started = time.monotonic()
    while True:
        with _locked():
            cpu, held = (None, None) if iso.cpuset is None else _hold(iso, name, preferred)
            out_of_turns = iso.cpuset is None or cpus < 2 or time.monotonic() - started > wait
            if cpu is not None or out_of_turns:
                return cpu, held, _move_in(iso, name, held)
        time.sleep(_POLL)


def _move_in(iso: CpuIsolation, name: str, held: Path | None) -> _Moves:
    """Move this process into the measurement's groups: its held cpuset, the cpu root, its accounting. Lock held."""
    moves: _Moves = {}
    if held is not None:
        cpuset = held.parent.parent  # (iso.cpuset: held is <cpuset>/course-grading/measure-<uid>)
        moves[cpuset] = (held, own_group(cpuset, "cpuset"))
        if iso.shares is not None:  # real time is budgeted in the cpu hierarchy's root
            moves[iso.shares] = (iso.shares, own_group(iso.shares, "cpu"))
    for hierarchy, controller in ((iso.cpuacct, "cpuacct"), (iso.pressure, "")):
        if hierarchy is not None:
            (hierarchy / PARENT).mkdir(exist_ok=True)
            (hierarchy / PARENT / name).mkdir(exist_ok=True)
            moves[hierarchy] = (hierarchy / PARENT / name, own_group(hierarchy, controller))
    for group, _ in moves.values():
        _enter(group)
    if held is not None:
        _rebalance(held.parent, keep=held)
    return moves


def _move_back(iso: CpuIsolation, moves: _Moves, held: Path | None) -> None:
    """Back where this process was (a worker: its job's cgroup, recreated if pruned meanwhile). Lock held."""
    for hierarchy, (group, back) in moves.items():
        if back.parent.name == PARENT and not back.is_dir():  # a job's group, pruned while it was empty
            back.mkdir()
            if hierarchy == iso.cpuset:
                _ops().copy_mems(back, back.parent)
                _rebalance(back.parent, keep=back)
        _enter(back)
        if group != hierarchy:  # (the cpu hierarchy's root stays)
            rmdir_when_empty(group, wait=2.0)
    if held is not None:
        _rebalance(held.parent)


@contextlib.contextmanager
def reserve(level: str, slot: int, uid: int | None, wait: float) -> Iterator[Reservation]:
    """A CPU for one measurement, held until the block ends (see the module docstring).

    Waits up to ``wait`` seconds for a CPU that leaves another one to the rest; past that
    (or on a machine of one CPU, or without cgroup v1's cpuset), the measurement runs on the
    slot's CPU without holding it, and says so (``Reservation.describe``).
    """
    iso = isolation(level)
    if iso.layout == "v2" and (iso.cpuset or iso.pressure or iso.freezer):
        with _reserve_v2(iso, slot, uid, wait) as reservation:
            yield reservation
        return
    cpus = sorted(os.sched_getaffinity(0))  # a worker's own: its job's cpuset, less what others hold now
    if iso.cpuset is not None:
        with _locked():
            cpus = sorted(_ops().cpus(_cpuset_parent(iso.cpuset)))
    preferred = cpus[slot % len(cpus)]
    if uid is None or not (iso.cpuset or iso.cpuacct or iso.pressure):
        yield Reservation(preferred)
        return
    name, started = f"measure-{uid}", time.monotonic()
    cpu, held, moves = _take(iso, name, preferred, len(cpus), wait)
    if cpu is None:  # not held: one of the CPUs this process's job may use now
        allowed = sorted(os.sched_getaffinity(0))
        cpu = preferred if preferred in allowed else allowed[slot % len(allowed)]
    freezer = iso.freezer / PARENT / name if iso.freezer is not None else None
    reservation = Reservation(
        cpu,
        held=held is not None,
        realtime=iso.realtime and held is not None,  # real-time only on a CPU no other measurement may share
        pressure=moves[iso.pressure][0] if iso.pressure is not None else None,
        accounting=moves[iso.cpuacct][0] if iso.cpuacct is not None else None,
        freezer=freezer if freezer is not None and _made(freezer) else None,
        waited=time.monotonic() - started,
    )
    try:
        yield reservation
    finally:
        if reservation.freezer is not None:  # its round processes' groups are gone with them
            rmdir_when_empty(reservation.freezer, wait=2.0)
        with _locked():
            _move_back(iso, moves, held)


@contextlib.contextmanager
def _reserve_v2(iso: CpuIsolation, slot: int, uid: int | None, wait: float) -> Iterator[Reservation]:
    """``reserve`` on cgroup v2: the measurement's own group in R (``cgroup2.measurement``), the same rules."""
    root = _v2_root(iso)
    with _locked():
        cpus = sorted(_ops().cpus(root)) if iso.cpuset is not None else sorted(os.sched_getaffinity(0))
    preferred = cpus[slot % len(cpus)]
    if uid is None:
        yield Reservation(preferred)
        return
    started = time.monotonic()
    hold = iso.cpuset is not None and len(cpus) >= 2
    cpu, group, back = cgroup2.take(root, uid, preferred, hold, started + wait, _locked, _POLL)
    if cpu is None:  # not held: one of the CPUs its job may use now
        allowed = sorted(os.sched_getaffinity(0))
        cpu = preferred if preferred in allowed else allowed[slot % len(allowed)]
    held = group.name.startswith("measure-")
    reservation = Reservation(
        cpu,
        held=held,
        realtime=iso.realtime and held,
        pressure=group if iso.pressure is not None else None,
        freezer=group if iso.freezer is not None else None,
        waited=time.monotonic() - started,
    )
    try:
        yield reservation
    finally:
        with _locked():
            cgroup2.leave(root, group, back)
