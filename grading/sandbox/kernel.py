"""The jailed kernel and the client that runs one cell in it under a CPU and a wall-clock limit.

Contract: ``JailedKernelManager`` starts ipykernel behind the jail command over Unix
sockets, joins it to its CPU account (``cputime``) before it runs anything, and can say how
it ended (``exit_status``), discard it with its PID namespace (``discard``) and show the end
of its log (``log_tail``); it also joins the job's memory budget (``memory``), if any.
``CellClient.run_cell(cell, index, store_history, limits)`` runs
one cell and raises ``CpuTimeExceeded`` once the kernel and every process it started used
more than ``limits.cpu`` of CPU time (a watchdog looks every ``WATCH_INTERVAL``),
``WallTimeExceeded`` past ``limits.wall`` of wall-clock time unless the kernel's threads
were held back by other work at least ``HELD_BACK`` of the time (the limit then moves on by
``limits.cpu`` at a time), and nbclient's ``CellTimeoutError`` at ``limits.hard``. Once the
budget's OOM killer has killed one of the kernel's processes (the same watchdog looks, and
again when the cell's reply comes), every process of the kernel is killed and the cell
raises ``MemoryBudgetExceeded`` (a ``DeadKernelError``): the kernel goes as a dead one does,
and ``over_budget()`` says so to the executor whichever way it died. The client
caps each cell's output at ``Limits.output_bytes`` (keeping errors and a stderr note), gives
an error reply without an error output its error back (nbgrader's rule), and after a
timeout can interrupt the kernel and drop what the cell left queued (``interrupted``).
``time_limits`` is the limits a cell gets. What to do when a cell fails is ``execute``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbformat.v4 import new_output

from grading.sandbox.cputime import CellClock, CpuAccount
from grading.sandbox.memory import MemoryBudget
from grading.sandbox.protections import Limits, parent_death_signal

__all__ = [
    "HELD_BACK",
    "PREAMBLE_TIMEOUT",
    "CellClient",
    "CellLimits",
    "CpuTimeExceeded",
    "JailedKernelManager",
    "MemoryBudgetExceeded",
    "WallTimeExceeded",
    "time_limits",
]

PREAMBLE_TIMEOUT = 120.0  # importing torch on a loaded machine; not the learner's time
INTERRUPT_GRACE = 10.0  # seconds a kernel gets to answer after an interrupt before it is killed
# A cell's wall-clock limit, in multiples of its CPU time limit: one that waits (sleeps, or
# blocks on a lock, a process or input) is stopped there, after 4 minutes at the course's 60 s;
# one that needs all its CPU time gets it there with a quarter of a core. One whose threads
# were ready to run but waited for a CPU at least HELD_BACK of a stretch (the run-queue wait
# the kernel's scheduler counts, /proc/<pid>/task/<tid>/schedstat) is held back by the
# machine's load, not waiting: its limit moves on by one CPU limit at a time, up to the
# notebook's. A sleeping or blocked cell waits on no run queue, so its share is about 0.
WALL_FACTOR = 4.0
HELD_BACK = 0.2  # seconds per second of run-queue wait that tell a cell held back by load from one that waits
WATCH_INTERVAL = 0.1  # seconds between two looks at a running cell's CPU time


class CpuTimeExceeded(CellTimeoutError):
    """The cell's kernel (with every process it started) used more CPU time than the cell's limit."""


class WallTimeExceeded(CellTimeoutError):
    """The cell ran past its wall-clock limit without using its CPU time (``held``: its threads' run-queue wait
    per second over its last stretch; under ``HELD_BACK``, the cell was waiting, not held back)."""

    def __init__(self, held: float) -> None:
        super().__init__(f"the cell's wall-clock time limit passed (held back {held:.0%} of the time)")
        self.held = held


class MemoryBudgetExceeded(DeadKernelError):
    """The kernel and the processes it started went past the job's memory budget: every one of them was killed."""


class JailedKernelManager(AsyncKernelManager):
    """A kernel manager that starts ipykernel behind a jail command, talking over Unix sockets."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cpu_account = CpuAccount()  # the kernel's CPU time, from its process tree unless ``configure`` says
        self.memory_budget = MemoryBudget()  # none unless ``configure`` gives one

    def configure(
        self,
        jail: list[str],
        workdir: Path,
        log: Path,
        account: CpuAccount | None = None,
        memory: MemoryBudget | None = None,
    ) -> None:
        """``account`` reads the kernel's CPU time (``cputime.account``; its process tree if None); ``memory`` is
        the memory budget its processes share (``memory.budget``; none if None)."""
        self.cpu_account = account or CpuAccount()
        self.memory_budget = memory or MemoryBudget()
        self._jail = jail
        self._workdir = workdir
        self._log = log
        self.transport = "ipc"
        self.ip = str(workdir / "kernel")
        self.connection_file = str(workdir / "kernel.json")

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        return [
            *self._jail,
            sys.executable,
            "-s",  # no user site-packages: a cell could plant a .pth there for the next kernel
            "-m",
            "ipykernel_launcher",
            "-f",
            self.connection_file,
            "--HistoryManager.hist_file=:memory:",
        ]

    async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]  # async, as AsyncKernelManager's is
        log = open(self._log, "ab")  # noqa: SIM115 (the kernel process keeps it)
        die_with_parent, join, join_budget = parent_death_signal(), self.cpu_account.join, self.memory_budget.join

        def prepare() -> None:  # in the kernel's process, before it runs anything
            join()
            join_budget()
            if die_with_parent is not None:
                die_with_parent()

        kw.update(stdin=None, stdout=log, stderr=log, cwd=str(self._workdir), preexec_fn=prepare)
        try:
            await self._async_start_kernel(**kw)
        finally:
            log.close()
        process = getattr(self.provisioner, "process", None)
        if process is not None:
            self.cpu_account.attach(process.pid)
            self.memory_budget.attach(process.pid)

    def exit_status(self) -> int | None:
        process = getattr(self.provisioner, "process", None)
        return process.poll() if process is not None else None

    def discard(self) -> None:
        """nbclient leaves a kernel it did not start running: kill it (its PID namespace goes with it)."""
        try:
            if self.has_kernel:
                run_sync(self.shutdown_kernel)(now=True)
        except Exception:  # already dead, or never started
            process = getattr(self.provisioner, "process", None)
            if process is not None and process.poll() is None:
                process.kill()
        self.memory_budget.close()
        self.cpu_account.close()

    def log_tail(self) -> str:
        """The end of the kernel's log, for a note on why it failed ("" if there is none)."""
        try:
            text = Path(self._log).read_bytes()[-600:].decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"Kernel log: {text}" if text else ""


class CellClient(NotebookClient):
    """nbclient with an output cap, nbgrader's rule for suppressed tracebacks, and a CPU time limit."""

    def __init__(self, nb: NotebookNode, km: JailedKernelManager, limits: Limits):
        super().__init__(
            nb,
            km=km,
            timeout=int(limits.cell_timeout),
            allow_errors=True,
            interrupt_on_timeout=False,
            raise_on_iopub_timeout=False,
            iopub_timeout=2,
            record_timing=False,
            startup_timeout=int(PREAMBLE_TIMEOUT),
            shutdown_kernel="immediate",
        )
        self._cap = limits.output_bytes
        self._used: dict[int, int] = {}
        self.on_cell_executed = self._restore_error
        self._reader: asyncio.Task | None = None
        self.clock = CellClock(km.cpu_account)
        self._limits: CellLimits | None = None

    def run_cell(self, cell: NotebookNode, index: int, store_history: bool, limits: CellLimits) -> None:
        """Execute ``cell``: ``CpuTimeExceeded``, ``WallTimeExceeded`` or (at ``limits.hard``) ``CellTimeoutError``."""
        self.timeout, self._limits = max(1, int(limits.hard)), limits
        self.clock.restart()
        self.execute_cell(cell, index, store_history=store_history)

    async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive):
        reply = asyncio.ensure_future(
            super()._async_poll_for_reply(msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive)
        )
        watchdog = asyncio.ensure_future(self._watch(self._limits))
        try:
            await asyncio.wait({reply, watchdog}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # the cell ended, a limit passed, or the kernel died (nbclient cancels this task)
            for task in (reply, watchdog):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        if reply.done() and not reply.cancelled():
            if self.over_budget():  # a process of the kernel's was killed for memory while the cell ran
                task_poll_kernel_alive.cancel()
                raise MemoryBudgetExceeded("the kernel went past the job's memory budget")
            return reply.result()
        task_poll_kernel_alive.cancel()
        raise watchdog.result()

    def over_budget(self) -> bool:
        """Whether the kernel's processes went past the job's memory budget; if so, every one of them is killed."""
        budget = self.km.memory_budget if isinstance(self.km, JailedKernelManager) else None
        if budget is None or not budget.killed():
            return False
        budget.kill_all()
        return True

    async def _watch(self, limits: CellLimits | None) -> CellTimeoutError | DeadKernelError:
        """Return the error to raise once the kernel went past its memory budget, or the cell past its CPU or its
        wall-clock limit (never without ``cpu``)."""
        budgeted = isinstance(self.km, JailedKernelManager) and self.km.memory_budget.active
        timed = limits is not None and limits.cpu is not None
        if not budgeted and not timed:
            await asyncio.Event().wait()  # nbclient's timeout (``hard``) alone
        stretch = self.clock.start
        ends = stretch.wall + (limits.wall if limits is not None else 0.0)
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            if budgeted and self.over_budget():
                return MemoryBudgetExceeded("the kernel went past the job's memory budget")
            if limits is None or limits.cpu is None:
                continue
            if self.clock.cpu() > limits.cpu:
                return CpuTimeExceeded(f"the cell used more than {limits.cpu:.0f} s of CPU time")
            if time.monotonic() < ends:
                continue
            held = self.clock.held_back(stretch)
            if held < HELD_BACK:
                return WallTimeExceeded(held)
            stretch, ends = self.clock.mark(), ends + limits.cpu  # held back by the load: not the cell's doing

    def output(self, outs, msg, display_id, cell_index):
        size = len(json.dumps(msg.get("content", {}), default=str))
        used = self._used.get(cell_index, 0)
        self._used[cell_index] = used + size
        if used + size <= self._cap:
            return super().output(outs, msg, display_id, cell_index)
        # Over the cap: drop the output, but keep what decides a grade (an error, any stderr).
        if used <= self._cap:
            note = f"\n[output truncated by the grader: more than {self._cap // 1000} kB]\n"
            outs.append(new_output("stream", name="stdout", text=note))
        content = msg.get("content", {})
        if msg.get("msg_type") == "error":
            traceback = [str(line)[:1000] for line in content.get("traceback", [])[-20:]]
            ename, evalue = str(content.get("ename", "Error"))[:200], str(content.get("evalue", ""))[:1000]
            outs.append(new_output("error", ename=ename, evalue=evalue, traceback=traceback))
        elif (
            msg.get("msg_type") == "stream"
            and content.get("name") == "stderr"
            and not any(o.get("name") == "stderr" and "truncated" in o.get("text", "") for o in outs)
        ):
            outs.append(new_output("stream", name="stderr", text="[stderr output truncated by the grader]\n"))
        return None

    # nbclient's private reader (0.11.0, pinned in environment.yml): kept so that stop_reading can end it
    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
        self._reader = asyncio.current_task()
        return await super()._async_poll_output_msg(parent_msg_id, cell, cell_index)

    async def stop_reading(self) -> None:
        """Wait until the timed-out cell's output reader is gone (nbclient only asks it to stop).

        A reader that is cancelled but not yet finished still holds a receive on IOPub: what
        it takes is lost to the next reader, or leaves that reader waiting for ever.
        """
        task, self._reader = self._reader, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def drop_output_until_idle(self, msg_id: str, until: float) -> bool:
        """Read and drop IOPub messages up to the kernel's idle status for ``msg_id``.

        False if it has not come by ``until`` (monotonic). Contents are left unparsed (a
        flood's messages run to tens of MB each); signatures are still checked.
        """
        assert self.kc is not None, "no kernel client: setup_kernel() first"
        channel = self.kc.iopub_channel
        session = channel.session
        while (left := until - time.monotonic()) > 0:
            if not await channel.socket.poll(left * 1000):
                return False
            _, frames = session.feed_identities(await channel.socket.recv_multipart())
            msg = session.deserialize(frames, content=False)
            ours = msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
            if ours and session.unpack(msg["content"]).get("execution_state") == "idle":
                return True
        return False

    def _restore_error(self, cell, cell_index, execute_reply):
        content = execute_reply.get("content", {})
        if content.get("status") != "error":
            return
        if not any(o.get("output_type") == "error" for o in cell.outputs):
            cell.outputs.append(
                new_output(
                    "error",
                    ename=content.get("ename", "Error"),
                    evalue=content.get("evalue", ""),
                    traceback=content.get("traceback") or ["(the submission suppressed this traceback)"],
                )
            )

    def interrupted(self, km: JailedKernelManager, limit: float, deadline: float) -> bool:
        """Interrupt the kernel after a timeout; True when it answers again (a probe cell runs).

        The output the timed-out cell left queued is read and dropped up to the probe's end (a
        flood leaves seconds of it, and reading it may take as long as the cell's ``limit``):
        left queued, it would hold the next cell's output past nbclient's IOPub wait, and a
        grader check whose answer is lost reads as a submission that replaced the check.
        """
        grace = min(INTERRUPT_GRACE, deadline - time.monotonic())
        if grace < 1:
            return False
        try:
            run_sync(self.stop_reading)()
            run_sync(km.interrupt_kernel)()
            self.timeout = int(grace)
            assert self.kc is not None, "no kernel client: setup_kernel() first"
            probe = self.kc.execute("pass", silent=True, store_history=False)
            if self.wait_for_reply(probe) is None:
                return False
            until = min(deadline, time.monotonic() + max(grace, limit))
            return run_sync(self.drop_output_until_idle)(probe, until)
        except Exception:  # no answer, or the kernel died: the caller restarts it
            return False


@dataclass(frozen=True)
class CellLimits:
    """A cell's limits in seconds: CPU time (None: wall-clock only), wall-clock, and the notebook's time left."""

    cpu: float | None
    wall: float
    hard: float


def time_limits(kind: str | None, cell_timeout: float, remaining: float) -> CellLimits:
    """The grader's preamble has a wall-clock limit only; other cells ``cell_timeout`` of CPU time and
    ``WALL_FACTOR`` times that of wall-clock time, none past the ``remaining`` time of the notebook."""
    if kind == "preamble":
        return CellLimits(None, PREAMBLE_TIMEOUT, PREAMBLE_TIMEOUT)
    return CellLimits(min(cell_timeout, remaining), min(WALL_FACTOR * cell_timeout, remaining), remaining)
