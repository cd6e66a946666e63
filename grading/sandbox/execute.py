"""Run one prepared notebook in a jailed kernel, whatever the learner's code does.

Contract: ``execute(nb, ...)`` runs every code cell in order in a kernel started through
the jail, and always returns: each cell's outputs (capped at ``Limits.output_bytes`` per
cell), plus notes in plain words for the feedback. When a cell exceeds its time limit or
the kernel dies (``os._exit``, a segfault, ``exit()``, the memory limit), that cell gets an
error output saying so. A cell's time limit (``Limits.cell_timeout``) is CPU time: what its
kernel and every process the kernel started used during the cell (``cputime``; a watchdog
looks every ``WATCH_INTERVAL``), so other work on the machine does not make a correct cell
fail. A cell that uses little CPU but does not finish (sleeping, blocked) is stopped at
``WALL_FACTOR`` times its limit of wall-clock time, a limit that moves on while the cell is
held back by other work (its kernel's threads ready to run but waiting for a CPU at least
``HELD_BACK`` of the time: ``CpuAccount.waited``); a cell that the notebook's limit stops while
it was held back so gets a grader-problem note, not a verdict on the code, and a cell that
slept or blocked is told so. No cell outlasts the notebook's wall-clock time limit
(``Limits.notebook_timeout``); the grader's preamble has a wall-clock limit only
(``PREAMBLE_TIMEOUT``). A cell over its time limit is first interrupted, as nbgrader does
(the kernel keeps what the cell did before the interrupt and grading goes on in it); when
the kernel does not answer the interrupt, or dies, a fresh kernel replays the cells that
had run and grading goes on from the next cell, up to ``Limits.restarts`` times and within
the notebook's time limit; cells that could not run get an error output, so a test that
never ran never scores. When a guard cell finds patched comparison functions, every
remaining test cell fails with the guard's message, without running; when the closing cell
after a test finds that something changed while the test ran, that test fails too; when a
test cell meets an object that lies (``guard``), it fails and the notes say what was found.
Test cells run with ``store_history=False`` (not in ``In``, ``_ih`` or the history). A reply
with status "error" but no error output (a suppressed traceback) gets its error output
back, as nbgrader does.

Whatever the kernel did, no output leaves with the text of a hidden test in it: every
output of every cell is searched for the hidden lines ``sanitize`` recorded on each test
cell (as printed, as a ``repr``, as HTML); an output that holds one is replaced by a note,
and the test whose hidden lines it showed scores 0 (the learner's cell stays, as evidence).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbformat.v4 import new_output

from grading.guard import digest
from grading.sandbox.cputime import CellClock, CpuAccount
from grading.sandbox.leaks import keep_hidden_tests_out, label
from grading.sandbox.protections import Limits, parent_death_signal
from grading.sanitize import fail_cell, is_test, role

__all__ = ["GRADER_PROBLEM", "JailedKernelManager", "drop_profiler_chatter", "execute"]

GRADER_PROBLEM = "Grader problem"  # notes that start so are the grader's fault, not the learner's

BYPASSED = "the grader's integrity check did not answer (the submission replaced it): the tests cannot be trusted"
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


class JailedKernelManager(AsyncKernelManager):
    """A kernel manager that starts ipykernel behind a jail command, talking over Unix sockets."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cpu_account = CpuAccount()  # the kernel's CPU time, from its process tree unless ``configure`` says

    def configure(self, jail: list[str], workdir: Path, log: Path, account: CpuAccount | None = None) -> None:
        """``account`` reads the kernel's CPU time (``cputime.account``; its process tree if None)."""
        self.cpu_account = account or CpuAccount()
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

    async def start_kernel(self, **kw):  # type: ignore[override]
        log = open(self._log, "ab")  # noqa: SIM115 (the kernel process keeps it)
        die_with_parent, join = parent_death_signal(), self.cpu_account.join

        def prepare() -> None:  # in the kernel's process, before it runs anything
            join()
            if die_with_parent is not None:
                die_with_parent()

        kw.update(stdin=None, stdout=log, stderr=log, cwd=str(self._workdir), preexec_fn=prepare)
        try:
            started = await self._async_start_kernel(**kw)
        finally:
            log.close()
        process = getattr(self.provisioner, "process", None)
        if process is not None:
            self.cpu_account.attach(process.pid)
        return started

    def exit_status(self) -> int | None:
        process = getattr(self.provisioner, "process", None)
        return process.poll() if process is not None else None


class _Client(NotebookClient):
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
        self._limits: _CellLimits | None = None

    def run_cell(self, cell: NotebookNode, index: int, store_history: bool, limits: _CellLimits) -> None:
        """Execute ``cell``: ``CpuTimeExceeded``, ``WallTimeExceeded`` or (at ``limits.hard``) ``CellTimeoutError``."""
        self.timeout, self._limits = max(1, int(limits.hard)), limits
        self.clock.restart()
        self.execute_cell(cell, index, store_history=store_history)

    async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive):  # type: ignore[override]
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
            return reply.result()
        task_poll_kernel_alive.cancel()
        raise watchdog.result()

    async def _watch(self, limits: _CellLimits | None) -> CellTimeoutError:
        """Return the error to raise once the cell is over its CPU or its wall-clock limit (never without ``cpu``)."""
        if limits is None or limits.cpu is None:
            await asyncio.Event().wait()  # nbclient's timeout (``hard``) alone
        assert limits is not None and limits.cpu is not None
        stretch, ends = self.clock.start, self.clock.start.wall + limits.wall
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            if self.clock.cpu() > limits.cpu:
                return CpuTimeExceeded(f"the cell used more than {limits.cpu:.0f} s of CPU time")
            if time.monotonic() < ends:
                continue
            held = self.clock.held_back(stretch)
            if held < HELD_BACK:
                return WallTimeExceeded(held)
            stretch, ends = self.clock.mark(), ends + limits.cpu  # held back by the load: not the cell's doing

    def output(self, outs, msg, display_id, cell_index):  # type: ignore[override]
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
    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):  # type: ignore[override]
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


# torch's profiler (kineto) writes progress lines such as
# "USDT:2026-01-01 12:00:00 42:42 SyncActivityProfilerHandler.cpp:52] profiler_start" to the
# process's stderr, and no setting turns them off. nbgrader fails any test cell with stderr
# output, so a correct answer that runs the profiler would score 0: these lines, and only
# these, are removed before grading.
_PROFILER_CHATTER = re.compile(r"^(USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] .*\n?", re.M)


def drop_profiler_chatter(nb: NotebookNode) -> None:
    """Remove kineto's progress lines from stderr outputs (and stderr outputs left empty)."""
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output["text"] = _PROFILER_CHATTER.sub("", output.get("text", ""))
                if not output["text"]:
                    continue
            kept.append(output)
        cell.outputs = kept


def _size(count: int) -> str:
    return f"{count / (1 << 30):g} GiB" if count >= 1 << 30 else f"{count / (1 << 20):g} MiB"


def _limit_signatures(limits: Limits) -> list[tuple[re.Pattern, str]]:
    """Error texts that a sandbox limit causes, and the limit in plain words."""
    return [
        (
            re.compile(r"No space left on device|\[Errno 28\]"),
            f"the sandbox's temporary disk is full: a notebook and the files it writes (its TMPDIR, "
            f"torch.compile's C++ builds included) get {_size(limits.disk_bytes)} in all",
        ),
        (
            re.compile(r"File too large|File size limit exceeded|\[Errno 27\]"),
            f"a file reached the sandbox's limit of {_size(limits.file_bytes)}",
        ),
        (
            re.compile(r"MemoryError|Cannot allocate memory|\[Errno 12\]|bad_alloc|can't allocate memory"),
            f"the sandbox's memory limit was reached ({_size(limits.memory_bytes)} of address space)",
        ),
        (
            re.compile(r"can't start new thread|\[Errno 11\] Resource temporarily unavailable"),
            f"the sandbox's limit of {limits.processes} processes and threads was reached",
        ),
        (
            re.compile(r"Network is unreachable|Temporary failure in name resolution|Name or service not known"),
            "the grading sandbox has no network (only the loopback interface)",
        ),
    ]


def explain_limits(nb: NotebookNode, limits: Limits, notes: list[str]) -> None:
    """Say in plain words when an error comes from a sandbox limit (which limit, how much).

    The explanation goes at the end of the error message's first line, the line that
    ``course validate`` and the feedback show, and into the notes.
    """
    signatures = _limit_signatures(limits)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if output.get("output_type") != "error":
                continue
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}\n" + "\n".join(output.get("traceback", []))
            why = next((words for pattern, words in signatures if pattern.search(text)), None)
            if why is None or "[grading sandbox:" in str(output.get("evalue", "")):
                continue
            first, newline, rest = str(output.get("evalue", "")).partition("\n")
            output["evalue"] = f"{first} [grading sandbox: {why}]{newline}{rest}"
            notes.append(f"{label(nb, index)}: {why}.")


def _has_error(cell: NotebookNode) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return str(output.get("evalue", ""))
    return None


def _exit_words(status: int | None) -> str:
    if status is None:
        return "the kernel stopped responding"
    if status < 0 or status > 128:
        number = -status if status < 0 else status - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        words = {"SIGSEGV": "a segmentation fault", "SIGKILL": "SIGKILL (a resource limit)", "SIGXCPU": "the CPU limit"}
        return f"the kernel was killed by {words.get(name, name)}"
    return f"the kernel exited with status {status} (os._exit, exit() or quit())"


def execute(
    nb: NotebookNode,
    new_kernel: Callable[[], JailedKernelManager],
    limits: Limits,
    notes: list[str],
    token: str | None = None,
    skip: frozenset[int] = frozenset(),
) -> NotebookNode:
    """Run ``nb`` (with grader cells) in place; append what went wrong to ``notes``.

    ``token`` is the secret each new kernel finds in ``guard.TOKEN_FILE``: every guard cell
    must answer with its ``guard.digest``. The cells at the indices in ``skip`` (measured
    tests, which the grader decides outside the kernel) are not run.
    """
    _run(nb, new_kernel, limits, notes, token, skip)
    drop_profiler_chatter(nb)
    explain_limits(nb, limits, notes)
    keep_hidden_tests_out(nb, notes)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if is_test(cell) else []:
            if output.get("ename") == "GradingIntegrityError" and str(output.get("evalue", "")).startswith("the test"):
                notes.append(f"{label(nb, index)}: {output['evalue']}.")
    return nb


def _answered(cell: NotebookNode, expected: str) -> bool:
    """Whether a grader cell's result is the expected digest (its ``execute_result``)."""
    return any(
        output.get("output_type") == "execute_result" and output.get("data", {}).get("text/plain") == repr(expected)
        for output in cell.get("outputs", [])
    )


def _run(
    nb: NotebookNode,
    new_kernel: Callable[[], JailedKernelManager],
    limits: Limits,
    notes: list[str],
    token: str | None,
    skip: frozenset[int] = frozenset(),
) -> NotebookNode:
    deadline = time.monotonic() + limits.notebook_timeout
    skip = _with_grader_cells(nb, skip)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip() and i not in skip]
    history: list[int] = []
    unfinished: set[int] = set()  # test cells that timed out or crashed
    position, restarts = 0, 0

    def give_up(reason: str) -> None:
        for index in code[position:]:
            cell = nb.cells[index]
            if is_test(cell) or cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                fail_cell(cell, "NotRun", reason)

    while position < len(code):
        km = new_kernel()
        client = _Client(nb, km, limits)
        replaying = True
        try:
            with client.setup_kernel():
                for index in history:  # replay after a restart, outputs discarded
                    given = _time_limits(role(nb.cells[index]), limits.cell_timeout, limits.notebook_timeout)
                    client.run_cell(copy.deepcopy(nb.cells[index]), index, not is_test(nb.cells[index]), given)
                replaying = False
                while position < len(code):
                    index = code[position]
                    cell = nb.cells[index]
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        notes.append(f"The notebook used up its {limits.notebook_timeout:.0f} s time limit.")
                        give_up("not run: the notebook's time limit was used up")
                        return nb
                    kind = role(cell)
                    given = _time_limits(kind, limits.cell_timeout, remaining)
                    try:
                        client.run_cell(cell, index, not is_test(cell), given)
                    except CellTimeoutError as stop:
                        notes.append(_over_time(cell, label(nb, index), client.clock, given, stop))
                        _unfinished(nb, index, history, unfinished)
                        if kind is None and _interrupted(client, km, given.cpu or given.wall, deadline):
                            position += 1  # the kernel keeps what the cell did before the interrupt, as in nbgrader
                            continue
                        raise
                    except DeadKernelError:
                        _unfinished(nb, index, history, unfinished)
                        words = _exit_words(km.exit_status())
                        fail_cell(cell, "KernelDied", words)
                        notes.append(f"Cell {label(nb, index)}: {words}.")
                        raise
                    if kind == "preamble" and _has_error(cell):
                        notes.append(f"{GRADER_PROBLEM}: the grader's preamble failed ({_has_error(cell)}).")
                        position += 1
                        give_up("not run: the grader's preamble failed")
                        return nb
                    phase = "check" if kind == "guard" else "close"
                    if (
                        kind in ("guard", "close")
                        and not _has_error(cell)
                        and not _answered(cell, digest(token, index, phase))
                    ):
                        fail_cell(cell, "GradingIntegrityError", BYPASSED)
                    if kind in ("guard", "close") and _has_error(cell):
                        _untrusted_from(nb, code, position, _has_error(cell) or "tampering detected", notes)
                        return nb
                    if not (kind == "close" and index - 1 in unfinished):
                        history.append(index)  # a test that did not finish is not replayed, nor its check and close
                    position += 1
        except (CellTimeoutError, DeadKernelError):
            if replaying:
                notes.append("Replaying the earlier cells in a fresh kernel failed; grading stopped there.")
                give_up("not run: the kernel could not be restored after a crash")
                return nb
            kind = role(nb.cells[code[position]])
            if kind == "preamble":
                notes.append(f"{GRADER_PROBLEM}: the grader's preamble did not finish.")
                give_up("not run: the grader's preamble did not finish")
                return nb
            if kind in ("guard", "close"):  # the integrity check itself was made to hang or crash
                message = "the grader's integrity check could not run, so the tests cannot be trusted"
                _untrusted_from(nb, code, position, message, notes)
                return nb
            position += 1  # the failing cell is marked; carry on after it in a fresh kernel
            if position < len(code) and role(nb.cells[code[position]]) == "close":
                position += 1  # the test did not finish: its closing cell has nothing to close in a fresh kernel
            restarts += 1
            if restarts > limits.restarts:
                notes.append(f"Stopped after {limits.restarts} kernel restarts.")
                give_up("not run: too many kernel crashes or timeouts before this cell")
                return nb
        except Exception as error:  # the kernel could not start, or replay failed
            failure = f"{GRADER_PROBLEM}: the grading kernel failed ({type(error).__name__}: {error})."
            notes.append(f"{failure} {_tail(km)}".strip())
            give_up(f"not run: the grading kernel failed ({type(error).__name__})")
            return nb
        finally:
            _kill(km)
    return nb


@dataclass(frozen=True)
class _CellLimits:
    """A cell's limits in seconds: CPU time (None: wall-clock only), wall-clock, and the notebook's time left."""

    cpu: float | None
    wall: float
    hard: float


def _time_limits(kind: str | None, cell_timeout: float, remaining: float) -> _CellLimits:
    """The grader's preamble has a wall-clock limit only; other cells ``cell_timeout`` of CPU time and
    ``WALL_FACTOR`` times that of wall-clock time, none past the ``remaining`` time of the notebook."""
    if kind == "preamble":
        return _CellLimits(None, PREAMBLE_TIMEOUT, PREAMBLE_TIMEOUT)
    return _CellLimits(min(cell_timeout, remaining), min(WALL_FACTOR * cell_timeout, remaining), remaining)


def _over_time(cell: NotebookNode, name: str, clock: CellClock, limits: _CellLimits, stop: Exception) -> str:
    """Fail a cell stopped by a time limit; the note says which limit, and whether the machine's load may have."""
    used, held = clock.cpu(), stop.held if isinstance(stop, WallTimeExceeded) else clock.held_back()
    if isinstance(stop, CpuTimeExceeded):
        why = (
            f"the cell exceeded its {limits.cpu:.0f} s time limit (CPU time of its kernel and the processes it started)"
        )
        note = f"Cell {name} exceeded its {limits.cpu:.0f} s time limit ({used:.1f} s of CPU time)."
    elif limits.cpu is None:  # the grader's preamble
        why = f"the cell exceeded its {limits.wall:.0f} s time limit"
        note = f"Cell {name} exceeded its {limits.wall:.0f} s time limit."
    else:
        limit = f"its {limits.wall:.0f} s wall-clock" if isinstance(stop, WallTimeExceeded) else "the notebook's"
        done = (
            f"did not finish within {limit} time limit, having used {used:.1f} s of its {limits.cpu:.0f} s of CPU time"
        )
        why = f"the cell {done}: it was waiting (sleeping, or blocked on a lock, a process or input)"
        note = f"Cell {name} {done}: it was waiting (sleeping, or blocked on a lock, a process or input)."
        if held >= HELD_BACK:  # it was ready to run and did not get a CPU: held back, not waiting
            why = f"the cell {done}, held back by other work on the grading machine (a grader problem, not the code's)"
            note = (
                f"{GRADER_PROBLEM}: cell {name} {done}, while its kernel waited for a CPU {held:.0%} of the time: "
                "the machine's load stopped it; grade it again on a quieter machine (--force)."
            )
    fail_cell(cell, "CellTimeoutError", why)
    return note


def _unfinished(nb: NotebookNode, index: int, history: list[int], unfinished: set[int]) -> None:
    """A test cell did not finish: a fresh kernel must not replay the check that armed it."""
    if is_test(nb.cells[index]):
        unfinished.add(index)
        if history and history[-1] == index - 1 and role(nb.cells[index - 1]) == "guard":
            history.pop()


def _with_grader_cells(nb: NotebookNode, skip: frozenset[int]) -> frozenset[int]:
    """The test cells in ``skip`` and the grader's check and closing cells around each."""
    around = set(skip)
    for index in skip:
        for neighbour in (index - 1, index + 1):
            if 0 <= neighbour < len(nb.cells) and role(nb.cells[neighbour]) in ("guard", "close"):
                around.add(neighbour)
    return frozenset(around)


def _untrusted_from(nb: NotebookNode, code: list[int], position: int, message: str, notes: list[str]) -> None:
    """A grader cell found tampering: fail every test from here on (and the test a closing cell closes)."""
    index = code[position]
    if role(nb.cells[index]) == "close" and index > 0 and is_test(nb.cells[index - 1]):
        notes.append(f"During {label(nb, index - 1)}: {message}.")
        fail_cell(nb.cells[index - 1], "GradingIntegrityError", message)
    else:
        notes.append(f"Before {label(nb, index + 1)}: {message}.")
    for later in code[position + 1 :]:
        if is_test(nb.cells[later]):
            fail_cell(nb.cells[later], "GradingIntegrityError", message)


def _interrupted(client: _Client, km: JailedKernelManager, limit: float, deadline: float) -> bool:
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
        run_sync(client.stop_reading)()
        run_sync(km.interrupt_kernel)()
        client.timeout = int(grace)
        probe = client.kc.execute("pass", silent=True, store_history=False)
        if client.wait_for_reply(probe) is None:
            return False
        until = min(deadline, time.monotonic() + max(grace, limit))
        return run_sync(client.drop_output_until_idle)(probe, until)
    except Exception:  # no answer, or the kernel died: the caller restarts it
        return False


def _kill(km: JailedKernelManager) -> None:
    """nbclient leaves a kernel it did not start running: kill it (its PID namespace goes with it)."""
    try:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # already dead, or never started
        process = getattr(km.provisioner, "process", None)
        if process is not None and process.poll() is None:
            process.kill()
    km.cpu_account.close()


def _tail(km: JailedKernelManager) -> str:
    try:
        text = Path(km._log).read_bytes()[-600:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f"Kernel log: {text}" if text else ""
