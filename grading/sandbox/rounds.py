"""Timed rounds of a measured test: fresh jailed processes, timed by the grader's own clock.

Contract, grader side: ``RoundProcess.start(...)`` starts ``python -I -m
grading.sandbox.rounds`` in a fresh jail (own PID, mount, IPC and network namespaces, a
fresh working directory, the environment the grader sets, pinned to the measurement's CPU
with ``sched_setaffinity`` refused, at real-time priority where the measurement holds that
CPU: ``grading.sandbox.cpus``) and sends it its setup, a JSON object whose ``entry``
(``module:function``, importable inside the sandbox) the process calls with a
``Channel``. ``wait_ready`` waits until the entry says it is ready (after its warm-up);
``round(spec)`` sends one round's inputs and measures, with this process's clock, the
time until the whole reply has arrived: the clock stops on the last byte of the result,
so a result must be computed and serialised before it counts. Where the reservation has a
freezer group (root), ``pause()`` stops the process and everything it started, and
``resume()`` (or the ``resumed()`` block) lets them run again: the referee keeps both sides
alive and pauses the one it is not timing. Where a kernel would get a memory budget
(``grading.sandbox.memory``: root, a writable cgroup v1 ``memory`` hierarchy; on a host that
mounts only cgroup v2, the round's freezer group in the grader's subtree), so does each
round process, of the same size (``Limits.job_memory_bytes``), shared with every process it
starts: once the OOM killer has struck in its group, every process there is killed and the
round fails as the process's own (``RoundError``, saying so). ``close()`` kills the process,
and with it every process it started (its PID namespace), and removes its working directory. Nothing the
process does can reach the clock, the other side's processes or the code that scores the
result: those run in this process.

Every wait is also accounted on the measured CPU (``ledger.Ledger``): a timed round during
which other work took a substantial share of that CPU from the process raises
``Disturbed`` (carrying its time and result), and so does a wait that ran out of time while
other work had the CPU. ``Disturbed`` is the machine's doing, never the learner's: measure
again, or leave the grade to a person. ``RoundError`` is the process's own failure.

Child side (``main``): the process keeps a private copy of the pipe to the grader and
points its own stdout at stderr (the log), so that a ``print`` cannot corrupt the
protocol; then it runs the entry.

Wire format, child to grader: each message is a 4-byte big-endian length, a JSON header
of that length, then the raw bytes of the arrays the header lists
(``"arrays": [[name, dtype, shape, nbytes], ...]``). Grader to child: one JSON object per
line; end of input means stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grading.errors import CourseError
from grading.sandbox.cpus import REALTIME_PRIORITY, Reservation, pausable_group, pause, remove_group
from grading.sandbox.ledger import Disturbance, Ledger, Sample
from grading.sandbox.memory import MemoryBudget, budget
from grading.sandbox.protections import (
    GRADING_UID_BASE,
    Limits,
    Protections,
    jail_argv,
    parent_death_signal,
    size_text,
)
from grading.sandbox.round_child import Channel, echo, main

__all__ = ["Channel", "Disturbed", "Message", "RoundError", "RoundProcess", "echo", "main", "starter"]

MAX_HEADER = 1 << 20  # bytes of a message's JSON header at most
MAX_ARRAYS = 64 << 20  # bytes of a message's arrays at most


class RoundError(CourseError):
    """A timed-round process failed: it raised, broke the protocol, ran out of time or died.

    Its message reaches a person: the referee turns it into the test's failure message (an
    answer's process) or a grader-problem note (the baseline's, or a referee that lets it
    through).
    """

    def __init__(self, message: str, details: str = "", *, timeout: bool = False) -> None:
        super().__init__(message)
        self.details = details  # the traceback the process sent, if any
        self.timeout = timeout  # it ran out of time (on a CPU no other work disturbed)


class Disturbed(Exception):
    """Other work took the measured CPU from a round process: its time is not its own (a grader problem)."""

    def __init__(
        self,
        message: str,
        disturbance: Disturbance | None,
        seconds: float | None = None,
        result: Message | None = None,
    ) -> None:
        super().__init__(message)
        self.disturbance = disturbance
        self.seconds = seconds  # the round's time when it finished anyway, else None
        self.result = result  # its result then (still fit for checking), else None


@dataclass
class Message:
    """One message from a round process: its JSON header and its arrays as raw bytes."""

    header: dict[str, Any]
    arrays: dict[str, tuple[str, tuple[int, ...], bytes]] = field(default_factory=dict)
    """name -> (dtype name, shape, raw bytes), as the process declared them: check them before use."""


# ----------------------------------------------------------------------------- grader side


class RoundProcess:
    """One fresh jailed process running a measured test's entry (see the module docstring)."""

    def __init__(
        self,
        process: subprocess.Popen,
        workdir: Path,
        log: Path,
        reservation: Reservation,
        group: Path | None = None,
        memory: MemoryBudget | None = None,
    ) -> None:
        self._process = process
        self._workdir = workdir
        self._log = log
        self._group = group  # its freezer group (``pausable``), or None
        self._memory = memory or MemoryBudget()  # the memory budget it and what it starts share (none: inactive)
        self._buffer = b""
        self._ledger = Ledger(reservation, lambda: [process.pid])
        self._realtime = reservation.realtime
        self.disturbance: Disturbance | None = None  # the last round's account of its CPU

    @classmethod
    def start(
        cls,
        setup: dict[str, Any],
        *,
        protections: Protections,
        limits: Limits,
        hide: list[Path],
        slot: int,
        reservation: Reservation,
        base: Path,
        env: dict[str, str] | None = None,
    ) -> RoundProcess:
        """Start the process on ``reservation``'s CPU in a fresh working directory under ``base``; send ``setup``."""
        workdir = Path(tempfile.mkdtemp(prefix="round-", dir=base))
        workdir.chmod(0o700)
        uid = GRADING_UID_BASE + slot if protections.level == "root" else None
        if uid is not None:
            os.chown(workdir, uid, uid)
        log = workdir.with_suffix(".log")
        argv = jail_argv(
            protections,
            limits,
            workdir=workdir,
            connection_file=None,
            hide=hide,
            slot=slot,
            cpu=reservation.cpu,
            realtime=reservation.realtime,
            env=env,
        )
        group, join = pausable_group(reservation.freezer) if reservation.freezer is not None else (None, None)
        memory = budget(protections.level, limits.job_memory_bytes, group)
        die_with_parent = parent_death_signal()

        def before_exec() -> None:
            if join is not None:
                join()
            memory.join()
            if die_with_parent is not None:
                die_with_parent()

        try:
            with open(log, "wb") as stderr:
                process = subprocess.Popen(
                    [*argv, sys.executable, "-I", "-m", "grading.sandbox.rounds"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    cwd=workdir,
                    preexec_fn=before_exec,
                    start_new_session=True,  # without namespaces, close() kills the process group
                )
        except BaseException:
            memory.close()
            if group is not None:
                remove_group(group)
            raise
        memory.attach(process.pid)
        self = cls(process, workdir, log, reservation, group, memory)
        self._write(setup)
        return self

    def __enter__(self) -> RoundProcess:
        return self

    @property
    def pausable(self) -> bool:
        """Whether ``pause()`` can stop this process and all it started (a freezer group; root only)."""
        return self._group is not None

    def pause(self) -> None:
        """Stop this process and every process it started until ``resume()``: none of them runs meanwhile.

        ``Disturbed`` if the kernel could not stop them all within 5 s (a task stuck in the
        kernel): the machine's doing, measure again.
        """
        assert self._group is not None, "not pausable"
        if not pause(self._group, True):
            raise Disturbed("the process could not be paused within 5 s", None)

    def resume(self) -> None:
        assert self._group is not None, "not pausable"
        pause(self._group, False)

    @contextlib.contextmanager
    def resumed(self) -> Iterator[RoundProcess]:
        """Running for the block, paused again after it (when it ends normally)."""
        self.resume()
        yield self
        self.pause()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write(self, payload: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(payload).encode() + b"\n")
            self._process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise RoundError(f"the process ended before it was sent its input{self._why()}") from error

    def _read(self, count: int, deadline: float) -> bytes:
        """Exactly ``count`` bytes from the process, before ``deadline`` (time.perf_counter)."""
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while len(self._buffer) < count:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                raise TimeoutError
            chunk = os.read(fd, max(65536, count - len(self._buffer)))
            if not chunk:
                raise RoundError(f"the process ended without answering{self._why()}")
            self._buffer += chunk
        data, self._buffer = self._buffer[:count], self._buffer[count:]
        return data

    def _message(self, deadline: float) -> Message:
        (size,) = struct.unpack(">I", self._read(4, deadline))
        if size > MAX_HEADER:
            raise RoundError(f"the process sent a {size}-byte header (the protocol allows {MAX_HEADER})")
        try:
            header = json.loads(self._read(size, deadline))
            if not isinstance(header, dict):
                raise TypeError("a header that is not a JSON object")
            listed = [(str(n), str(d), tuple(int(x) for x in s), int(b)) for n, d, s, b in header.get("arrays", [])]
        except (ValueError, TypeError) as error:
            raise RoundError(f"the process broke the protocol ({error})") from error
        sizes = [nbytes for *_, nbytes in listed]
        if (
            any(n < 0 for n in sizes)
            or any(d < 0 for _, _, shape, _ in listed for d in shape)
            or sum(sizes) > MAX_ARRAYS
        ):
            raise RoundError("the process broke the protocol (negative sizes, or arrays over the limit)")
        message = Message(header)
        for name, dtype, shape, nbytes in listed:
            message.arrays[name] = (dtype, shape, self._read(nbytes, deadline))
        if header.get("kind") == "error":
            raise RoundError(str(header.get("message", "the process failed")), str(header.get("details", "")))
        return message

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        """While this thread waits on a real-time round process: one real-time priority above it.

        It shares the process's CPU; at normal priority it would be preempted as soon as it
        sends a task, and wait (runnable) on that CPU until the process blocks, where the
        kernel's fair-server would then run ordinary tasks beside the round. Above it, it
        reaches ``select`` first, and takes the reply the moment it is written.
        """
        if not self._realtime:
            yield
            return
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(REALTIME_PRIORITY + 1))
        try:
            yield
        finally:
            os.sched_setscheduler(0, policy, param)

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Wait for the entry's ``ready`` (its warm-up done); returns what it said."""
        before = self._ledger.sample()
        try:
            with self._waiting():
                message = self._message(time.perf_counter() + timeout)
        except TimeoutError as error:
            self._blame(before, f"the process was not ready within {timeout:.0f} s")
            raise RoundError(
                f"the process was not ready within {timeout:.0f} s (loading and warming up)", timeout=True
            ) from error
        if message.header.get("kind") != "ready":
            raise RoundError("the process broke the protocol (a result before it was ready)")
        self._within_memory()
        return message.header

    def round(self, spec: dict[str, Any], timeout: float, *, timed: bool = True) -> tuple[float, Message]:
        """Send ``spec`` and time the reply: ``(seconds, message)``, seconds by this process's clock.

        Less the time other work had the process's CPU when the kernel accounted it exactly
        (``ledger.Disturbance.correction``). A ``timed`` round (one whose time counts) raises
        ``Disturbed`` when other work took more than that can fairly correct; any round does
        when it ran out of time while other work had that much of its CPU.
        """
        before = self._ledger.sample()
        try:
            with self._waiting():
                start = time.perf_counter()  # the clock runs from before the task is sent
                self._write(spec)
                message = self._message(start + timeout)
                seconds = time.perf_counter() - start
        except TimeoutError as error:
            self._blame(before, f"no result within {timeout:.0f} s")
            raise RoundError(f"no result within {timeout:.0f} s", timeout=True) from error
        if message.header.get("kind") != "result":
            raise RoundError("the process broke the protocol (a second 'ready')")
        self._within_memory()
        self.disturbance = self._ledger.between(before, self._ledger.sample())
        if timed and self.disturbance.substantial():
            raise Disturbed(f"a timed run was disturbed: {self.disturbance}", self.disturbance, seconds, message)
        return seconds - self.disturbance.correction, message

    def _blame(self, before: Sample, what: str) -> None:
        """A wait ran out of time: ``Disturbed`` if other work had a substantial share of the CPU meanwhile.

        With exact accounting, the kernel's fair server alone (at most 5 % of the CPU) is not
        enough: a process that ran out of time with the rest of the CPU did so on its own.
        """
        disturbance = self._ledger.between(before, self._ledger.sample())
        if disturbance.substantial():
            raise Disturbed(f"{what} while {disturbance}", disturbance)

    def _over_memory(self) -> str:
        """Where the budget's OOM killer struck: every process of the group killed, and why, in words; else ""."""
        if not self._memory.killed():
            return ""
        self._memory.kill_all()
        return (
            f"the process and those it started went past the job's memory budget "
            f"({size_text(self._memory.limit)} in all), and were killed"
        )

    def _within_memory(self) -> None:
        """``RoundError`` if the OOM killer struck in the group (it killed a process, even if this one answered)."""
        over = self._over_memory()
        if over:
            raise RoundError(over)

    def _why(self) -> str:
        """Why the process ended: past the memory budget, or the last lines of its log (its traceback, the jail's)."""
        over = self._over_memory()
        if over:
            return f": {over}"
        with contextlib.suppress(OSError):
            tail = self._log.read_bytes()[-1500:].decode("utf-8", "replace").strip()
            if tail:
                return f"; its last output: {tail}"
        return ""

    def close(self) -> None:
        """Kill the process (its PID namespace goes with it) and remove its working directory."""
        if self._group is not None:
            with contextlib.suppress(OSError):
                pause(self._group, False)  # a frozen task dies only once thawed
        if self._process.poll() is None:
            self._process.kill()
        with contextlib.suppress(OSError):
            os.killpg(self._process.pid, 9)  # what it started, where there is no PID namespace
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=10)
        for pipe in (self._process.stdin, self._process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        self._memory.kill_all()  # v1: what it started, where it left the process group (the jail's PID namespace aside)
        shutil.rmtree(self._workdir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self._log.unlink()
        self._memory.close()
        if self._group is not None:
            remove_group(self._group)


def starter(
    protections: Protections,
    limits: Limits,
    hide: list[Path],
    slot: int,
    base: Path,
    reservation: Reservation | None = None,
) -> Callable[[dict[str, Any], str], RoundProcess]:
    """``start(setup, side)`` for ``grading.measure.Rounds``: round processes of one measurement.

    Every process runs on the same CPU, ``reservation``'s (``cpus.reserve``; without one, the
    slot's among those this process may use, not held), with one OpenMP/MKL thread; each
    side ("baseline", "answer") keeps its own compile cache directory under ``base`` from
    one of its processes to the next.
    """
    if reservation is None:
        cpus = sorted(os.sched_getaffinity(0))
        reservation = Reservation(cpus[slot % len(cpus)])
    uid = GRADING_UID_BASE + slot if protections.level == "root" else None
    caches: dict[str, Path] = {}

    def start(setup: dict[str, Any], side: str) -> RoundProcess:
        if side not in caches:
            caches[side] = Path(tempfile.mkdtemp(prefix=f"compile-cache-{side}-", dir=base))
            if uid is not None:
                os.chown(caches[side], uid, uid)
        env = {"TORCHINDUCTOR_CACHE_DIR": str(caches[side]), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        return RoundProcess.start(
            setup,
            protections=protections,
            limits=limits,
            hide=hide,
            slot=slot,
            reservation=reservation,
            base=base,
            env=env,
        )

    return start


if __name__ == "__main__":
    main()
