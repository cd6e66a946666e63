"""The measured CPU's account: how long, during a timed run, something else had it.

Contract. ``Ledger(reservation, roots)``: ``sample()`` before and after an interval, then
``between(before, after)`` is a ``Disturbance``: how long, during that interval, the
measurement's processes wanted the CPU while something else had it (seconds).

* With a cgroup v2 hierarchy (mounted beside v1 as here, or alone), that is the measurement
  group's CPU pressure, ``full`` line (the kernel's PSI, for cgroups since Linux 5.13: time
  when some of the group's tasks waited and none ran; on one CPU, exactly the time others
  had it), in microseconds; plus what the hypervisor stole from the CPU (``/proc/stat``). A
  learner's processes waiting for each other (a ``DataLoader``'s workers) are no
  disturbance: one of the group runs. Real-time priority keeps ordinary tasks off the CPU
  but for the kernel's fair server (since Linux 6.12; RT throttling before: up to 50 ms a
  second for ordinary tasks stuck there), so that time, exact, is taken off a timed run
  (``Disturbance.correction``) up to ``CORRECTABLE`` of it; beyond, the run is disturbed.
* Without PSI the ledger takes ``min(others' CPU time on it, own waiting time)``
  (``cpuacct.usage_percpu`` of a cgroup v1 group, or ``/proc/stat`` against
  ``/proc/PID/schedstat`` of the process tree under ``roots()``), an upper bound that is not
  taken off anything: a run is disturbed past ``TOLERANCE``, and an answer whose processes
  both idle and compete with each other on a loaded machine can then read as disturbed.
  From ``/proc`` it sees only the waits of processes alive when it samples (a child that
  has exited took its own with it).

Where the measurement's groups are, and whether its CPU is held, is ``grading.sandbox.cpus``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grading.sandbox.cgroups import read

if TYPE_CHECKING:
    from grading.sandbox.cpus import Reservation

__all__ = ["CORRECTABLE", "TOLERANCE", "Disturbance", "Ledger", "Sample"]

TOLERANCE = 0.05  # other work may take this share of a timed run whose disturbance is only estimated (no PSI)
CORRECTABLE = 0.25  # with PSI, the time other work took (up to this share of a run) is taken off its time
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


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
class Sample:
    """The counters at one moment (``Ledger.sample``); only differences between two mean anything."""

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

    def sample(self) -> Sample:
        """The counters now: PSI where the measurement has a v2 group, else CPU times (cpuacct, or /proc)."""
        stolen = _proc_stat(self.cpu)[1]
        if self.pressure is not None:
            for line in read(self.pressure / "cpu.pressure").splitlines():
                if line.startswith("full "):
                    return Sample(time.perf_counter(), stolen, full=int(line.rsplit("total=", 1)[1]) / 1e6)
        if self.accounting is not None:
            every = read(self.accounting.parent.parent / "cpuacct.usage_percpu").split()  # the hierarchy's root
            own = read(self.accounting / "cpuacct.usage_percpu").split()
            waited = sum(_schedstat(int(t))[1] for t in read(self.accounting / "tasks").split())
            busy, own_seconds = int(every[self.cpu]) / 1e9, int(own[self.cpu]) / 1e9
            return Sample(time.perf_counter(), stolen, busy=busy, own=own_seconds, waited=waited / 1e9)
        return self._from_proc(stolen)

    def _from_proc(self, stolen: float) -> Sample:
        """Without cgroups: the CPU's busy time against the CPU and run-queue time of the round's process tree."""
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
        return Sample(time.perf_counter(), stolen, busy=busy, own=run / 1e9 + reaped, waited=waited / 1e9)

    def between(self, before: Sample, after: Sample) -> Disturbance:
        """What other work took of the CPU from the measurement between two samples."""
        seconds, stolen = after.when - before.when, after.stolen - before.stolen
        if self.pressure is not None:
            return Disturbance(seconds, after.full - before.full + stolen, True, self.resolution)
        others = (after.busy - before.busy) - (after.own - before.own)
        waited = after.waited - before.waited if self.schedstat else others
        return Disturbance(seconds, max(0.0, min(others, waited)) + stolen, False, self.resolution)
