"""A measurement's CPU: its own while it runs, and an account of who else took it.

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
* ``Ledger``: how long, during an interval, the measurement's processes wanted the CPU while
  something else had it. With a cgroup v2 hierarchy (mounted beside v1 as here, or alone),
  that is the measurement group's CPU pressure, ``full`` line (the kernel's PSI, for cgroups
  since Linux 5.13: time when some of the group's tasks waited and none ran; on one CPU,
  exactly the time others had it), in microseconds; plus what the hypervisor stole from the
  CPU (``/proc/stat``). A learner's processes waiting for each other (a ``DataLoader``'s
  workers) are no disturbance: one of the group runs. Real-time priority keeps ordinary
  tasks off the CPU but for the kernel's fair server (since Linux 6.12; RT throttling
  before: up to 50 ms a second for ordinary tasks stuck there), so that time, exact, is
  taken off a timed run (``Disturbance.correction``) up to ``CORRECTABLE`` of it; beyond,
  the run is disturbed. Without PSI the ledger takes ``min(others' CPU time on it, own
  waiting time)`` (``cpuacct.usage_percpu`` or ``/proc/stat`` against
  ``/proc/PID/schedstat``), an upper bound that is not taken off anything: a run is
  disturbed past ``TOLERANCE``, and an answer whose processes both idle and compete with
  each other on a loaded machine can then read as disturbed. From ``/proc`` it sees only the
  waits of processes alive when it samples (a child that has exited took its own with it).

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
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CORRECTABLE",
    "TOLERANCE",
    "CpuIsolation",
    "Disturbance",
    "Ledger",
    "Reservation",
    "isolation",
    "join_job",
    "leave_jobs",
    "pausable_group",
    "pause",
    "remove_group",
    "reserve",
    "rmdir_when_empty",
]

PARENT = "course-grading"  # the cgroup under each hierarchy's root that holds every grading job
LOCK = Path("/run/course-grading/cpus.lock")  # root-owned (the slot leases' folder)
TOLERANCE = 0.05  # other work may take this share of a timed run whose disturbance is only estimated (no PSI)
CORRECTABLE = 0.25  # with PSI, the time other work took (up to this share of a run) is taken off its time
REALTIME_PRIORITY = 1  # SCHED_RR priority of round processes (the lowest real-time one)
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
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

    def missing(self) -> list[str]:
        """Each protection of a measurement this machine lacks, in words an instructor can act on."""
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


def _mount(fstype: str, controller: str = "") -> Path | None:
    """Where a cgroup hierarchy is mounted: v1 (``cgroup``) with ``controller``, or v2 (``cgroup2``)."""
    with contextlib.suppress(OSError), open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 3 and fields[2] == fstype and (not controller or controller in fields[3].split(",")):
                return Path(fields[1].replace("\\040", " "))
    return None


def _writable(hierarchy: Path | None, *files: str) -> Path | None:
    ok = hierarchy is not None and all((hierarchy / f).is_file() for f in files)
    return hierarchy if ok and os.access(hierarchy / "cgroup.procs", os.W_OK) else None  # type: ignore[operator]


@functools.cache
def isolation(level: str) -> CpuIsolation:
    """Probe (once per process) what a measurement can have here at sandbox ``level``."""
    if level != "root" or not sys.platform.startswith("linux") or os.geteuid() != 0 or not _made(LOCK.parent):
        return CpuIsolation()
    shares = _writable(_mount("cgroup", "cpu"), "cpu.shares")
    cpuacct = _writable(_mount("cgroup", "cpuacct"), "cpuacct.usage_percpu")
    pressure = _writable(_mount("cgroup2"), "cpu.pressure")
    # the probe runs where a measurement does: in the cpu hierarchy's root (a child may have no real-time budget)
    root = f"open({str(shares / 'cgroup.procs')!r}, 'w').write(str(os.getpid())); " if shares else ""
    probe = f"import os; {root}os.sched_setscheduler(0, os.SCHED_RR, os.sched_param({REALTIME_PRIORITY}))"
    try:
        command = [sys.executable, "-I", "-S", "-c", probe]
        realtime = subprocess.run(command, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        realtime = False
    return CpuIsolation(
        _writable(_mount("cgroup", "cpuset"), "cpuset.cpus", "cpuset.effective_cpus"),
        None if cpuacct is not None and cpuacct == shares else cpuacct,  # co-mounted: its groups lack real time
        pressure if pressure is not None and "full " in _read(pressure / "cpu.pressure") else None,  # Linux >= 5.13
        realtime,
        shares,
        _writable(_mount("cgroup", "freezer")),
    )


def _made(folder: Path) -> bool:
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- cgroups (root)


def pausable_group(parent: Path) -> tuple[Path, Callable[[], None]]:
    """A new freezer group under ``parent``, and a ``preexec_fn`` that moves the child into it.

    The child joins before it runs anything (before ``exec``), so every process it starts
    is born inside: ``pause`` stops them all at once, and none can leave (a grading user
    cannot write a cgroup file).
    """
    group = Path(tempfile.mkdtemp(prefix="round-", dir=parent))
    procs = str(group / "cgroup.procs")

    def join() -> None:
        with open(procs, "w", encoding="ascii") as file:
            file.write(str(os.getpid()))

    return group, join


def remove_group(group: Path) -> bool:
    """Remove a round process's freezer group once its processes are gone (killed ones take a moment)."""
    return rmdir_when_empty(group, wait=2.0)


def pause(group: Path, frozen: bool, timeout: float = 5.0) -> bool:
    """Freeze (``frozen``) or thaw every process of a freezer ``group``; whether it got there in ``timeout`` s."""
    state = "FROZEN" if frozen else "THAWED"
    _write(group / "freezer.state", state)
    deadline = time.monotonic() + timeout
    while _read(group / "freezer.state").strip() != state:  # FREEZING until every task has stopped
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def parse_cpus(text: str) -> set[int]:
    """``"0-2,5"`` -> ``{0, 1, 2, 5}`` (the kernel's list format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii")


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(value)


def _cpus_text(cpus: set[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def _empty(group: Path) -> bool:
    try:
        return not _read(group / "cgroup.procs").strip()
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


def _own_group(hierarchy: Path, controller: str) -> Path:
    """The cgroup of ``hierarchy`` this process is in: v1's for ``controller``, or v2's (``controller`` empty)."""
    with open("/proc/self/cgroup", encoding="ascii") as groups:
        for line in groups:
            number, controllers, path = line.rstrip("\n").split(":", 2)
            if (not controller and number == "0") or (controller and controller in controllers.split(",")):
                return hierarchy / path.lstrip("/")
    return hierarchy


def _enter(group: Path) -> None:
    _write(group / "cgroup.procs", str(os.getpid()))


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """The machine-wide lock over every grading run's job and measurement cgroups."""
    fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _cpuset_parent(cpuset: Path) -> Path:
    """``course-grading`` in the cpuset hierarchy, created with every CPU and memory node."""
    parent = cpuset / PARENT
    if not parent.is_dir():
        parent.mkdir()
    for name in ("mems", "cpus"):
        if not _read(parent / f"cpuset.{name}").strip():
            _write(parent / f"cpuset.{name}", _read(cpuset / f"cpuset.effective_{name}").strip())
    return parent


def _cpuset_group(parent: Path, name: str, cpus: set[int]) -> Path:
    """The cpuset cgroup ``parent/name``, created (empty) with ``cpus`` if missing (``_rebalance`` sets a job's)."""
    group = parent / name
    if not group.is_dir():
        group.mkdir()
        _write(group / "cpuset.mems", _read(parent / "cpuset.mems").strip())
        _write(group / "cpuset.cpus", _cpus_text(cpus))
    return group


def _rebalance(parent: Path, keep: Path | None = None) -> set[int]:
    """Every job cgroup gets every CPU no measurement holds; stale groups go. Returns the CPUs held. Lock held."""
    every = parse_cpus(_read(parent / "cpuset.cpus"))
    held: set[int] = set()
    for group in sorted(parent.glob("measure-*")):
        if group != keep and _empty(group) and rmdir_when_empty(group):  # its worker died mid-measurement
            continue
        held |= parse_cpus(_read(group / "cpuset.cpus"))
    rest = every - held or every  # never empty: a measurement leaves one CPU to the rest
    for group in sorted(parent.glob("job-*")):
        if group != keep and _empty(group) and rmdir_when_empty(group):  # its run has ended
            continue
        with contextlib.suppress(OSError):
            _write(group / "cpuset.cpus", _cpus_text(rest))
    return held


def _share(shares: Path, keep: Path | None = None) -> Path:
    """``course-grading`` in the cpu hierarchy, weighing one process per job; stale job groups go. Lock held."""
    parent = shares / PARENT
    parent.mkdir(exist_ok=True)
    jobs = [g for g in sorted(parent.glob("job-*")) if g == keep or not (_empty(g) and rmdir_when_empty(g))]
    _write(parent / "cpu.shares", str(1024 * max(1, len(jobs))))
    return parent


def join_job(level: str, uid: int) -> bool:
    """Move this grading worker (and what it starts from now on) into ``job-<uid>``; whether it could."""
    iso = isolation(level)
    if iso.cpuset is None and iso.shares is None:
        return False
    with _locked():
        if iso.cpuset is not None:
            parent = _cpuset_parent(iso.cpuset)
            group = _cpuset_group(parent, f"job-{uid}", parse_cpus(_read(parent / "cpuset.cpus")))
            _rebalance(parent, keep=group)  # before it holds anything: it loses every CPU a measurement holds
            _enter(group)
        if iso.shares is not None:
            group = iso.shares / PARENT / f"job-{uid}"
            (iso.shares / PARENT).mkdir(exist_ok=True)
            group.mkdir(exist_ok=True)
            _share(iso.shares, keep=group)
            _enter(group)
    return True


def leave_jobs(level: str, uids: Iterable[int]) -> None:
    """Remove the (now empty) cgroups of a pool's grading users; called when its workers are gone."""
    iso = isolation(level)
    uids = list(uids)
    if not uids or (iso.cpuset is None and iso.shares is None):
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
    parent = _cpuset_parent(iso.cpuset)
    free = sorted(parse_cpus(_read(parent / "cpuset.cpus")) - _rebalance(parent))
    if len(free) < 2:
        return None, None
    cpu = preferred if preferred in free else free[-1]
    group = _cpuset_group(parent, name, {cpu})
    _write(group / "cpuset.cpus", str(cpu))
    return cpu, group


@contextlib.contextmanager
def reserve(level: str, slot: int, uid: int | None, wait: float) -> Iterator[Reservation]:
    """A CPU for one measurement, held until the block ends (see the module docstring).

    Waits up to ``wait`` seconds for a CPU that leaves another one to the rest; past that
    (or on a machine of one CPU, or without cgroup v1's cpuset), the measurement runs on the
    slot's CPU without holding it, and says so (``Reservation.describe``).
    """
    iso = isolation(level)
    cpus = sorted(os.sched_getaffinity(0))  # a worker's own: its job's cpuset, less what others hold now
    if iso.cpuset is not None:
        with _locked():
            cpus = sorted(parse_cpus(_read(_cpuset_parent(iso.cpuset) / "cpuset.cpus")))
    preferred = cpus[slot % len(cpus)]
    if uid is None or not (iso.cpuset or iso.cpuacct or iso.pressure):
        yield Reservation(preferred)
        return
    name, started = f"measure-{uid}", time.monotonic()
    while True:
        with _locked():
            cpu, held = (None, None) if iso.cpuset is None else _hold(iso, name, preferred)
            out_of_turns = iso.cpuset is None or len(cpus) < 2 or time.monotonic() - started > wait
            if cpu is not None or out_of_turns:
                groups = {}  # hierarchy -> (this measurement's group, where this process was)
                if held is not None:
                    groups[iso.cpuset] = (held, _own_group(iso.cpuset, "cpuset"))  # type: ignore[index]
                    if iso.shares is not None:  # real time is budgeted in the cpu hierarchy's root
                        groups[iso.shares] = (iso.shares, _own_group(iso.shares, "cpu"))
                for hierarchy, controller in ((iso.cpuacct, "cpuacct"), (iso.pressure, "")):
                    if hierarchy is not None:
                        (hierarchy / PARENT).mkdir(exist_ok=True)
                        (hierarchy / PARENT / name).mkdir(exist_ok=True)
                        groups[hierarchy] = (hierarchy / PARENT / name, _own_group(hierarchy, controller))
                for group, _ in groups.values():
                    _enter(group)
                if held is not None:
                    _rebalance(held.parent, keep=held)
                break
        time.sleep(_POLL)
    if cpu is None:  # not held: one of the CPUs this process's job may use now
        allowed = sorted(os.sched_getaffinity(0))
        cpu = preferred if preferred in allowed else allowed[slot % len(allowed)]
    freezer = iso.freezer / PARENT / name if iso.freezer is not None else None
    reservation = Reservation(
        cpu,
        held=held is not None,
        realtime=iso.realtime and held is not None,  # real-time only on a CPU no other measurement may share
        pressure=groups[iso.pressure][0] if iso.pressure is not None else None,
        accounting=groups[iso.cpuacct][0] if iso.cpuacct is not None else None,
        freezer=freezer if freezer is not None and _made(freezer) else None,
        waited=time.monotonic() - started,
    )
    try:
        yield reservation
    finally:
        if reservation.freezer is not None:  # its round processes' groups are gone with them
            rmdir_when_empty(reservation.freezer, wait=2.0)
        with _locked():  # back where this process was (a worker: its job's cgroup, recreated if pruned meanwhile)
            for hierarchy, (group, back) in groups.items():
                if back.parent.name == PARENT and not back.is_dir():  # a job's group, pruned while it was empty
                    back.mkdir()
                    if hierarchy == iso.cpuset:
                        _write(back / "cpuset.mems", _read(back.parent / "cpuset.mems").strip())
                        _rebalance(back.parent, keep=back)
                _enter(back)
                if group != hierarchy:  # (the cpu hierarchy's root stays)
                    rmdir_when_empty(group, wait=2.0)
            if held is not None:
                _rebalance(held.parent)


# ----------------------------------------------------------------------------- the measured CPU's ledger


@dataclass(frozen=True)
class Disturbance:
    """How much of an interval other work had the measured CPU while the measurement wanted it (seconds)."""

    seconds: float  # the interval's wall time
    lost: float  # time the measurement's processes waited while something else ran there, and steal
    exact: bool  # from the kernel's pressure accounting (else an upper bound from CPU times)
    resolution: float  # what the counters resolve

    @property
    def share(self) -> float:
        return self.lost / self.seconds if self.seconds > 0 else 0.0

    def substantial(self) -> bool:
        """Too much to take off a timed run: over ``CORRECTABLE`` when exact, else over ``TOLERANCE``."""
        return self.lost > max((CORRECTABLE if self.exact else TOLERANCE) * self.seconds, self.resolution)

    @property
    def correction(self) -> float:
        """Seconds to take off the run's time: the time others had its CPU, when the kernel accounted it exactly."""
        return self.lost if self.exact else 0.0

    def __str__(self) -> str:
        return f"other work took {self.lost * 1e3:.0f} ms of its CPU ({self.share:.0%} of {self.seconds:.2f} s)"


@dataclass(frozen=True)
class _Sample:
    when: float
    stolen: float  # seconds the hypervisor took from the CPU
    full: float = 0.0  # PSI: seconds the group waited while none of it ran
    busy: float = 0.0  # without PSI: CPU seconds the CPU ran anything
    own: float = 0.0  # without PSI: CPU seconds of the measurement's processes
    waited: float = 0.0  # without PSI: seconds they waited to run


def _proc_stat(cpu: int) -> tuple[float, float]:
    """Busy and stolen seconds of ``cpu`` from /proc/stat (busy: user, nice, system, irq, softirq)."""
    with open("/proc/stat", encoding="ascii") as stat:
        for line in stat:
            if line.startswith(f"cpu{cpu} "):
                ticks = [int(x) for x in line.split()[1:]]
                return sum(ticks[i] for i in (0, 1, 2, 5, 6)) * _TICK, ticks[7] * _TICK
    return 0.0, 0.0


def _schedstat(tid: int) -> tuple[int, int]:
    """(ns run, ns waited to run) of a thread; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{tid}/schedstat", encoding="ascii") as stat:
            run, waited, _ = stat.read().split()
        return int(run), int(waited)
    except (OSError, ValueError):
        return 0, 0


def _tree(roots: Iterable[int]) -> list[int]:
    """``roots`` and every live descendant (through ``/proc/PID/task/TID/children``)."""
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as children:
                    todo += [int(child) for child in children.read().split()]
    return found


class Ledger:
    """The measured CPU's account: ``sample()`` before and after an interval, then ``between(before, after)``."""

    def __init__(self, reservation: Reservation, roots: Callable[[], list[int]]) -> None:
        self.cpu = reservation.cpu
        self.pressure = reservation.pressure
        self.accounting = reservation.accounting
        self.roots = roots  # the round process, for the /proc accounting without cgroups
        self.schedstat = os.path.exists("/proc/self/schedstat")
        self.resolution = 0.002 if self.pressure or self.accounting else 3 * _TICK

    def sample(self) -> _Sample:
        stolen = _proc_stat(self.cpu)[1]
        if self.pressure is not None:
            for line in _read(self.pressure / "cpu.pressure").splitlines():
                if line.startswith("full "):
                    return _Sample(time.perf_counter(), stolen, full=int(line.rsplit("total=", 1)[1]) / 1e6)
        if self.accounting is not None:
            every = _read(self.accounting.parent.parent / "cpuacct.usage_percpu").split()  # the hierarchy's root
            own = _read(self.accounting / "cpuacct.usage_percpu").split()
            waited = sum(_schedstat(int(t))[1] for t in _read(self.accounting / "tasks").split())
            busy, own_seconds = int(every[self.cpu]) / 1e9, int(own[self.cpu]) / 1e9
            return _Sample(time.perf_counter(), stolen, busy=busy, own=own_seconds, waited=waited / 1e9)
        busy, _ = _proc_stat(self.cpu)
        run = waited = 0
        reaped = 0.0  # CPU seconds of children already reaped (their threads are gone from /proc)
        for pid in _tree(self.roots()):
            with contextlib.suppress(OSError, ValueError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    ran, delay = _schedstat(int(tid))
                    run, waited = run + ran, waited + delay
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                reaped += (int(fields[13]) + int(fields[14])) * _TICK  # cutime, cstime
        return _Sample(time.perf_counter(), stolen, busy=busy, own=run / 1e9 + reaped, waited=waited / 1e9)

    def between(self, before: _Sample, after: _Sample) -> Disturbance:
        seconds, stolen = after.when - before.when, after.stolen - before.stolen
        if self.pressure is not None:
            return Disturbance(seconds, after.full - before.full + stolen, True, self.resolution)
        others = (after.busy - before.busy) - (after.own - before.own)
        waited = after.waited - before.waited if self.schedstat else others
        return Disturbance(seconds, max(0.0, min(others, waited)) + stolen, False, self.resolution)
